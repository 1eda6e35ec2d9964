"""checkpoint (not written yet): per forward/adjoint loop pair, whole-loop alternatives
`GradLoop(policy)` for the taped residuals: store-all (what AD writes today), every-k
(sqrt), binomial Revolve(s) when the trip count is known before the loop, online
(Stumm-Walther) or doubling for `while`, recompute-all (DESIGN §5).

Dropping one tape write is a non-local decision (the adjoint loop must recompute what
it no longer pops), so these will be Python loop transformers, like
`fuse-shared-operand-matmuls` (rules/fusion.py), that union a whole alternative loop
pair into the classes of the old one; the cost model then picks one policy per loop
under `memory_budget`. Until then the family has no rules and the schedule skips it.
"""
from __future__ import annotations

from .registry import family

CHECKPOINT = family("checkpoint", __doc__, todo="GradLoop policies: store-all, every-k, Revolve, online, recompute")

"""checkpoint: per-loop GradLoop policies for the taped residuals (DESIGN §5).

Written today, outside the e-graph: `egad.optimize(..., memory_budget=bytes)` plans
one policy per top-level `for` loop with a static trip count (egad/ad/checkpoint.py:
store-all where the budget allows, else every-k checkpointing with the k that fits,
nested over as many levels as the budget needs) and differentiates the segmented
program, whose adjoint recomputes each segment's residuals from its checkpointed
state; the e-graph then optimizes that gradient.

Still to do, and why it would live here: the policies as whole-loop alternatives in
the e-graph (Python loop transformers, like `fuse-shared-operand-matmuls` in
rules/fusion.py, that union a checkpointed loop pair into the classes of the
store-all one), so that the cost model weighs recomputation against the other
rewrites; binomial Revolve(s) when the trip count is known before the loop, and
online (Stumm-Walther) or doubling policies for `while` loops.
"""
from __future__ import annotations

from .registry import family

CHECKPOINT = family("checkpoint", __doc__, todo="policies as e-graph alternatives; Revolve; online/doubling for while "
                    "(every-k runs outside the e-graph: egad/ad/checkpoint.py, memory_budget=)")

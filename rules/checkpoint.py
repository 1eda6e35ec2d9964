"""checkpoint: per-loop GradLoop policies for the taped residuals (DESIGN §5).

Written today, outside the e-graph: `egad.optimize(..., memory_budget=bytes)` plans
one policy per top-level `for` loop with a static trip count and per top-level
`while` loop (egad/ad/checkpoint.py: store-all where the budget allows, else every-k
checkpointing with the k that fits, nested over as many levels as the budget needs;
a `while` loop's k is planned for the trips it runs on the example inputs) and
differentiates the segmented program, whose adjoint recomputes each segment's
residuals from its checkpointed state; the e-graph then optimizes that gradient.

Still to do, and why it would live here: the policies as whole-loop alternatives in
the e-graph (Python loop transformers, like `fuse-shared-operand-matmuls` in
rules/fusion.py, that union a checkpointed loop pair into the classes of the
store-all one), so that the cost model weighs recomputation against the other
rewrites; binomial Revolve(s) when the trip count is known before the loop, and
online (Stumm-Walther) policies that bound a `while` loop's checkpoints for any T.
"""
from __future__ import annotations

from .registry import family

CHECKPOINT = family("checkpoint", __doc__, todo="policies as e-graph alternatives; Revolve; online policies for while "
                    "(every-k, for and while, runs outside the e-graph: egad/ad/checkpoint.py, memory_budget=)")

"""batching: per-step work on rows of an invariant table becomes one batched op before the loop.

The cuDNN RNN trick, found by rewriting: in `h = tanh(xs[t] @ U + h @ W)` the input
projection `xs[t] @ U` depends on the step only through the row `xs[t]` of the
invariant `xs`, so `xs @ U` can be computed once, as one large matmul, and the loop
reads its rows: `take(X, i) @ U -> take(X @ U, i)`. No rule moves anything: the new
`X @ U` reads no `Arg` of the loop, so decoding places it before the loop
(egad/egraph/placement.py), and only the row read stays inside.

Assumes `take` along axis 0 and the `invariant_in`/`rank_of` facts of
egad/egraph/analysis.py. Shapes: for X of rank >= 2 and U of rank 1 or 2, axis 0 of X
is never the contracted axis and `X @ U` keeps it in front, so taking rows commutes
with the product (any index shape). The batched op computes rows the loop may never
read (a loop that stops early): the cost model weighs that; only total functions are
batched, so no unread row can raise. A take out of range raises in both forms.
"""
from __future__ import annotations

from egglog import i64, var, vars_

from egad.egraph.analysis import invariant_in, rank_of
from egad.egraph.language import Term, op

from .registry import family, rewrite

BATCHING = family("batching", __doc__)

table, weights, index = vars_("table weights index", Term)
loop = var("loop", i64)

BATCHING.rewrites(
    "batch-input-projection", "take(X, i) @ U = take(X @ U, i) for invariant X, U: one batched matmul "
                              "before the loop instead of one small matmul per step",
    rewrite(op.matmul(op.take(table, index, axis=0), weights)).to(
        op.take(op.matmul(table, weights), index, axis=0), invariant_in(table, loop), invariant_in(weights, loop),
        rank_of(table) >= i64(2), rank_of(weights) <= i64(2)))

# Elementwise functions defined (and finite) everywhere, so rows the loop never reads cannot fail.
_TOTAL_UNARY = ("neg", "abs", "tanh", "sigmoid", "sin", "cos")

BATCHING.rewrites(
    "batch-elementwise-rows", "f(take(X, i)) = take(f(X), i) for an invariant X and an elementwise total f: "
                              "one kernel over all rows before the loop",
    *(rewrite(getattr(op, name)(op.take(table, index, axis=0))).to(
        op.take(getattr(op, name)(table), index, axis=0), invariant_in(table, loop))
      for name in _TOTAL_UNARY))

"""loop_invariant: expose loop-invariant work, so that placement can hoist it.

Most loop-invariant code motion needs no rule in this encoding. A loop body refers
directly to the outer e-classes it reads (egad/egraph/encoding.py), so a value that
reads no `Arg` of the loop *is* the outer computation, and decoding places it before
the loop (egad/egraph/placement.py: each node goes to the outermost scope where its
inputs exist). `W.T` read inside the reverse loop of an RNN gradient, for instance,
is computed once before that loop with no rule at all.

The rules here handle what placement cannot see: invariant work tangled with
per-iteration values by the order of operations. They reassociate so that the
invariant part becomes a subterm of its own, which placement then hoists. They
assume the `invariant_in(x, r)` facts of egad/egraph/analysis.py (x is read inside
loop r and reads none of r's Args) and keep shapes: the broadcast shape of a product
does not depend on its association, and matmul associates for rank-2 factors.
Reassociating floats rounds differently, and where an intermediate overflows the
two orders differ beyond rounding ((h * 2) * 0.5 is inf for h = 3e38 in float32,
h * (2 * 0.5) is h); the cost model decides if it pays.
"""
from __future__ import annotations

from egglog import eq, i64, var, vars_

from egad.egraph.analysis import invariant_in, rank_of
from egad.egraph.language import Term, op

from .registry import family, rewrite

LOOP_INVARIANT = family("loop_invariant", __doc__)

v, a, b, table, index = vars_("v a b table index", Term)
loop = var("loop", i64)

LOOP_INVARIANT.rewrites(
    "hoist-invariant-factors", "(v * a) * b = v * (a * b): a product of two invariants is computed once "
                               "before the loop instead of two multiplies per step",
    rewrite(op.mul(op.mul(v, a), b)).to(op.mul(v, op.mul(a, b)), invariant_in(a, loop), invariant_in(b, loop)),
    rewrite(op.mul(op.mul(a, v), b)).to(op.mul(v, op.mul(a, b)), invariant_in(a, loop), invariant_in(b, loop)),
    finite_only=True)

LOOP_INVARIANT.rewrites(
    "hoist-invariant-matmul-chain", "(v @ A) @ B = v @ (A @ B) for invariant rank-2 A, B: "
                                    "A @ B once before the loop, one matmul per step instead of two",
    rewrite(op.matmul(op.matmul(v, a), b)).to(
        op.matmul(v, op.matmul(a, b)), invariant_in(a, loop), invariant_in(b, loop),
        eq(rank_of(a)).to(i64(2)), eq(rank_of(b)).to(i64(2))), finite_only=True)

LOOP_INVARIANT.rewrites(
    "hoist-transpose-of-row", "transpose(X[i]) = transpose(X, (0, 2, 1))[i] for an invariant rank-3 X: "
                              "one batched transpose before the loop, only a row read per step",
    rewrite(op.transpose(op.take(table, index, axis=0), perm=(1, 0))).to(
        op.take(op.transpose(table, perm=(0, 2, 1)), index, axis=0), invariant_in(table, loop),
        eq(rank_of(table)).to(i64(3)), eq(rank_of(index)).to(i64(0))))

"""ad_simplify: clean-ups for the shapes of code reverse-mode AD writes.

Assumes adjoints as egad/ad writes them: a cotangent seed of 1.0 broadcast through
`reshape` + `broadcast_to` chains (`unbroadcast`/`expand_reduced`), gradient
buffers that start as all-zero constants and receive `index_add` scatters (the
adjoint of `take`, `slice` and gate splits), and sums over kept axes followed by a
reshape. Zero propagation is limited to *adding* zeros: `x * 0 -> 0` would turn a
NaN or inf x into 0, so there is no such rule. Adding a +0.0 may turn a -0.0 into
+0.0 (as in algebra). Every rewrite keeps shapes and dtypes, checked through
`shape_of`/`rank_of` (egad/egraph/analysis.py); values are bit-identical, except
that `scatter-into-sum` reassociates the additions where an index repeats.
"""
from __future__ import annotations

from egglog import eq, i64, var, vars_

from egad.egraph.analysis import rank_of, shape_of
from egad.egraph.language import Attr, Term, op

from .patterns import NUMERIC_DTYPES, splat
from .registry import family, rewrite

AD_SIMPLIFY = family("ad_simplify", __doc__)

x, y, c, d, index, values = vars_("x y c d index values", Term)
shape, inner_shape, axis, dims = (var(name, Attr) for name in ("shape", "inner_shape", "axis", "dims"))


def _zeros(dtype: str) -> Term:
    return splat(0, dtype, shape)


AD_SIMPLIFY.rewrites(
    "sum-over-no-axes", "a sum over no axes is its operand",
    *(rewrite(op.reduce_sum(x, axes=(), keepdims=keep)).to(x) for keep in (False, True)))

AD_SIMPLIFY.rewrites(
    "add-zeros", "x + zeros of x's own shape is x: accumulating into a fresh gradient buffer",
    *(rewrite(op.add(x, _zeros(dt))).to(x, eq(shape_of(x)).to(shape)) for dt in NUMERIC_DTYPES),
    *(rewrite(op.add(_zeros(dt), x)).to(x, eq(shape_of(x)).to(shape)) for dt in NUMERIC_DTYPES))

AD_SIMPLIFY.rewrites(
    "scatter-into-sum", "index_add(zeros, i, v) + y = index_add(y, i, v) for y of the zeros' shape: "
                        "one scatter into y instead of a zero buffer, a scatter and an add",
    *(rewrite(op.add(op.index_add(_zeros(dt), index, values, axis=axis), y))
      .to(op.index_add(y, index, values, axis=axis), eq(shape_of(y)).to(shape)) for dt in NUMERIC_DTYPES),
    *(rewrite(op.add(y, op.index_add(_zeros(dt), index, values, axis=axis)))
      .to(op.index_add(y, index, values, axis=axis), eq(shape_of(y)).to(shape)) for dt in NUMERIC_DTYPES))

AD_SIMPLIFY.rewrites(
    "scatter-of-zeros", "scattering zeros into x adds nothing",
    *(rewrite(op.index_add(x, index, _zeros(dt), axis=axis)).to(x) for dt in NUMERIC_DTYPES))

AD_SIMPLIFY.rewrites(
    "broadcast-of-scalar-reshape", "a rank-0 c reshaped to ones and broadcast to s is c broadcast to s",
    rewrite(op.broadcast_to(op.reshape(c, shape=inner_shape), shape=shape))
    .to(op.broadcast_to(c, shape=shape), eq(rank_of(c)).to(i64(0))))

AD_SIMPLIFY.rewrites(
    "mul-by-broadcast-scalar", "broadcast_to(c, s) * y = c * y for a rank-0 c and y of shape s: "
                               "no broadcast buffer (the seed's 1.0 times a weight)",
    rewrite(op.mul(op.broadcast_to(c, shape=shape), y))
    .to(op.mul(c, y), eq(rank_of(c)).to(i64(0)), eq(shape_of(y)).to(shape)),
    rewrite(op.mul(y, op.broadcast_to(c, shape=shape)))
    .to(op.mul(y, c), eq(rank_of(c)).to(i64(0)), eq(shape_of(y)).to(shape)))

_SCALAR_OPS = ("add", "sub", "mul", "div")

AD_SIMPLIFY.rewrites(
    "scalar-op-before-broadcast", "broadcast_to(c, s) (op) d = broadcast_to(c (op) d, s) for rank-0 c, d: "
                                  "one scalar op instead of one per element, same bits",
    *(rewrite(getattr(op, name)(op.broadcast_to(c, shape=shape), d))
      .to(op.broadcast_to(getattr(op, name)(c, d), shape=shape), eq(rank_of(c)).to(i64(0)), eq(rank_of(d)).to(i64(0)))
      for name in _SCALAR_OPS),
    *(rewrite(getattr(op, name)(d, op.broadcast_to(c, shape=shape)))
      .to(op.broadcast_to(getattr(op, name)(d, c), shape=shape), eq(rank_of(c)).to(i64(0)), eq(rank_of(d)).to(i64(0)))
      for name in _SCALAR_OPS))


def _all_but_one_axis(rank: int):
    return [tuple(a for a in range(rank) if a != kept) for kept in range(rank)]


AD_SIMPLIFY.rewrites(
    "sum-keepdims-then-flatten", "summing x over all axes but one with keepdims, then reshaping to one axis, "
                                 "is the sum without keepdims: one reshape fewer (the bias-gradient pattern)",
    *(rewrite(op.reshape(op.reduce_sum(x, axes=summed, keepdims=True), shape=dims))
      .to(op.reduce_sum(x, axes=summed, keepdims=False), eq(rank_of(x)).to(i64(rank)),
          eq(rank_of(op.reshape(op.reduce_sum(x, axes=summed, keepdims=True), shape=dims))).to(i64(1)))
      for rank in (2, 3, 4) for summed in _all_but_one_axis(rank)))

"""ad_simplify: clean-ups for the shapes of code reverse-mode AD writes.

Assumes adjoints as egad/ad writes them: a cotangent seed of 1.0 broadcast through
`reshape` + `broadcast_to` chains (`unbroadcast`/`expand_reduced`), gradient
buffers that start as all-zero constants and receive `index_add` scatters (the
adjoint of `take`, `slice` and gate splits), and sums over kept axes followed by a
reshape. Zero propagation is limited to *adding* zeros: `x * 0 -> 0` would turn a
NaN or inf x into 0, so there is no such rule. Adding a +0.0 may turn a -0.0 into
+0.0 (as in algebra). Every rewrite keeps shapes and dtypes, checked through
`shape_of`/`rank_of` (egad/egraph/analysis.py); values are bit-identical, except
that `scatter-into-sum` reassociates the additions where an index repeats. One
transformer, `scatters-into-concat`, turns the scatters of a cell's gate slices,
which tile the buffer, into one concat of the gates' gradients (equal values; a -0.0
entry keeps its sign, where the scatter into +0.0 dropped it).
"""
from __future__ import annotations

import numpy as np
from egglog import eq, i64, var, vars_

from egad.egraph.analysis import rank_of, shape_of
from egad.egraph.enode import ClassId, ENode
from egad.egraph.language import Attr, Term, op
from egad.ir.types import TensorType

from .patterns import NUMERIC_DTYPES, concat_node, constant_integers, is_concat, is_index_add, is_zeros, splat
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
      .to(op.index_add(y, index, values, axis=axis), eq(shape_of(y)).to(shape)) for dt in NUMERIC_DTYPES),
    finite_only=True)  # reassociates: values that overflow summed among themselves may not once y is added first

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


# --- scatters-into-concat: a transformer -----------------------------------------------------

MAX_SCATTERS = 16  # index_adds followed down one chain


@AD_SIMPLIFY.transformer(
    "scatters-into-concat",
    "index_add(...index_add(zeros, r1, g1, axis)..., rk, gk, axis) with rows r1..rk ranges that tile the axis "
    "is concat(g's in row order, axis): one copy instead of k scatters into a zero buffer (the adjoint of a "
    "cell's gate slices, z[:, :H], ..., z[:, 3H:])", reads=("scatter-into-sum",))
def scatters_into_concat(view) -> int:
    """AD writes the cotangent of each static slice `z[:, a:b]` as a scatter of the
    gate's gradient into zeros (egad/ad/adjoint_math.py `unslice`), and the sum of the
    gates' as a chain of scatters (with `scatter-into-sum`): in a cell's reverse step
    that is k passes over the whole buffer in a row, on the loop's carried chain. Where
    the rows of the chain are constant ranges, step 1, that together cover the axis
    once, the buffer is the gradients side by side. The ranges must not overlap, so no
    element is a sum of two gradients: the values are equal (the same bits, but for a
    -0.0 gradient entry, which the scatter's 0.0 + -0.0 made +0.0)."""
    snapshot = view.snapshot
    made = 0
    for cid, members in snapshot.nodes.items():
        if is_concat(view, cid):
            continue
        for node in members:
            pieces = _scatter_pieces(view, node)
            if pieces is not None:
                axis, parts = pieces
                view.union(cid, concat_node(view, [values for _, values in sorted(parts)], axis))
                made += 1
                break
    return made


def _scatter_pieces(view, node: ENode):
    """(axis, [(first row, values)]) when `node` is a chain of index_adds along one axis
    into an all-zero buffer whose rows are ranges, step 1, that cover the axis exactly once."""
    if not is_index_add(node):
        return None
    axis = view.attrs(node.args[1]).get("axis")
    result_type = view.types.get(node.args[2])
    if not isinstance(result_type, TensorType) or not isinstance(result_type.shape[axis], int):
        return None
    parts, covered = [], set()
    for _ in range(MAX_SCATTERS):
        rows = _row_range(view, node.args[3])
        if rows is None or view.attrs(node.args[1]).get("axis") != axis or covered & set(rows):
            return None
        covered.update(rows)
        parts.append((rows.start, node.args[4]))
        base = view.snapshot.nodes[node.args[2]]
        if any(is_zeros(member) for member in base):
            return (axis, parts) if covered == set(range(result_type.shape[axis])) and len(parts) > 1 else None
        node = next((member for member in base if is_index_add(member)), None)
        if node is None:
            return None
    return None


def _row_range(view, cid: ClassId) -> range | None:
    """The rows of a constant rank-1 integer index that counts up by one, as a range (a
    one-row index is encoded as a `Splat`)."""
    rows = constant_integers(view, cid)
    if rows is not None and rows.ndim == 1 and rows.size and rows[0] >= 0 \
            and np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        return range(int(rows[0]), int(rows[0]) + rows.size)
    return None

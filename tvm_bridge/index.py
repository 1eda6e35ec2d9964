"""Lowering of take, update, index_add. Indices are wrapped (negative) and clamped,
so compiled code never reads out of bounds (TVM's `take` "fast" mode would)."""
from __future__ import annotations

import math

from tvm import relax, te
from tvm import tirx as tir

from .registry import lowers
from .shape import axis_size, static_shape

R = relax.op

# index_add into at most this many rows sums the values of each target row in one
# parallel, vectorized reduction (target rows x values' elements selects); above it,
# a scatter (TVM's scatter_elements: serial, and it wants an index per element). Measured
# on moe_loop's expert-weight gradient (4 target rows, 1024 rows of 64x64): the
# scatter took 31 ms and its per-element index tensor (32 MB) another 5.
FEW_TARGET_ROWS = 64


def _in_range(bb, index, size):
    """numpy's wrap of negative indices, then a clamp into [0, size). `size` is an
    int, or an int64 scalar tensor for a symbolic axis."""
    dtype = "int64"
    index = bb.emit(R.astype(index, dtype))
    size = relax.const(size, dtype) if isinstance(size, int) else size
    wrapped = bb.emit(R.where(R.less(index, relax.const(0, dtype)), R.add(index, size), index))
    last = bb.emit(R.subtract(size, relax.const(1, dtype)))
    return R.minimum(R.maximum(wrapped, relax.const(0, dtype)), last)


@lowers("take")
def _take(bb, args, attrs, binding):
    x_type = binding.inputs[0].type
    index = bb.emit(_in_range(bb, args[1], axis_size(bb, args[0], x_type, attrs["axis"])))
    return R.take(args[0], index, axis=attrs["axis"], mode="clip")


@lowers("index_add")
def _index_add(bb, args, attrs, binding):
    x_type, index_type = binding.inputs[0].type, binding.inputs[1].type
    axis = attrs["axis"]
    shape = x_type.shape  # the indexed axis may be symbolic; the others must be static
    perm = [axis] + [k for k in range(len(shape)) if k != axis]
    static_shape([shape[k] for k in perm[1:]], binding)
    data = bb.emit(R.permute_dims(args[0], perm)) if axis else args[0]
    values = args[2]
    if axis:  # move the index axes of the values to the front
        value_axes = list(range(axis, axis + index_type.ndim))
        value_rank = x_type.ndim - 1 + index_type.ndim
        values = bb.emit(R.permute_dims(values, value_axes + [k for k in range(value_rank) if k not in value_axes]))
    # one row of values per index (the index count may be symbolic: -1)
    values = bb.emit(R.reshape(values, [-1] + [shape[k] for k in perm[1:]]))
    size = axis_size(bb, args[0], x_type, axis)
    if isinstance(size, int) and size <= FEW_TARGET_ROWS:
        width = math.prod(shape[k] for k in perm[1:])
        index = bb.emit(R.reshape(bb.emit(_in_range(bb, args[1], size)), [-1]))
        summed = bb.emit_te(_sum_rows_by_index, index, bb.emit(R.reshape(values, [-1, width])), size,
                            primfunc_name_hint="index_sum")
        added = bb.emit(R.add(data, R.reshape(summed, [size] + [shape[k] for k in perm[1:]])))
    else:
        added = bb.emit(R.scatter_elements(data, _row_indices(bb, args[1], size, values), values, axis=0,
                                           reduction="add"))
    if not axis:
        return added
    return R.permute_dims(added, [perm.index(k) for k in range(len(shape))])


def _sum_rows_by_index(index, rows, size: int):
    """out[e, w] = the sum of rows[n, w] over the n with index[n] == e, by selection
    (not a one-hot product: 0 * inf would put NaN in every row)."""
    n = te.reduce_axis((0, rows.shape[0]), name="n")
    zero = tir.const(0, rows.dtype)
    return te.compute((size, rows.shape[1]), lambda e, w: te.sum(
        tir.Select(index[n] == tir.Cast("int64", e), rows[n, w], zero), axis=n), name="index_sum")


@lowers("update")
def _update(bb, args, attrs, binding):
    row = bb.emit(R.expand_dims(args[2], 0))
    size = axis_size(bb, args[0], binding.inputs[0].type, 0)
    return R.scatter_elements(args[0], _row_indices(bb, args[1], size, row), row, axis=0, reduction="update")


def _row_indices(bb, index, size: int, rows):
    """Row indices (in range), one per row of `rows`, broadcast to its shape. The row
    count may be symbolic (rows stacked by a loop): a match_cast names it."""
    rest = [int(d) for d in rows.ty.shape.values[1:]]
    count = tir.Var("rows", "int64")
    bb.match_cast(rows, relax.TensorType([count, *rest], rows.ty.dtype))
    flat = bb.emit(R.reshape(bb.emit(_in_range(bb, index, size)), [count] + [1] * len(rest)))
    return bb.emit(R.broadcast_to(flat, [count, *rest]))

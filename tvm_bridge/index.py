"""Lowering of take, update, index_add. An index proved in range (egad/ir/index_ranges.py)
is read as it is; one proved within numpy's negative wrap is wrapped; any other is
checked where it runs and raises out of range (tvm_bridge/index_checks.py), so
compiled code never reads out of bounds (TVM's `take` "fast" mode would) nor answers
with a clamped row."""
from __future__ import annotations

import math

import numpy as np
from tvm import relax, te
from tvm import tirx as tir

from egad.ir.index_ranges import IndexPlan, index_plan
from egad.ir.types import TensorType

from . import index_checks
from .registry import FunctionScope, axis_size, lowers
from .shape import static_shape

R = relax.op

# index_add into at most this many rows sums the values of each target row in one
# parallel, vectorized reduction (target rows x values' elements selects); above it,
# a scatter (TVM's scatter_elements: serial, and it wants an index per element). Measured
# on moe_loop's expert-weight gradient (4 target rows, 1024 rows of 64x64): the
# scatter took 31 ms and its per-element index tensor (32 MB) another 5.
FEW_TARGET_ROWS = 64


def _index_for_rows(bb, binding, index, size):
    """The index of index op `binding` ready to read rows of an axis of `size` (an int,
    or an int64 scalar tensor for a symbolic axis): as it is when proved in range,
    wrapped when proved (or checked before its loop) within [-size, size), else checked
    (raising out of range) and wrapped. One index into equal sizes is made ready once per function (a reverse loop
    reads several stacked tables at its counter)."""
    plan = index_plan(binding, FunctionScope.ranges)
    if plan is IndexPlan.CHECK and id(binding) in FunctionScope.hoisted_sites:
        plan = IndexPlan.WRAPS  # checked before its loop, once for all trips
    if plan is IndexPlan.CHECK and _empty_result(binding):
        # what reads an empty result is a constant (tvm_bridge/lower.py), so the op is dead code,
        # and a check in a kernel before it would go with it: the host's check is a call with an
        # effect, which stays (enp.sum(x[:, t:t + 2]) of an empty x returned 0.0 for any t)
        index_checks.checked_on_host(bb, index, size, FunctionScope.sites[id(binding)])
        plan = IndexPlan.WRAPS
    if plan is IndexPlan.IN_RANGE:
        return index if index.ty.dtype == "int64" else bb.emit(R.astype(index, "int64"))
    table, at = binding.inputs[:2]
    key = (at.uid, size if isinstance(size, int) else (table.uid, binding.attrs.get("axis", 0)))
    if key not in FunctionScope.indices:
        FunctionScope.indices[key] = _ready(bb, plan, index, size, FunctionScope.sites[id(binding)])
    return FunctionScope.indices[key]


def _empty_result(binding) -> bool:
    return any(isinstance(var.type, TensorType) and 0 in var.type.shape for var in binding.outputs)


def _ready(bb, plan: IndexPlan, index, size, site: int):
    if plan is IndexPlan.CHECK and FunctionScope.checks_in_kernels:
        return index_checks.checked_in_kernel(bb, index, size, site)
    if plan is IndexPlan.CHECK:
        index_checks.checked_on_host(bb, index, size, site)
    dtype = "int64"
    index = bb.emit(R.astype(index, dtype))
    size = relax.const(size, dtype) if isinstance(size, int) else size
    wrapped = bb.emit(R.where(R.less(index, relax.const(0, dtype)), R.add(index, size), index))
    if plan is IndexPlan.WRAPS:
        return wrapped
    # checked on the host already: the clamp only keeps the device's reads in bounds
    last = bb.emit(R.subtract(size, relax.const(1, dtype)))
    return bb.emit(R.minimum(R.maximum(wrapped, relax.const(0, dtype)), last))


@lowers("take")
def _take(bb, args, attrs, binding):
    axis = attrs["axis"]
    size = axis_size(bb, args[0], binding.inputs[0].type, axis)
    return R.take(args[0], _index_for_rows(bb, binding, args[1], size), axis=axis, mode="clip")


@lowers("index_add")
def _index_add(bb, args, attrs, binding):
    x_type, index_type = binding.inputs[0].type, binding.inputs[1].type
    axis = attrs["axis"]
    progression = _constant_progression(binding, axis_size(bb, args[0], x_type, axis))
    if progression is not None:
        # the adjoint of a slice (egad/ad/adjoint_math.py unslice): elementwise, in place of a scatter
        return bb.emit_te(_add_into_progression, args[0], args[2], axis, *progression,
                          primfunc_name_hint="add_into_rows")
    if 0 in x_type.shape or 0 in binding.inputs[2].type.shape:
        # x or the values are empty (a static axis of 0 beside symbolic ones, which the
        # lowering of empty results does not catch): nothing to add, where TVM's scatter
        # divided by the 0. The indices are still checked (by a host call, which no pass
        # drops for its result going unused).
        if 0 not in index_type.shape and index_plan(binding, FunctionScope.ranges) is IndexPlan.CHECK:
            size = axis_size(bb, args[0], x_type, axis)
            index_checks.checked_on_host(bb, args[1], size, FunctionScope.sites[id(binding)])
        return args[0]
    shape = x_type.shape
    perm = [axis] + [k for k in range(len(shape)) if k != axis]
    rest = _known_dims([shape[k] for k in perm[1:]], binding)
    data = bb.emit(R.permute_dims(args[0], perm)) if axis else args[0]
    values = args[2]
    if axis:  # move the index axes of the values to the front
        value_axes = list(range(axis, axis + index_type.ndim))
        value_rank = x_type.ndim - 1 + index_type.ndim
        values = bb.emit(R.permute_dims(values, value_axes + [k for k in range(value_rank) if k not in value_axes]))
    # one row of values per index (the index count may be symbolic: -1)
    values = bb.emit(R.reshape(values, [-1] + rest))
    size = axis_size(bb, args[0], x_type, axis)
    if isinstance(size, int) and size <= FEW_TARGET_ROWS and all(isinstance(d, int) for d in rest):
        width = math.prod(rest)
        index = bb.emit(R.reshape(_index_for_rows(bb, binding, args[1], size), [-1]))
        summed = bb.emit_te(_sum_rows_by_index, index, bb.emit(R.reshape(values, [-1, width])), size,
                            primfunc_name_hint="index_sum")
        added = bb.emit(R.add(data, R.reshape(summed, [size] + rest)))
    else:
        added = bb.emit(R.scatter_elements(data, _row_indices(bb, binding, args[1], size, values), values, axis=0,
                                           reduction="add"))
    if not axis:
        return added
    return R.permute_dims(added, [perm.index(k) for k in range(len(shape))])


def _constant_progression(binding, size) -> tuple[int, int, int] | None:
    """(start, step, count) when the binding's index is a constant 1-D arithmetic
    progression of distinct rows inside [0, size) after numpy's wrap of negatives, else None."""
    rows = FunctionScope.constants.get(binding.inputs[1].uid)
    if rows is None or not isinstance(size, int):
        return None
    if rows.ndim != 1 or rows.size == 0 or rows.dtype.kind not in "iu":
        return None
    rows = np.where(rows < 0, rows + size, rows).astype(np.int64)
    if rows.min() < 0 or rows.max() >= size:
        return None
    step = int(rows[1] - rows[0]) if rows.size > 1 else 1
    if step == 0 or not np.array_equal(rows, rows[0] + step * np.arange(rows.size)):
        return None
    return int(rows[0]), step, int(rows.size)


def _add_into_progression(x, values, axis: int, start: int, step: int, count: int):
    """x with values[..., k, ...] added at x[..., start + k * step, ...] along `axis`:
    the rows outside the progression are copied, not added to (a -0.0 stays -0.0, as
    after a scatter)."""
    # A progression counting down (x[::-1]'s gradient) is written as the same rows counted
    # up from its last, read back to front: every index is then `(p - first) // stride`
    # with a positive stride, the form TVM simplifies right. It rewrote `(r - 299) // -1`
    # (r a fused loop's `f // 8`) into `f // -8 + 299`, and `(299 - p) // 2` was off by one.
    first, stride = (start, step) if step > 0 else (start + (count - 1) * step, -step)

    def element(*position):
        offset = position[axis] - tir.const(first, "int64")
        j = tir.floordiv(offset, tir.const(stride, "int64"))
        inside = tir.all(tir.floormod(offset, tir.const(stride, "int64")) == 0,
                         j >= tir.const(0, "int64"), j < tir.const(count, "int64"))
        k = j if step > 0 else tir.const(count - 1, "int64") - j
        row = list(position)
        row[axis] = k
        # if_then_else, not Select: TVM bounds the values' read region by the condition
        # (block access regions, buffer compaction); a Select's would run out of bounds
        return tir.if_then_else(inside, x(*position) + values(*row), x(*position))
    return te.compute(x.shape, element, name="add_into_rows")


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
    return R.scatter_elements(args[0], _row_indices(bb, binding, args[1], size, row), row, axis=0,
                              reduction="update")


def _known_dims(dims, binding) -> list:
    """Dims as Relax sizes: ints, and the function's variables of symbolic dims it has
    bound (a param's, a match_cast's); a dim it has not is refused."""
    known = [d if isinstance(d, int) else FunctionScope.symbols.get(d) for d in dims]
    if None in known:
        static_shape(dims, binding)  # raises, naming the op
    return known


def _row_indices(bb, binding, index, size: int, rows):
    """Row indices (in range), one per row of `rows`, broadcast to its shape. The row
    count may be symbolic (rows stacked by a loop): a match_cast names it."""
    rest = list(rows.ty.shape.values[1:])
    count = tir.Var("rows", "int64")
    bb.match_cast(rows, relax.TensorType([count, *rest], rows.ty.dtype))
    flat = bb.emit(R.reshape(_index_for_rows(bb, binding, index, size), [count] + [1] * len(rest)))
    return bb.emit(R.broadcast_to(flat, [count, *rest]))

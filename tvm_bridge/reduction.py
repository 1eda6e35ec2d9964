"""Lowering of reductions (and cumsum), and of any op's reduction over a statically empty axis.

max, min and argmax have no value over nothing: the interpreter raises (numpy's
"zero-size array to reduction operation maximum"), and TVM's reduction would return
its init (the lowest float) or memory never written. Where a reduced axis is symbolic
(or 0), a host call checks its size first (host_checks.py).
"""
from __future__ import annotations

import math

from tvm import relax, te, tirx

from egad.ir.ops import parse_einsum
from egad.ir.types import FLOAT_DTYPES

from .creation import filled
from .host_checks import NO_IDENTITY, check_not_empty
from .registry import FunctionScope, lowers, symbol_var

R = relax.op
_REDUCE = {"reduce_sum": R.sum, "reduce_mean": R.mean, "reduce_max": R.max, "reduce_min": R.min}


@lowers(*_REDUCE)
def _reduce(bb, args, attrs, binding):
    axes, keepdims, dtype = list(attrs["axes"]), attrs["keepdims"], binding.inputs[0].type.dtype
    if binding.op in NO_IDENTITY:  # (no axes: nothing is reduced)
        check_not_empty(bb, args[0], binding, axes)
    if binding.op in ("reduce_max", "reduce_min") and dtype in FLOAT_DTYPES and axes:
        return bb.emit_te(_extreme_keeping_nan, args[0], axes, keepdims, binding.op == "reduce_max",
                          primfunc_name_hint=binding.op[len("reduce_"):])
    return _REDUCE[binding.op](args[0], axis=axes, keepdims=keepdims)


def _extreme_keeping_nan(x, axes: list[int], keepdims: bool, largest: bool):
    """max (or min) of x over `axes`, NaN where a NaN is reduced, as numpy: TVM's
    reducers compare, and every comparison with NaN is false, so they skip it. One
    function: the extreme, a count of NaNs, the choice."""
    rank = len(x.shape)
    axes = sorted(axis % rank for axis in axes)
    reduce_vars = {axis: te.reduce_axis((0, x.shape[axis]), name=f"k{axis}") for axis in axes}
    kept = [k for k in range(rank) if k not in reduce_vars]
    out_shape = [1 if k in reduce_vars else d for k, d in enumerate(x.shape)] if keepdims else \
        [x.shape[k] for k in kept]

    def at(out_position):  # the position in x of an output position and the reduce variables
        values = iter(out_position[k] for k in kept) if keepdims else iter(out_position)
        return [reduce_vars[k] if k in reduce_vars else next(values) for k in range(rank)]

    every = list(reduce_vars.values())
    extreme = te.compute(out_shape, lambda *o: (te.max if largest else te.min)(x(*at(o)), axis=every), name="extreme")
    nans = te.compute(out_shape, lambda *o: te.max(tirx.Cast("int32", tirx.isnan(x(*at(o)))), axis=every),
                      name="nans")
    nan = tirx.const(math.nan, x.dtype)
    return te.compute(out_shape, lambda *o: tirx.Select(nans(*o) > 0, nan, extreme(*o)), name="extreme_or_nan")


@lowers("reduce_any", "reduce_all")
def _reduce_bool(bb, args, attrs, binding):
    reduce = R.max if binding.op == "reduce_any" else R.min
    as_int = R.astype(args[0], "int32")
    # `> 0`, not a cast to bool: over an axis empty at run time max is its identity,
    # INT_MIN, which is true; INT_MIN > 0 is False (numpy's any of nothing), INT_MAX > 0 True
    return R.greater(reduce(as_int, axis=list(attrs["axes"]), keepdims=attrs["keepdims"]), relax.const(0, "int32"))


@lowers("argmax")
def _argmax(bb, args, attrs, binding):
    check_not_empty(bb, args[0], binding, [attrs["axis"]])
    index_and_value = bb.emit_te(_argmax_first, args[0], attrs["axis"], primfunc_name_hint="argmax")
    return relax.TupleGetItem(index_and_value, 0)


def _argmax_first(x, axis: int):
    """The index of the first maximum of x along `axis`, or of its first NaN, as numpy.
    Not TVM's argmax: every comparison with NaN is false, so it skips NaN, and its
    identity is (-1, the dtype's least value), which a row of only that value never
    beats, so it gave -1 for argmax([INT_MIN, INT_MIN]). One reduction, whose order is
    total (NaN above all, then value, then the lower index), so it may be combined in
    any order; the identity's index is -1, and any element beats it."""
    floats = x.dtype in FLOAT_DTYPES

    def combine(lhs, rhs):
        (i, a), (j, b) = lhs, rhs
        better_value = tirx.Or(a > b, tirx.And(a == b, i < j))
        if floats:
            better_value = tirx.Select(tirx.isnan(a), tirx.Or(tirx.Not(tirx.isnan(b)), i < j),
                                       tirx.And(tirx.Not(tirx.isnan(b)), better_value))
        lhs_wins = tirx.And(i >= 0, tirx.Or(j < 0, better_value))
        return tirx.Select(lhs_wins, i, j), tirx.Select(lhs_wins, a, b)

    def identity(index_dtype, value_dtype):
        return tirx.const(-1, index_dtype), tirx.const(0, value_dtype)

    first_max = te.comm_reducer(combine, identity, name="argmax_first")
    axis = axis % len(x.shape)
    k = te.reduce_axis((0, x.shape[axis]), name="k")

    def at(out_position):
        return [*out_position[:axis], k, *out_position[axis:]]

    out_shape = [d for n, d in enumerate(x.shape) if n != axis]
    # both outputs: a value buffer kept inside the function is a global allocation, which CUDA refuses
    return list(te.compute(out_shape, lambda *o: first_max((tirx.Cast("int64", k), x(*at(o))), axis=k), name="argmax"))


@lowers("cumsum")
def _cumsum(bb, args, attrs, binding):
    x, axis, reverse = args[0], attrs["axis"], attrs["reverse"]
    dtype, length = binding.outputs[0].type.dtype, binding.inputs[0].type.shape[axis]
    if 0 in binding.inputs[0].type.shape:
        # nothing to sum: the empty operand is the result. TVM's scan would divide by its
        # static 0 (a row's stride) where built, and write past an empty axis (see below)
        return x
    if isinstance(length, int):
        if not reverse:
            return R.cumsum(x, axis=axis, dtype=dtype)
        # TVM's cumsum has no direction: the axis is flipped around it
        sums = bb.emit(R.cumsum(bb.emit(R.flip(x, axis=axis)), axis=axis, dtype=dtype))
        return R.flip(sums, axis=axis)
    # TVM's scan (topi.cumsum) writes each row's first element before its loop over the
    # rest: over an axis empty at run time it writes past the end of its output (heap
    # corruption, seen as a malloc abort later). A zero in front of each row makes every
    # row at least one long, and dropping it again gives numpy's sums, reversed in the
    # same two kernels where `reverse` asks
    size = symbol_var(FunctionScope.symbols, length)
    padded = bb.emit_te(_zero_in_front, x, axis, reverse, primfunc_name_hint="cumsum_pad")
    sums = bb.emit(R.cumsum(padded, axis=axis, dtype=dtype))
    return bb.emit_te(_zero_dropped, sums, axis, reverse, size, primfunc_name_hint="cumsum_unpad")


def _zero_in_front(x, axis: int, reverse: bool):
    """x along `axis` (reversed where `reverse`) after one zero: p[0] = -0, p[k] = x[k - 1]
    (x[n - k] reversed)."""
    size = x.shape[axis]
    shape = [*x.shape[:axis], size + 1, *x.shape[axis + 1:]]

    def at(*position):
        k = position[axis]
        source = [*position[:axis], size - k if reverse else k - 1, *position[axis + 1:]]
        # if_then_else, not Select: Select reads both sides, and x[-1] is out of bounds.
        # -0.0, not 0.0, is the float sum's identity: 0.0 + -0.0 is 0.0, and numpy's sums keep -0.0
        zero = tirx.const(-0.0 if x.dtype in FLOAT_DTYPES else 0, x.dtype)
        return tirx.if_then_else(k == 0, zero, x(*source))

    return te.compute(shape, at, name="zero_in_front")


def _zero_dropped(sums, axis: int, reverse: bool, size):
    """The running sums of x from those of its padded rows (`_zero_in_front`): s[k + 1],
    or s[n - k] reversed (the sum of x[k:] is that of the first n - k flipped elements)."""
    shape = [*sums.shape[:axis], size, *sums.shape[axis + 1:]]

    def at(*position):
        k = position[axis]
        return sums(*position[:axis], size - k if reverse else k + 1, *position[axis + 1:])

    return te.compute(shape, at, name="zero_dropped")


def empty_reduction(args, binding):
    """What `binding` computes when it sums over an axis of static size 0 (a loop that
    runs zero times stacks (0, ...) rows): TVM's reduction blocks initialise their
    output in the first trip of the reduction loop, so an empty one leaves it
    unwritten. None when the binding reduces over no empty axis (or its output shape
    is symbolic: an empty reduction with a symbolic output is left to TVM)."""
    inputs, output = [v.type for v in binding.inputs], binding.outputs[0].type
    if not all(isinstance(d, int) for d in output.shape):
        return None
    if binding.op == "index_add" and 0 in inputs[1].shape:
        return args[0]  # no rows to add
    if binding.op in ("reduce_sum", "reduce_mean") and any(inputs[0].shape[axis] == 0 for axis in binding.attrs["axes"]):
        fill = 0.0 if binding.op == "reduce_sum" else math.nan  # numpy: the mean of nothing is nan
    elif binding.op == "matmul" and inputs[0].ndim >= 1 and inputs[0].shape[-1] == 0:
        fill = 0.0
    elif binding.op == "einsum" and _contracts_an_empty_letter(binding, inputs):
        fill = 0.0
    elif binding.op in ("reduce_any", "reduce_all") and any(inputs[0].shape[axis] == 0
                                                            for axis in binding.attrs["axes"]):
        fill = binding.op == "reduce_all"  # numpy: any of nothing is False, all of nothing True
    else:
        return None
    return filled(output.shape, fill, output.dtype)


def _contracts_an_empty_letter(binding, inputs) -> bool:
    terms, output = parse_einsum(binding.attrs["spec"], [t.ndim for t in inputs])
    return any(letter not in output and size == 0
               for term, t in zip(terms, inputs) for letter, size in zip(term, t.shape))

"""Lowering of reductions, and of any op's reduction over a statically empty axis.

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
from .registry import lowers

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

"""Lowering of reductions, and of any op's reduction over a statically empty axis."""
from __future__ import annotations

import math

from tvm import relax

from egad.ir.ops import parse_einsum
from egad.ir.types import FLOAT_DTYPES

from .creation import filled
from .registry import lowers

R = relax.op
_REDUCE = {"reduce_sum": R.sum, "reduce_mean": R.mean, "reduce_max": R.max, "reduce_min": R.min}


@lowers(*_REDUCE)
def _reduce(bb, args, attrs, binding):
    axes, keepdims, dtype = list(attrs["axes"]), attrs["keepdims"], binding.inputs[0].type.dtype
    result = _REDUCE[binding.op](args[0], axis=axes, keepdims=keepdims)
    if binding.op in ("reduce_max", "reduce_min") and dtype in FLOAT_DTYPES:
        # TVM's max and min reducers skip a NaN (every comparison with it is false);
        # numpy's return NaN: a second reduction finds the NaNs
        has_nan = R.max(R.astype(R.isnan(args[0]), "int32"), axis=axes, keepdims=keepdims)
        result = R.where(R.astype(has_nan, "bool"), relax.const(math.nan, dtype), result)
    return result


@lowers("reduce_any", "reduce_all")
def _reduce_bool(bb, args, attrs, binding):
    reduce = R.max if binding.op == "reduce_any" else R.min
    as_int = R.astype(args[0], "int32")
    return R.astype(reduce(as_int, axis=list(attrs["axes"]), keepdims=attrs["keepdims"]), "bool")


@lowers("argmax")
def _argmax(bb, args, attrs, binding):
    return R.astype(R.argmax(args[0], axis=attrs["axis"]), "int64")


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
    else:
        return None
    return filled(output.shape, fill, output.dtype)


def _contracts_an_empty_letter(binding, inputs) -> bool:
    terms, output = parse_einsum(binding.attrs["spec"], [t.ndim for t in inputs])
    return any(letter not in output and size == 0
               for term, t in zip(terms, inputs) for letter, size in zip(term, t.shape))

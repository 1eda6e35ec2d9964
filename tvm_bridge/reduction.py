"""Lowering of reductions."""
from __future__ import annotations

from tvm import relax

from .registry import lowers

R = relax.op
_REDUCE = {"reduce_sum": R.sum, "reduce_mean": R.mean, "reduce_max": R.max, "reduce_min": R.min}


@lowers(*_REDUCE)
def _reduce(bb, args, attrs, binding):
    return _REDUCE[binding.op](args[0], axis=list(attrs["axes"]), keepdims=attrs["keepdims"])


@lowers("reduce_any", "reduce_all")
def _reduce_bool(bb, args, attrs, binding):
    reduce = R.max if binding.op == "reduce_any" else R.min
    as_int = R.astype(args[0], "int32")
    return R.astype(reduce(as_int, axis=list(attrs["axes"]), keepdims=attrs["keepdims"]), "bool")


@lowers("argmax")
def _argmax(bb, args, attrs, binding):
    return R.astype(R.argmax(args[0], axis=attrs["axis"]), "int64")

"""Lowering of egad's elementwise ops to Relax ops (numpy semantics, one dtype)."""
from __future__ import annotations

from tvm import relax

from .registry import lowers

R = relax.op

_UNARY = {
    "neg": R.negative, "abs": R.abs, "sign": R.sign, "exp": R.exp, "log": R.log, "tanh": R.tanh, "sin": R.sin,
    "cos": R.cos, "sqrt": R.sqrt, "floor": R.floor, "sigmoid": R.sigmoid, "logical_not": R.logical_not,
}
_BINARY = {
    "add": R.add, "sub": R.subtract, "mul": R.multiply, "div": R.divide, "floordiv": R.floor_divide,
    "mod": R.floor_mod, "pow": R.power, "maximum": R.maximum, "minimum": R.minimum, "logical_and": R.logical_and,
    "logical_or": R.logical_or, "logical_xor": R.logical_xor, "eq": R.equal, "ne": R.not_equal, "lt": R.less,
    "le": R.less_equal, "gt": R.greater, "ge": R.greater_equal,
}


@lowers(*_UNARY)
def _unary(bb, args, attrs, binding):
    return _UNARY[binding.op](args[0])


@lowers(*_BINARY)
def _binary(bb, args, attrs, binding):
    return _BINARY[binding.op](args[0], args[1])


@lowers("expm1")
def _expm1(bb, args, attrs, binding):
    # Relax has no expm1: exp(x) - 1 (loses relative accuracy for |x| << 1).
    return R.subtract(R.exp(args[0]), relax.const(1, binding.inputs[0].type.dtype))


@lowers("log1p")
def _log1p(bb, args, attrs, binding):
    # Relax has no log1p: log(1 + x) (loses relative accuracy for |x| << 1).
    return R.log(R.add(args[0], relax.const(1, binding.inputs[0].type.dtype)))


@lowers("select")
def _select(bb, args, attrs, binding):
    return R.where(args[0], args[1], args[2])


@lowers("cast")
def _cast(bb, args, attrs, binding):
    return R.astype(args[0], attrs["dtype"])


@lowers("stop_gradient")
def _identity(bb, args, attrs, binding):
    return args[0]

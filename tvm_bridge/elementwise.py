"""Lowering of egad's elementwise ops to Relax ops (numpy semantics, one dtype)."""
from __future__ import annotations

from tvm import relax, te, tirx, topi

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


_POLYNOMIAL_FLOAT32 = ("exp", "tanh", "sigmoid")  # lowered by _exp_tanh_or_sigmoid


@lowers(*(name for name in _UNARY if name not in _POLYNOMIAL_FLOAT32))
def _unary(bb, args, attrs, binding):
    return _UNARY[binding.op](args[0])


@lowers(*_POLYNOMIAL_FLOAT32)
def _exp_tanh_or_sigmoid(bb, args, attrs, binding):
    """float32 exp, tanh and sigmoid as vectorizable polynomials (TVM's fast_exp and
    fast_tanh: within 5 ulp for exp and tanh, 4e-6 relative for sigmoid,
    measured) instead of a scalar libm call per element: an LSTM's 32x256 tanh took
    57 us that way, GNMT-small's log_softmax over 768x2048 logits 8 ms. NaN stays NaN:
    the polynomials clamp their input with min(bound, x) and max(-bound, ...), which
    LLVM lowers to compare-and-select that passes a NaN x through (tested, scalar and
    vectorized)."""
    if binding.inputs[0].type.dtype != "float32":
        return _UNARY[binding.op](args[0])
    return bb.emit_te(_FAST_FLOAT32[binding.op], args[0], primfunc_name_hint=f"fast_{binding.op}")


def exp_of(bb, x, dtype: str):
    """exp(x) as egad lowers it: the float32 polynomial, or Relax's exp."""
    if dtype != "float32":
        return R.exp(x)
    return bb.emit_te(fast_exp_float32, x if isinstance(x, relax.Var) else bb.emit(x), primfunc_name_hint="fast_exp")


def exp_te(x):
    """exp of a TE tensor as egad lowers it (inside a larger TE function): the float32
    polynomial, or TIR's exp."""
    if x.dtype == "float32":
        return fast_exp_float32(x)
    return te.compute(x.shape, lambda *i: tirx.exp(x(*i)), name="exp")


# float32 exp overflows to inf above this; fast_exp clamps its input at 88.376 instead
_EXP_OVERFLOW_FLOAT32 = 88.72283935546875


def fast_exp_float32(x):
    """exp(x), flushing results below float32's smallest normal (x < -87.3) to 0."""
    y = topi.fast_exp(x)
    infinity = tirx.const(float("inf"), "float32")
    return te.compute(x.shape, lambda *i: tirx.Select(x(*i) > tirx.const(_EXP_OVERFLOW_FLOAT32, "float32"),
                                                      infinity, y(*i)), name="exp")


def _fast_sigmoid(x):
    one = tirx.const(1, "float32")
    exp_minus_x = topi.fast_exp(te.compute(x.shape, lambda *i: -x(*i), name="minus_x"))
    return te.compute(x.shape, lambda *i: one / (one + exp_minus_x(*i)), name="sigmoid")


_FAST_FLOAT32 = {"exp": fast_exp_float32, "tanh": topi.fast_tanh, "sigmoid": _fast_sigmoid}


@lowers(*_BINARY)
def _binary(bb, args, attrs, binding):
    return _BINARY[binding.op](args[0], args[1])


@lowers("expm1")
def _expm1(bb, args, attrs, binding):
    # Relax has no expm1, and exp(x) - 1 loses all relative accuracy for |x| << 1.
    # Kahan's correction: with u = exp(x), (u - 1) * x / log(u) cancels the rounding
    # error of u (x itself where u rounds to 1); far from 0 plain u - 1 is exact enough.
    x, dtype = args[0], binding.inputs[0].type.dtype
    u = bb.emit(R.exp(x))
    u_minus_1 = bb.emit(R.subtract(u, relax.const(1, dtype)))
    corrected = R.where(R.equal(u, relax.const(1, dtype)), x, R.divide(R.multiply(u_minus_1, x), R.log(u)))
    return R.where(R.less(R.abs(x), relax.const(0.5, dtype)), corrected, u_minus_1)


@lowers("log1p")
def _log1p(bb, args, attrs, binding):
    # Relax has no log1p, and log(1 + x) loses all relative accuracy for |x| << 1.
    # Near 0 the Taylor series to x**8 (truncation below 1e-17 relative for |x| < 0.01);
    # elsewhere log(1 + x), computed in float64 so float32 results are exact to rounding.
    x, dtype = args[0], binding.inputs[0].type.dtype
    wide = bb.emit(R.astype(x, "float64")) if dtype != "float64" else x
    series = relax.const(-1 / 8, "float64")
    for k in range(7, 0, -1):  # Horner: x * (1 - x * (1/2 - x * (1/3 - ...)))
        series = R.add(relax.const((-1) ** (k + 1) / k, "float64"), R.multiply(wide, series))
    series = bb.emit(R.multiply(wide, series))
    plain = R.log(R.add(wide, relax.const(1, "float64")))
    result = R.where(R.less(R.abs(wide), relax.const(0.01, "float64")), series, plain)
    return R.astype(bb.emit(result), dtype) if dtype != "float64" else result


@lowers("select")
def _select(bb, args, attrs, binding):
    return R.where(args[0], args[1], args[2])


@lowers("cast")
def _cast(bb, args, attrs, binding):
    return R.astype(args[0], attrs["dtype"])


@lowers("stop_gradient")
def _identity(bb, args, attrs, binding):
    return args[0]

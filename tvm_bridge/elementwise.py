"""Lowering of egad's elementwise ops to Relax ops (numpy semantics, one dtype)."""
from __future__ import annotations

import math

import numpy as np
from tvm import relax, te, tirx, topi

from egad.ir.types import FLOAT_DTYPES, INT_DTYPES

from .host_checks import check_exponent_not_negative
from .registry import FunctionScope, lowers

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
    if binding.op == "sign" and binding.inputs[0].type.dtype in FLOAT_DTYPES:
        return R.where(R.isnan(args[0]), args[0], R.sign(args[0]))  # numpy: sign(NaN) is NaN; TVM's is 0
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
    if binding.op == "tanh" and binding.inputs[0].type.dtype == "float64":
        return bb.emit_te(_tanh_float64, args[0], primfunc_name_hint="tanh")
    if binding.inputs[0].type.dtype != "float32":
        return _UNARY[binding.op](args[0])
    return bb.emit_te(_FAST_FLOAT32[binding.op], args[0], primfunc_name_hint=f"fast_{binding.op}")


def _tanh_float64(x):
    """tanh(|x|) = -m / (m + 2) with m = expm1(-2|x|), the sign put back: TVM's tanh
    (1 - e^-2x) / (1 + e^-2x) cancels for small x (tanh(1e-20) was 0, tanh(1e-12) off by
    2e-5, tanh(-0.0) was +0.0)."""
    def tanh(*i):
        v = x(*i)
        m = _expm1_of(tirx.const(-2.0, "float64") * tirx.abs(v))
        return tirx.copysign(-m / (m + tirx.const(2.0, "float64")), v)

    return te.compute(x.shape, tanh, name="tanh")


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


# float32 exp overflows to inf above this; fast_exp clamps its input at _FAST_EXP_CLAMP instead
_EXP_OVERFLOW_FLOAT32 = 88.72283935546875
_FAST_EXP_CLAMP = 88.3762626647950  # topi's fast_exp_float32: its 2**n overflows the exponent above


def fast_exp_float32(x):
    """exp(x), flushing results below float32's smallest normal (x < -87.3) to 0.
    Between fast_exp's clamp and the overflow it is exp(x - 0.5) * e**0.5 (x - 0.5 is
    exact there), chosen by selects so the loop stays one vectorized polynomial."""
    clamp, half = tirx.const(_FAST_EXP_CLAMP, "float32"), tirx.const(0.5, "float32")
    shifted = te.compute(x.shape, lambda *i: tirx.Select(x(*i) > clamp, x(*i) - half, x(*i)), name="shifted")
    y = topi.fast_exp(shifted)
    infinity, root_e = tirx.const(float("inf"), "float32"), tirx.const(math.exp(0.5), "float32")
    return te.compute(x.shape, lambda *i: tirx.Select(
        x(*i) > tirx.const(_EXP_OVERFLOW_FLOAT32, "float32"), infinity,
        tirx.Select(x(*i) > clamp, y(*i) * root_e, y(*i))), name="exp")


def _fast_sigmoid(x):
    one = tirx.const(1, "float32")
    exp_minus_x = topi.fast_exp(te.compute(x.shape, lambda *i: -x(*i), name="minus_x"))
    return te.compute(x.shape, lambda *i: one / (one + exp_minus_x(*i)), name="sigmoid")


_FAST_FLOAT32 = {"exp": fast_exp_float32, "tanh": topi.fast_tanh, "sigmoid": _fast_sigmoid}


@lowers(*_BINARY)
def _binary(bb, args, attrs, binding):
    a, b = args
    dtype = binding.inputs[0].type.dtype
    if binding.op in _COMPARISONS and dtype == "bool":
        # LLVM has no ordered compare of i1 (TVM emits fcmp): compare bools as int8
        a, b = R.astype(a, "int8"), R.astype(b, "int8")
    elif dtype in FLOAT_DTYPES and binding.op in ("maximum", "minimum"):
        # numpy propagates NaN; TVM's max/min compare and select, which drops it
        either_nan = R.logical_or(R.isnan(a), R.isnan(b))
        return R.where(either_nan, R.add(a, b), _BINARY[binding.op](a, b))
    elif dtype in FLOAT_DTYPES and binding.op in ("sub", "eq") and binding.inputs[0].uid == binding.inputs[1].uid:
        # x - x and x == x of one value: once fused with what reads them, TVM's simplifier
        # folds them (A[i] - A[i] to 0, A[i] == A[i] to True); numpy's are NaN where x is
        # not finite, and False where x is NaN (where(x == x, x, 0) clears NaNs)
        if binding.op == "eq":
            return R.logical_not(R.isnan(a))
        return R.where(R.isfinite(a), relax.const(0.0, dtype), relax.const(float("nan"), dtype))
    elif dtype in FLOAT_DTYPES and binding.op == "ne":
        # numpy's != is unordered (True beside NaN); TVM's is an ordered compare
        return R.logical_or(R.not_equal(a, b), R.logical_or(R.isnan(a), R.isnan(b)))
    elif dtype in FLOAT_DTYPES and binding.op in ("floordiv", "mod"):
        return _elementwise_te(bb, _npy_floordiv if binding.op == "floordiv" else _npy_mod, args, binding.op)
    elif binding.op in ("floordiv", "mod") and not _excludes(binding.inputs[1], (0, -1)):
        guarded = _guarded_int_floordiv if binding.op == "floordiv" else _guarded_int_mod
        return _elementwise_te(bb, guarded, args, binding.op)
    elif binding.op == "pow" and dtype in INT_DTYPES:
        return _integer_power(bb, args, binding)
    elif binding.op == "pow" and _is_constant(binding.inputs[1], 0.5):
        return R.sqrt(a)  # as numpy's power: (-inf) ** 0.5 is nan and (-0.0) ** 0.5 is -0.0, pow gives inf and 0.0
    return _BINARY[binding.op](a, b)


def _is_constant(var, value) -> bool:
    """Whether `var` is a scalar constant equal to `value` (FunctionScope.constants)."""
    known = FunctionScope.constants.get(var.uid)
    return known is not None and np.ndim(known) == 0 and known == value


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _excludes(var, values) -> bool:
    """Whether egad/ir/index_ranges.py proves the integer `var` never one of `values`."""
    interval = FunctionScope.ranges.get(var.uid)
    return interval is not None and not interval.empty and all(not interval.lo <= v <= interval.hi for v in values)


def _elementwise_te(bb, scalar_fn, args, name: str):
    """One TE kernel computing scalar_fn(*elements) per element of args broadcast together
    (numpy's rule: trailing axes aligned, size 1 stretched)."""
    return bb.emit_te(lambda *tensors: _broadcast_compute(scalar_fn, tensors, name), *args, primfunc_name_hint=name)


def _broadcast_compute(scalar_fn, tensors, name: str):
    """te.compute of scalar_fn over the elements of `tensors` broadcast together."""
    rank = max(len(t.shape) for t in tensors)

    def dims_at(k):  # the tensors' sizes on output axis k
        return [t.shape[k - rank + len(t.shape)] for t in tensors if k - rank + len(t.shape) >= 0]

    shape = [next((d for d in dims_at(k) if not _is_one(d)), dims_at(k)[0]) for k in range(rank)]

    def read(t, index):
        own = index[rank - len(t.shape):]
        return t(*[0 if _is_one(d) else i for d, i in zip(t.shape, own)])

    return te.compute(shape, lambda *index: scalar_fn(*(read(t, index) for t in tensors)), name=name)


def _is_one(dim) -> bool:
    return isinstance(dim, (int, tirx.IntImm)) and int(dim) == 1


def _npy_divmod(a, b):
    """(a // b, a % b) for floats as numpy computes them (npy_divmod in
    numpy/_core/src/npymath/npy_math_internal.h.src): from the exact fmod, so 1.0 // 0.1
    is 9 (floor(1.0 / 0.1) is 10) and inf // 2 is NaN. `if (mod)` in C is true for NaN,
    and TVM's `!=` on floats is ordered, so the branches test `== 0` instead."""
    zero, one = tirx.const(0, str(a.ty)), tirx.const(1, str(a.ty))
    mod = tirx.Mod(a, b)  # fmod: exact; LLVM frem, CUDA fmod (TVM has no LLVM rule for tirx.fmod)
    div = (a - mod) / b
    signs_differ = tirx.Cast("int8", b < zero) != tirx.Cast("int8", mod < zero)  # (TVM compares i1 as floats)
    adjust = tirx.Select(mod == zero, tirx.const(False), signs_differ)  # to Python's sign rule
    mod = tirx.Select(mod == zero, tirx.copysign(zero, b), tirx.Select(adjust, mod + b, mod))
    div = tirx.Select(adjust, div - one, div)
    floor = tirx.floor(div)
    snapped = floor + tirx.Select(div - floor > tirx.const(0.5, str(a.ty)), one, zero)  # to the nearest integer
    floordiv = tirx.Select(div == zero, tirx.copysign(zero, a / b), snapped)
    return tirx.Select(b == zero, a / b, floordiv), mod  # by 0: numpy's a / b and fmod's NaN


def _npy_floordiv(a, b):
    return _npy_divmod(a, b)[0]


def _npy_mod(a, b):
    return _npy_divmod(a, b)[1]


def _guarded_int_floordiv(a, b):
    """numpy's integer a // b without a trap: 0 where b is 0, INT_MIN // -1 wraps to
    INT_MIN (the hardware's division traps on both: SIGFPE)."""
    zero, minus_one = tirx.const(0, str(a.ty)), tirx.const(-1, str(a.ty))
    quotient = tirx.floordiv(a, tirx.Select(tirx.Or(b == zero, b == minus_one), tirx.const(1, str(a.ty)), b))
    lowest = tirx.min_value(str(a.ty))
    negated = tirx.Select(a == lowest, lowest, zero - a)  # -INT_MIN overflows: numpy wraps it to itself
    return tirx.Select(b == zero, zero, tirx.Select(b == minus_one, negated, quotient))


def _guarded_int_mod(a, b):
    """numpy's integer a % b without a trap: 0 where b is 0 or -1."""
    zero, minus_one = tirx.const(0, str(a.ty)), tirx.const(-1, str(a.ty))
    divisor_is_safe = tirx.Or(b == zero, b == minus_one)
    return tirx.Select(divisor_is_safe, zero,
                       tirx.floormod(a, tirx.Select(divisor_is_safe, tirx.const(1, str(a.ty)), b)))


def _integer_power(bb, args, binding):
    """numpy's integer a ** b (TVM's power is float only): square and multiply over the
    exponent's bits, wrapping as numpy does; as many bits as the exponent's proven range
    needs (2 for x ** 2). A negative exponent raises, as in the interpreter (numpy:
    "Integers to negative integer powers are not allowed"), by a host call."""
    dtype = binding.inputs[0].type.dtype
    value_bits = int(dtype[len("int"):]) - 1
    interval = FunctionScope.ranges.get(binding.inputs[1].uid)
    if interval is None or interval.empty or interval.lo < 0:
        check_exponent_not_negative(bb, args[1], binding)
    bits = value_bits if interval is None or interval.empty else max(1, min(value_bits, interval.hi.bit_length()))
    base, exponent = args
    # 8 bits per kernel, kernels not fused: TVM's simplifier sees through the Lets of one
    # kernel and expands base * base * ... (2**bits factors; minutes, or a stack overflow)
    result = bb.emit(R.ones_like(R.add(base, exponent)))
    for first in range(0, bits, _POWER_BITS_PER_KERNEL):
        last = min(bits, first + _POWER_BITS_PER_KERNEL)
        result = _unfused(bb, bb.emit_te(_times_power_bits, result, base, exponent, first, last,
                                         primfunc_name_hint="pow"))
        if last < bits:
            base = _unfused(bb, bb.emit_te(_squared_times, base, last - first, primfunc_name_hint="pow_square"))
    return result


def _unfused(bb, var):
    """var, its kernel marked opaque so that FuseOps leaves it alone."""
    kernel = bb.lookup_binding(var).args[0]
    bb.update_func(kernel, bb.get()[kernel].with_attr("op_pattern", 8))
    return var


_POWER_BITS_PER_KERNEL = 8


def _times_power_bits(result, base, exponent, first: int, last: int):
    """result * base ** (bits first..last-1 of exponent, shifted down by `first`)."""
    dtype = result.dtype

    def step(result, base, exponent):
        lets, one = [], tirx.const(1, dtype)
        for bit in range(first, last):
            bit_set = tirx.bitwise_and(tirx.shift_right(exponent, tirx.const(bit, dtype)), one) == one
            result_var = tirx.Var(f"result{bit}", dtype)
            lets.append((result_var, tirx.Select(bit_set, result * base, result)))
            result = result_var
            if bit + 1 < last:
                square = tirx.Var(f"square{bit}", dtype)  # a Let: base is read twice
                lets.append((square, base * base))
                base = square
        for var, value in reversed(lets):
            result = tirx.Let(var, value, result)
        return result

    return _broadcast_compute(step, [result, base, exponent], "pow")


def _squared_times(base, times: int):
    """base ** (2 ** times)."""
    def square(x):
        lets = []
        for k in range(times):
            var = tirx.Var(f"square{k}", base.dtype)
            lets.append((var, x * x))
            x = var
        for var, value in reversed(lets):
            x = tirx.Let(var, value, x)
        return x

    return te.compute(base.shape, lambda *i: square(base(*i)), name="square")


@lowers("expm1")
def _expm1(bb, args, attrs, binding):
    return _elementwise_te(bb, _expm1_of, args, "expm1")  # Relax has no expm1


def _expm1_of(x):
    """expm1 of a TIR float, keeping its relative accuracy near 0, where exp(x) - 1 loses
    all of it. Kahan's correction: with u = exp(x), (u - 1) * x / log(u) cancels the
    rounding error of u (x itself where u rounds to 1); far from 0 plain u - 1 is exact
    enough."""
    dtype = str(x.ty)
    u, one = tirx.exp(x), tirx.const(1, dtype)
    corrected = tirx.Select(u == one, x, (u - one) * x / tirx.log(u))
    return tirx.Select(tirx.abs(x) < tirx.const(0.5, dtype), corrected, u - one)


@lowers("log1p")
def _log1p(bb, args, attrs, binding):
    return _elementwise_te(bb, _log1p_of, args, "log1p")  # Relax has no log1p


def _log1p_of(x):
    """log1p of a TIR float in its own dtype (Metal and WebGPU have no float64, and only
    CUDA's codegen has a log1p function). Goldberg's correction: with u = 1 + x rounded,
    log(u) * x / (u - 1) cancels the rounding of u (x itself where u rounds to 1), where
    log(1 + x) would lose all relative accuracy for |x| << 1. Past 2**(mantissa bits + 1),
    u - 1 is u and log(u) is exact enough (and right for inf, where x / (u - 1) is NaN)."""
    dtype = str(x.ty)
    one, u = tirx.const(1, dtype), tirx.Var("u", dtype)
    large = tirx.const(2.0 ** (np.finfo(dtype).nmant + 1), dtype)
    corrected = tirx.Select(u == one, x, tirx.log(u) * (x / (u - one)))
    return tirx.Let(u, x + one, tirx.Select(x > large, tirx.log(u), corrected))


@lowers("select")
def _select(bb, args, attrs, binding):
    return R.where(args[0], args[1], args[2])


@lowers("cast")
def _cast(bb, args, attrs, binding):
    if binding.inputs[0].type.dtype == "int32" and attrs["dtype"] in ("int64", "float64"):
        # int32 arithmetic wraps (numpy, the interpreter); fused into the widening cast,
        # TVM's simplifier takes signed overflow for impossible and computes it in 64
        # bits: sum(a * 3) of a = 2**30 was 3 * 2**30. Unfused, the int32 result is
        # stored wrapped first.
        return _unfused(bb, bb.emit_te(topi.cast, args[0], attrs["dtype"], primfunc_name_hint="widen"))
    return R.astype(args[0], attrs["dtype"])


@lowers("stop_gradient")
def _identity(bb, args, attrs, binding):
    return args[0]

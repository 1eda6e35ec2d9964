"""Applying an op: record it while tracing, or run it on numpy values eagerly.

`apply(op, inputs, attrs)` is the one door through which the front end reaches the
op table. Inputs are tracers or numpy values; if any is a tracer the op is recorded
in the innermost open region, else the op's numpy implementation runs at once —
so `egad.numpy` on plain arrays behaves exactly like the traced program would.
"""
from __future__ import annotations

import numpy as np

from ..errors import EgadError, IndexOutOfRangeError, ShapeError, TracerLeakError, message
from ..ir import ops
from ..ir.program import Binding, Var
from ..ir.types import TensorType, canonical_dtype
from ..source import user_location
from . import context
from .tracer import Tracer


def is_tracer(x) -> bool:
    return isinstance(x, Tracer)


def apply(op_name: str, inputs: list, attrs: dict | None = None, weak: bool = False) -> list:
    """Run or record `op_name`; returns a list of outputs (tracers or numpy arrays).

    `weak` marks the outputs as weakly typed (Python-scalar-like)."""
    attrs = attrs or {}
    op = ops.OPS[op_name]
    if not any(is_tracer(x) for x in inputs):
        return _run_eagerly(op, [np.asarray(x) for x in inputs], attrs)
    builder = context.current()
    if builder is None:
        raise TracerLeakError(message(
            f"{op_name} was given a traced value after tracing finished",
            where=user_location().long(),
            instead="use traced values only inside the function passed to egad.trace"))
    in_vars = [builder.resolve(x) if is_tracer(x) else _constant_var(builder, x) for x in inputs]
    try:
        out_types = op.shape_rule([v.type for v in in_vars], attrs)
    except ShapeError as error:
        raise type(error)(message(f"{op_name}: {error}", where=user_location().long(),
                                  instead="check the operands' shapes and dtypes (print them with .shape/.dtype)")) from None
    outputs = tuple(Var(t.with_weak(weak)) for t in out_types)
    builder.bindings.append(Binding(outputs, op_name, tuple(in_vars), dict(attrs), (), user_location()))
    return [Tracer(builder, v) for v in outputs]


def record(op_name: str, inputs: list, attrs: dict, out_types: list, regions=()) -> list:
    """Record a binding in the current region with given output types (no eager path,
    no shape rule: for tapes and control ops that program transformations build;
    the verifier checks them)."""
    builder = context.current()
    in_vars = tuple(builder.resolve(x) if is_tracer(x) else _constant_var(builder, x) for x in inputs)
    outputs = tuple(Var(t) for t in out_types)
    builder.bindings.append(Binding(outputs, op_name, in_vars, dict(attrs), tuple(regions), user_location()))
    return [Tracer(builder, v) for v in outputs]


def apply1(op_name: str, inputs: list, attrs: dict | None = None, weak: bool = False):
    (out,) = apply(op_name, inputs, attrs, weak)
    return out


def _run_eagerly(op: ops.OpDef, inputs: list[np.ndarray], attrs: dict) -> list:
    try:
        op.shape_rule([TensorType(x.shape, canonical_dtype(x.dtype)) for x in inputs], attrs)
    except ShapeError as error:
        raise type(error)(message(f"{op.name}: {error}", where=user_location().long())) from None
    try:
        with np.errstate(all="ignore"):
            outputs = op.impl(inputs, attrs)
    except IndexError as error:
        raise IndexOutOfRangeError(message(f"{op.name}: {error}", where=user_location().long(),
                                           instead="clip the index into range")) from None
    return [out[()] if out.ndim == 0 else out for out in outputs]


def _constant_var(builder: context.RegionBuilder, value) -> Var:
    """A numpy value used inside a traced op becomes a `const` binding in this region."""
    array = np.asarray(value)
    var = Var(TensorType(array.shape, canonical_dtype(array.dtype)))
    builder.bindings.append(Binding((var,), "const", (), {"value": array}, (), user_location()))
    return var


def _just_made_constant(x) -> np.ndarray | None:
    """The value of a traced constant among the last few bindings of its region (a
    Python scalar traced a moment ago), else None."""
    for binding in reversed(x._builder.bindings[-4:]):
        if any(out is x._var for out in binding.outputs):
            return binding.attrs["value"] if binding.op == "const" else None
    return None


def constant(value, dtype: str, weak: bool = False):
    """A traced constant in the current region (or the numpy value when not tracing)."""
    try:
        array = np.asarray(value, dtype=dtype)
    except OverflowError:  # numpy 2: a Python int beyond the array's dtype
        raise ShapeError(message(f"the Python integer {value} does not fit {dtype}", where=user_location().long(),
                                 instead="cast the array to a wider dtype first, e.g. x.astype('int64') or "
                                         "x.astype('float64')")) from None
    builder = context.current()
    if builder is None:
        return array
    var = Var(TensorType(array.shape, dtype, weak))
    builder.bindings.append(Binding((var,), "const", (), {"value": array}, (), user_location()))
    return Tracer(builder, var)


def to_tracer(x):
    """`x` as a tracer in the current region (constants get a `const` binding)."""
    if is_tracer(x):
        return x
    dtype, weak = dtype_of(x)
    return constant(x, dtype, weak)


# --- dtypes and weak types -----------------------------------------------------------

_PYTHON_KIND = {"b": False, "i": 0, "u": 0, "f": 0.0}


def dtype_of(x) -> tuple[str, bool]:
    """(dtype, weak) of any operand: tracers know theirs, Python scalars are weak."""
    if is_tracer(x):
        return x._var.type.dtype, x._var.type.weak
    if isinstance(x, bool):
        return "bool", True
    if isinstance(x, int):
        return "int64", True
    if isinstance(x, float) and not isinstance(x, np.generic):  # np.float64 subclasses float, yet is strong
        return "float64", True
    try:
        return canonical_dtype(np.asarray(x).dtype), False
    except ValueError as error:  # float16, complex, strings, ...
        raise EgadError(message(f"unsupported operand {type(x).__name__}: {error}", where=user_location().long(),
                                instead="use bool, int32, int64, float32 or float64 values")) from None


def result_dtype(*operands) -> tuple[str, bool]:
    """numpy 2's promotion (NEP 50): Python scalars, and values derived only from
    them (loop counters), are weak and adopt the other operand's dtype."""
    typed = [dtype_of(x) for x in operands]
    strong = [np.dtype(d) for d, w in typed if not w]
    weak = [_PYTHON_KIND[np.dtype(d).kind] for d, w in typed if w]
    dtype = canonical_dtype(np.result_type(*strong, *weak))
    return dtype, not strong


def cast_to(x, dtype: str, weak: bool = False):
    """`x` converted to `dtype`: a cast op for tracers, a conversion for constants."""
    if is_tracer(x):
        if x._var.type.dtype == dtype:
            return x
        value = _just_made_constant(x)
        if value is not None and context.current() is not None:
            # a constant converted now, not a cast on the device: a float32 program's
            # Python 0.0 stays float32 code (Metal and WebGPU have no float64)
            return constant(value.astype(dtype), dtype, weak)
        return apply1("cast", [x], {"dtype": dtype}, weak=weak)
    if type(x) in (bool, int, float) and context.current() is not None:
        return constant(x, dtype, weak)
    return np.asarray(x, dtype=dtype)

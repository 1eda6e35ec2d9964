"""Checks compiled code makes on the host, where numpy (so the interpreter) has no value.

max, min and argmax over an axis of size 0 have none (numpy: "zero-size array to
reduction operation maximum"), nor an integer to a negative integer power, nor a
shape with a negative dim or a reshape to another element count (numpy raises; TVM
made an empty array of the one and read past the end of the other, or trapped on a
division by 0). Where the compiled code cannot know statically, a host call checks
first (`egad.reduction_is_empty`, `egad.exponent_is_negative`, `egad.shape_fits`),
raising ValueError with its site and the interpreter's words; `Compiled.__call__`
turns that into the interpreter's ShapeError naming the op and the user's line
(`host_check_error`). Sites are numbered in `host_check_sites` order, the same in
every program of one structure. The packed functions themselves are in
runtime_checks.py, which needs TVM's runtime alone.
"""
from __future__ import annotations

import json

import numpy as np
from tvm import relax

from egad.errors import ShapeError, message
from egad.ir import shapes
from egad.ir.ops import TOP_K_TOO_SHORT
from egad.ir.program import Program, walk_bindings
from egad.ir.types import INT_DTYPES

from .index_checks import site_of
from .registry import FunctionScope, axis_size
from .runtime_checks import FAILED_HOST_CHECK


# what numpy (so the interpreter) says of each over nothing
NO_IDENTITY = {"reduce_max": "zero-size array to reduction operation maximum which has no identity",
               "reduce_min": "zero-size array to reduction operation minimum which has no identity",
               "argmax": "attempt to get argmax of an empty sequence"}
NEGATIVE_EXPONENT = "Integers to negative integer powers are not allowed."  # numpy's words, as the interpreter's
SIZED_OPS = ("full", "iota", "reshape", "broadcast_to")  # their symbolic dims come from int64 size inputs


def host_check_sites(program: Program) -> list:
    """The reductions without identity (max, min, argmax), the integer powers and the ops
    shaped by sizes that may be negative or not fit (`_shape_may_not_fit`) of `program`,
    in walk order: the ops whose compiled code checks a value on the host."""
    producers = {var.uid: binding for binding in walk_bindings(program.region) for var in binding.outputs}
    return [binding for binding in walk_bindings(program.region)
            if binding.op in NO_IDENTITY or binding.op == "pow" and binding.inputs[0].type.dtype in INT_DTYPES
            or binding.op in SIZED_OPS and _shape_may_not_fit(binding, producers)
            or binding.op == "top_k" and not isinstance(binding.inputs[0].type.shape[-1], int)]


def _shape_may_not_fit(binding, producers: dict) -> bool:
    """A reshape between shapes of other symbols (their element counts may differ), or a
    size input not known to be >= 0 (`x.shape[0] - 3`; not `x.shape[0]`, a constant or a
    maximum with 0)."""
    if binding.op == "reshape" and shapes.symbols_of(binding.attrs["shape"]) != \
            shapes.symbols_of(binding.inputs[0].type.shape):
        return True
    sizes = binding.inputs if binding.op in ("full", "iota") else binding.inputs[1:]
    return not all(_non_negative(size, producers) for size in sizes)


def _non_negative(var, producers: dict, depth: int = 8) -> bool:
    producer = producers.get(var.uid)
    if producer is None or depth == 0:
        return False
    if producer.op == "dim":
        return True
    if producer.op == "const":
        return bool(np.all(producer.attrs["value"] >= 0))
    if producer.op == "maximum":
        return any(_non_negative(v, producers, depth - 1) for v in producer.inputs)
    if producer.op in ("add", "mul", "minimum", "cast"):
        return all(_non_negative(v, producers, depth - 1) for v in producer.inputs)
    return False


def check_shape_fits(bb, binding, sizes, x=None) -> None:
    """The host call `egad.shape_fits` (`egad.reshape_fits` for a reshape of x) before an
    op of SIZED_OPS, where it is a host check site."""
    if id(binding) not in FunctionScope.host_check_sites:
        return
    target = relax.expr.String(json.dumps([d if isinstance(d, int) else None for d in binding.attrs["shape"]]))
    if binding.op == "reshape":
        _host_call(bb, "egad.reshape_fits", binding, target, bb.emit(relax.op.shape_to_tensor(relax.op.shape_of(x))),
                   *sizes)
    else:
        _host_call(bb, "egad.shape_fits", binding, target, *sizes)


def _host_call(bb, function: str, binding, *args) -> None:
    """A call of the host check `function` with `binding`'s site first (-1 for none)."""
    site = relax.prim_value(FunctionScope.host_check_sites.get(id(binding), -1), "int64")
    bb.emit(relax.Call(relax.ExternFunc(function), [site, *args], ty_args=[relax.TupleType([])]))


def found_failed_check(error: ValueError) -> tuple[int, str] | None:
    """(site, what failed) when `error` was raised by a host check, else None."""
    match = FAILED_HOST_CHECK.search(str(error))
    return (int(match.group(1)), match.group(2)) if match else None


def host_check_error(program: Program, site: int, what: str = "") -> ShapeError:
    """The error a compiled `program` raises when the host check at `site` fails (`what`)."""
    op, where = site_of(host_check_sites(program), site, "host check")
    if op in SIZED_OPS:
        return ShapeError(message(f"{op}: {what}", where=where,
                                  instead="check the sizes this shape is computed from"))
    if op == "pow":
        return ShapeError(message(f"pow: {NEGATIVE_EXPONENT}", where=where,
                                  instead="keep integer exponents >= 0, or cast the base to float first"))
    if op == "top_k":
        return ShapeError(message(f"top_k: {TOP_K_TOO_SHORT}: {what}", where=where,
                                  instead="take at most as many as the shortest run gives, or guard it with egad.cond"))
    what = NO_IDENTITY.get(op, "a reduction over an axis of size 0")
    return ShapeError(message(f"{op}: {what}", where=where,
                              instead="reduce over a non-empty axis (check the sequence length), or guard the "
                                      "reduction with egad.cond"))


def check_long_enough(bb, x, binding, least: int) -> None:
    """A host call raising where the last axis of x is shorter than `least` at run time
    (none where it is static: tracing refused it then)."""
    x_type = binding.inputs[0].type
    if isinstance(x_type.shape[-1], int):
        return
    _host_call(bb, "egad.at_least", binding, relax.prim_value(least, "int64"),
               axis_size(bb, x, x_type, x_type.ndim - 1))


def check_exponent_not_negative(bb, exponent, binding) -> None:
    """A host call raising where an element of the integer `exponent` of `binding` (a
    pow) is negative at run time."""
    _host_call(bb, "egad.exponent_is_negative", binding, exponent)


def check_not_empty(bb, x, binding, axes) -> None:
    """A host call raising where one of `axes` of x has size 0 at run time (none where all
    are static and non-zero)."""
    x_type = binding.inputs[0].type
    axes = [axis % x_type.ndim for axis in axes]
    if all(isinstance(x_type.shape[axis], int) and x_type.shape[axis] > 0 for axis in axes):
        return
    sizes = [axis_size(bb, x, x_type, axis) for axis in axes]
    _host_call(bb, "egad.reduction_is_empty", binding,
               *(relax.prim_value(size, "int64") if isinstance(size, int) else size for size in sizes))

"""Checks compiled code makes on the host, where numpy (so the interpreter) has no value.

max, min and argmax over an axis of size 0 have none (numpy: "zero-size array to
reduction operation maximum"), nor an integer to a negative integer power. Where
the compiled code cannot know statically, a host call checks first
(`egad.reduction_is_empty`, `egad.exponent_is_negative`), raising ValueError with
its site; `Compiled.__call__` turns that into the interpreter's ShapeError naming
the op and the user's line (`host_check_error`). Sites are numbered in
`host_check_sites` order, the same in every program of one structure.
"""
from __future__ import annotations

import re

import tvm
from tvm import relax

from egad.errors import ShapeError, message
from egad.ir.program import Program, walk_bindings
from egad.ir.types import INT_DTYPES

from .index_checks import site_of
from .registry import FunctionScope
from .shape import axis_size


# what numpy (so the interpreter) says of each over nothing
NO_IDENTITY = {"reduce_max": "zero-size array to reduction operation maximum which has no identity",
               "reduce_min": "zero-size array to reduction operation minimum which has no identity",
               "argmax": "attempt to get argmax of an empty sequence"}
NEGATIVE_EXPONENT = "Integers to negative integer powers are not allowed."  # numpy's words, as the interpreter's
_FAILED = re.compile(r"egad host check site (\d+): (an axis of size 0|a negative integer exponent)")


@tvm.register_global_func("egad.reduction_is_empty", override=True)
def _reduction_is_empty(site: int, *sizes) -> None:
    if any(int(size.numpy()) == 0 if isinstance(size, tvm.runtime.Tensor) else int(size) == 0 for size in sizes):
        raise ValueError(f"egad host check site {site}: an axis of size 0")


@tvm.register_global_func("egad.exponent_is_negative", override=True)
def _exponent_is_negative(site: int, exponent) -> None:
    if (exponent.numpy() < 0).any():
        raise ValueError(f"egad host check site {site}: a negative integer exponent")


def host_check_sites(program: Program) -> list:
    """The reductions without identity (max, min, argmax) and the integer powers of
    `program` in walk order: the ops whose compiled code checks a value on the host."""
    return [binding for binding in walk_bindings(program.region)
            if binding.op in NO_IDENTITY or binding.op == "pow" and binding.inputs[0].type.dtype in INT_DTYPES]


def found_failed_check(error: ValueError) -> int | None:
    """The site when `error` was raised by a host check, else None."""
    match = _FAILED.search(str(error))
    return int(match.group(1)) if match else None


def host_check_error(program: Program, site: int) -> ShapeError:
    """The error a compiled `program` raises when the host check at `site` fails."""
    op, where = site_of(host_check_sites(program), site, "host check")
    if op == "pow":
        return ShapeError(message(f"pow: {NEGATIVE_EXPONENT}", where=where,
                                  instead="keep integer exponents >= 0, or cast the base to float first"))
    what = NO_IDENTITY.get(op, "a reduction over an axis of size 0")
    return ShapeError(message(f"{op}: {what}", where=where,
                              instead="reduce over a non-empty axis (check the sequence length), or guard the "
                                      "reduction with egad.cond"))


def check_exponent_not_negative(bb, exponent, binding) -> None:
    """A host call raising where an element of the integer `exponent` of `binding` (a
    pow) is negative at run time."""
    bb.emit(relax.Call(relax.ExternFunc("egad.exponent_is_negative"),
                       [relax.prim_value(FunctionScope.host_check_sites.get(id(binding), -1), "int64"), exponent],
                       ty_args=[relax.TupleType([])]))


def check_not_empty(bb, x, binding, axes) -> None:
    """A host call raising where one of `axes` of x has size 0 at run time (none where all
    are static and non-zero)."""
    x_type = binding.inputs[0].type
    axes = [axis % x_type.ndim for axis in axes]
    if all(isinstance(x_type.shape[axis], int) and x_type.shape[axis] > 0 for axis in axes):
        return
    sizes = [axis_size(bb, x, x_type, axis) for axis in axes]
    bb.emit(relax.Call(relax.ExternFunc("egad.reduction_is_empty"),
                       [relax.prim_value(FunctionScope.host_check_sites.get(id(binding), -1), "int64"),
                        *(relax.prim_value(size, "int64") if isinstance(size, int) else size for size in sizes)],
                       ty_args=[relax.TupleType([])]))

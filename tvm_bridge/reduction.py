"""Lowering of reductions, and of any op's reduction over a statically empty axis.

max, min and argmax have no value over nothing: the interpreter raises (numpy's
"zero-size array to reduction operation maximum"), and TVM's reduction would return
its init (the lowest float) or memory never written. Where a reduced axis is symbolic
(or 0), a host call checks its size first (`egad.reduction_is_empty`), raising
ValueError with the site; `Compiled.__call__` turns it into ShapeError naming the op
and the user's line (`empty_reduction_error`). Sites are numbered in
`reduction_sites` order, the same in every program of one structure. Integer `pow`
shares these sites: numpy has no value for a negative integer exponent either, so a
host call checks the exponent (`egad.exponent_is_negative`) and the same path raises
the interpreter's ShapeError.
"""
from __future__ import annotations

import math
import re

import tvm
from tvm import relax, te, tirx

from egad.errors import ShapeError, message
from egad.ir.ops import parse_einsum
from egad.ir.program import Program, walk_bindings
from egad.ir.types import FLOAT_DTYPES, INT_DTYPES

from .creation import filled
from .index_checks import site_of
from .registry import FunctionScope, lowers
from .shape import axis_size

R = relax.op
_REDUCE = {"reduce_sum": R.sum, "reduce_mean": R.mean, "reduce_max": R.max, "reduce_min": R.min}


# what numpy (so the interpreter) says of each over nothing
NO_IDENTITY = {"reduce_max": "zero-size array to reduction operation maximum which has no identity",
               "reduce_min": "zero-size array to reduction operation minimum which has no identity",
               "argmax": "attempt to get argmax of an empty sequence"}
NEGATIVE_EXPONENT = "Integers to negative integer powers are not allowed."  # numpy's words, as the interpreter's
_EMPTY = re.compile(r"egad reduction site (\d+): (an axis of size 0|a negative integer exponent)")


@tvm.register_global_func("egad.reduction_is_empty", override=True)
def _reduction_is_empty(site: int, *sizes) -> None:
    if any(int(size.numpy()) == 0 if isinstance(size, tvm.runtime.Tensor) else int(size) == 0 for size in sizes):
        raise ValueError(f"egad reduction site {site}: an axis of size 0")


@tvm.register_global_func("egad.exponent_is_negative", override=True)
def _exponent_is_negative(site: int, exponent) -> None:
    if (exponent.numpy() < 0).any():
        raise ValueError(f"egad reduction site {site}: a negative integer exponent")


def reduction_sites(program: Program) -> list:
    """The reductions without identity (max, min, argmax) and the integer powers of
    `program` in walk order: the ops whose compiled code checks a value on the host."""
    return [binding for binding in walk_bindings(program.region)
            if binding.op in NO_IDENTITY or binding.op == "pow" and binding.inputs[0].type.dtype in INT_DTYPES]


def found_empty_reduction(error: ValueError) -> int | None:
    """The site when `error` was raised by `egad.reduction_is_empty`, else None."""
    match = _EMPTY.search(str(error))
    return int(match.group(1)) if match else None


def empty_reduction_error(program: Program, site: int) -> ShapeError:
    """The error a compiled `program` raises for an empty reduction at `site`."""
    op, where = site_of(reduction_sites(program), site, "reduction")
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
                       [relax.prim_value(FunctionScope.empty_sites.get(id(binding), -1), "int64"), exponent],
                       ty_args=[relax.TupleType([])]))


def _check_not_empty(bb, x, binding, axes) -> None:
    """A host call raising where one of `axes` of x has size 0 at run time (none where all
    are static and non-zero)."""
    x_type = binding.inputs[0].type
    axes = [axis % x_type.ndim for axis in axes]
    if all(isinstance(x_type.shape[axis], int) and x_type.shape[axis] > 0 for axis in axes):
        return
    sizes = [axis_size(bb, x, x_type, axis) for axis in axes]
    bb.emit(relax.Call(relax.ExternFunc("egad.reduction_is_empty"),
                       [relax.prim_value(FunctionScope.empty_sites.get(id(binding), -1), "int64"),
                        *(relax.prim_value(size, "int64") if isinstance(size, int) else size for size in sizes)],
                       ty_args=[relax.TupleType([])]))


@lowers(*_REDUCE)
def _reduce(bb, args, attrs, binding):
    axes, keepdims, dtype = list(attrs["axes"]), attrs["keepdims"], binding.inputs[0].type.dtype
    if binding.op in NO_IDENTITY:  # (no axes: nothing is reduced)
        _check_not_empty(bb, args[0], binding, axes)
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
    return R.astype(reduce(as_int, axis=list(attrs["axes"]), keepdims=attrs["keepdims"]), "bool")


@lowers("argmax")
def _argmax(bb, args, attrs, binding):
    _check_not_empty(bb, args[0], binding, [attrs["axis"]])
    if binding.inputs[0].type.dtype in FLOAT_DTYPES:
        index_and_value = bb.emit_te(_argmax_first_nan, args[0], attrs["axis"], primfunc_name_hint="argmax")
        return relax.TupleGetItem(index_and_value, 0)
    return R.astype(R.argmax(args[0], axis=attrs["axis"]), "int64")


def _argmax_first_nan(x, axis: int):
    """The index of the first maximum of x along `axis`, or of its first NaN, as numpy
    (TVM's argmax compares, and every comparison with NaN is false, so it skips NaN).
    One reduction, whose order is total (NaN above all, then value, then the lower
    index), so it may be combined in any order; the identity's index is -1."""
    def combine(lhs, rhs):
        (i, a), (j, b) = lhs, rhs
        better_value = tirx.Or(a > b, tirx.And(a == b, i < j))
        lhs_wins = tirx.And(i >= 0, tirx.Or(j < 0, tirx.Select(
            tirx.isnan(a), tirx.Or(tirx.Not(tirx.isnan(b)), i < j), tirx.And(tirx.Not(tirx.isnan(b)), better_value))))
        return tirx.Select(lhs_wins, i, j), tirx.Select(lhs_wins, a, b)

    def identity(index_dtype, value_dtype):
        return tirx.const(-1, index_dtype), tirx.const(0, value_dtype)

    first_max = te.comm_reducer(combine, identity, name="argmax_first_nan")
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

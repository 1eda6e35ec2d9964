"""`egad.trace`: run a Python function on tracers and record a `Program`."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import sys

import numpy as np

from ..errors import ArgumentError, EgadError, TracerLeakError, UnsupportedError, message
from ..ir.program import ArgSignature, Program, Region
from ..ir.types import Dim, TensorType, canonical_dtype
from ..ir.verify import verify
from ..pytree import flatten, leaf_paths, path_hint, unflatten
from ..source import SourceLoc, located_at, user_location
from . import context
from .primitives import to_tracer
from .tracer import Tracer


# init=False: a dataclass's generated __init__ runs as "<string>", which user_location() would name as the user's line
@dataclasses.dataclass(frozen=True, init=False)
class Spec:
    """An argument described by shape and dtype only; a str dim is symbolic.

    Example: `egad.Spec(("T", 32, 256), "float32")` traces for any sequence length T."""

    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __init__(self, shape, dtype="float32"):
        object.__setattr__(self, "shape", _spec_shape(shape))
        object.__setattr__(self, "dtype", _spec_dtype(dtype))

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)


def _spec_shape(shape) -> tuple[Dim, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list)):
        raise ArgumentError(message(f"egad.Spec's shape must be a tuple of dims, got {shape!r}",
                                    where=user_location().long(),
                                    instead="write the shape as a tuple, e.g. egad.Spec((3,), 'float32')"))
    dims = []
    for dim in shape:
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, (bool, np.bool_)) and dim >= 0:
            dims.append(int(dim))
        elif isinstance(dim, str) and dim.isidentifier():  # not `T-1`, egad's name for x[1:]'s length
            dims.append(dim)
        else:
            raise ArgumentError(message(f"egad.Spec's shape {tuple(shape)!r} has an invalid dim {dim!r}",
                                        where=user_location().long(),
                                        instead="give each dim as a size >= 0, or as a name (an identifier) such "
                                                "as 'T' for a length known only when the program runs"))
    return tuple(dims)


def _spec_dtype(dtype) -> str:
    try:
        return canonical_dtype(dtype)
    except (TypeError, ValueError) as error:
        raise ArgumentError(message(f"egad.Spec's dtype {dtype!r} is not usable: {error}",
                                    where=user_location().long(),
                                    instead="use one of 'bool', 'int32', 'int64', 'float32', 'float64'")) from None


def leaf_type(leaf, where: str) -> TensorType:
    """The param type of one argument leaf; Python scalars are weakly typed."""
    if isinstance(leaf, Spec):
        return leaf.type
    if isinstance(leaf, TensorType):  # a param type itself, when a program is traced again
        return leaf
    if isinstance(leaf, (np.generic, np.ndarray)):  # numpy scalars are strong, even np.float64
        try:
            return TensorType(np.shape(leaf), canonical_dtype(leaf.dtype))
        except ValueError as error:  # float16, complex, uint8, object, ...
            raise ArgumentError(message(f"{where}: {error}", where=user_location().long(),
                                        instead="convert it first, e.g. x.astype(np.float32)")) from None
    if isinstance(leaf, bool):
        return TensorType((), "bool", weak=True)
    if isinstance(leaf, int):
        return TensorType((), "int64", weak=True)
    if isinstance(leaf, float):
        return TensorType((), "float64", weak=True)
    if isinstance(leaf, Tracer):
        raise ArgumentError(message(f"{where} is a traced value from another trace", where=user_location().long(),
                                    instead="pass numpy arrays, Python scalars or egad.Spec"))
    try:
        array = np.asarray(leaf)
        return TensorType(array.shape, canonical_dtype(array.dtype))
    except (TypeError, ValueError) as error:
        raise ArgumentError(message(
            f"{where} of type {type(leaf).__name__} cannot be traced ({error})", where=user_location().long(),
            instead="pass numpy arrays, Python scalars, egad.Spec, or pytrees (tuple/list/dict) of them; "
                    "mark other Python values static with static_argnums")) from None


def _param_names(fn, count: int) -> list[str]:
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return [names[k] if k < len(names) else f"arg{k}" for k in range(count)]


def normalize_static_argnums(static_argnums, count: int) -> frozenset[int]:
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    result = set()
    for k in static_argnums:
        if not -count <= k < count:
            raise ArgumentError(message(f"static_argnums entry {k} is out of range for {count} arguments",
                                        where=user_location().long()))
        result.add(k % count)
    return frozenset(result)


def trace(fn, *args, static_argnums=(), convert: bool = False) -> Program:
    """Trace `fn(*args)` into a Program. Every positional argument is traced (arrays,
    scalars, egad.Spec, pytrees of them) except those in `static_argnums`, which are
    baked in as Python values. `convert=True` converts fn's Python control flow on
    traced values, as `egad.function` does.

    Example: `prog = egad.trace(loss, W, U, xs, h0); print(prog)`"""
    if not callable(fn):
        raise ArgumentError(message(f"egad.trace needs a function, got {type(fn).__name__}",
                                    where=user_location().long()))
    original = fn
    if convert:
        from .convert import function

        fn = function(fn)
    static = normalize_static_argnums(static_argnums, len(args))
    names = _param_names(fn, len(args))
    location = _function_location(fn)
    with context.open_region("program", top_level=True) as builder:
        call_args, trees, static_values = [], [], []
        for k, arg in enumerate(args):
            if k in static:
                call_args.append(arg)
                trees.append(None)
                static_values.append(arg)
                continue
            leaves, tree = flatten(arg)
            tracers = []
            for path, leaf in zip(leaf_paths(tree, names[k]), leaves):
                var = builder.add_param(leaf_type(leaf, f"argument {k} ({path})"), path_hint(path))
                tracers.append(Tracer(builder, var))
            call_args.append(unflatten(tree, tracers))
            trees.append(tree)
            static_values.append(None)
        try:
            out = fn(*call_args)
        except RecursionError:
            raise UnsupportedError(message(
                f"tracing {getattr(fn, '__name__', 'the function')} went past Python's recursion limit "
                f"({sys.getrecursionlimit()} frames): its loops and branches nest too deep (each level of "
                "egad.fori_loop, while_loop, scan or cond takes about seven frames), or it recurses without end",
                where=location.long(),
                instead="nest fewer levels (a loop over a stacked array instead of a loop per level), or raise "
                        "the limit with sys.setrecursionlimit before egad.trace")) from None
        out_leaves, out_tree = flatten(out)
        try:
            with located_at(location):  # constants returned as Python values belong to fn, not the caller
                results = [builder.resolve(to_tracer(leaf)) for leaf in out_leaves]
        except TracerLeakError as error:  # it already names where the value was made and the output's line
            raise TracerLeakError(f"the traced function's output: {error}") from None
        except EgadError as error:
            raise EgadError(message(f"the traced function's output: {error}", where=location)) from None
    region = Region(tuple(builder.params), builder.bindings, tuple(results), "program")
    program = Program(region, ArgSignature(tuple(trees), tuple(static_values)), out_tree,
                      name=getattr(fn, "__name__", "program"), loc=location,
                      retrace=functools.partial(_retrace, original, static_argnums, convert))
    return verify(program)


def _retrace(fn, static_argnums, convert: bool, *args) -> Program:
    return trace(fn, *args, static_argnums=static_argnums, convert=convert)


def _function_location(fn) -> SourceLoc:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return user_location()
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)

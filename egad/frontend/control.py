"""Control-flow combinators with JAX's signatures: cond, switch, fori_loop,
while_loop, scan. Each traces its functions into closed regions and records one
control op; none of them unrolls. On concrete (non-traced) inputs outside tracing
they simply run in Python, so the same function works eagerly.

Region bodies are traced with their state's types; where a weakly typed initial
value (a Python scalar) meets a body that returns a concrete dtype, the state is
promoted and the body traced again, as JAX does.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..errors import ArgumentError, BranchMismatchError, EgadError, LoopStateError, ShapeError, message
from ..ir.program import Binding, Var
from ..ir.types import TensorType, fresh_symbol, is_int
from ..pytree import TreeDef, flatten, leaf_paths, path_hint, unflatten
from ..source import user_location
from . import context
from .primitives import apply1, cast_to, dtype_of, is_tracer, result_dtype, to_tracer
from .tracer import Tracer


@dataclasses.dataclass
class _Traced:
    """A traced function body, before its params for captured values are fixed."""

    builder: context.RegionBuilder
    results: list[Var]
    out_tree: TreeDef

    @property
    def out_types(self) -> list[TensorType]:
        return [v.type for v in self.results]


def _trace_region(name: str, param_types: list[TensorType], call: Callable, cast_outputs=None,
                  hints: list[str] = ()) -> _Traced:
    """Trace `call(*param_tracers)` in a new child region. `cast_outputs`, when given,
    lists a dtype (or None) per output leaf to convert to before the region ends;
    `hints` name the params for printing."""
    hints = list(hints) + [""] * (len(param_types) - len(hints))
    with context.open_region(name) as builder:
        tracers = [Tracer(builder, builder.add_param(t, hint)) for t, hint in zip(param_types, hints)]
        out = call(*tracers)
        leaves, out_tree = flatten(out)
        results = []
        for k, leaf in enumerate(leaves):
            value = to_tracer(leaf)
            if cast_outputs is not None and cast_outputs[k] is not None:
                value = cast_to(value, cast_outputs[k], weak=value.type.weak)
            results.append(builder.resolve(value))
    return _Traced(builder, results, out_tree)


def _finish(*traced: _Traced):
    """Regions for sibling bodies sharing one list of captured outer values."""
    captured = context.capture_order(*(t.builder for t in traced))
    regions = tuple(t.builder.finish(t.results, captured) for t in traced)
    return regions, captured


def _emit(op: str, inputs: list[Var], attrs: dict, regions, out_types: list[TensorType]) -> list[Tracer]:
    builder = context.current()
    outputs = tuple(Var(t) for t in out_types)
    builder.bindings.append(Binding(outputs, op, tuple(inputs), attrs, regions, user_location()))
    return [Tracer(builder, v) for v in outputs]


def _tracing() -> bool:
    return context.current() is not None


def _state_leaves(init, what: str) -> tuple[list, TreeDef, list[TensorType]]:
    """Flatten an initial state (or operands) into tracers in the current region."""
    leaves, tree = flatten(init)
    tracers = []
    for path, leaf in zip(leaf_paths(tree, what), leaves):
        try:
            tracers.append(to_tracer(leaf))
        except EgadError as error:
            raise EgadError(message(f"{path}: {error}", where=user_location().long())) from None
    return tracers, tree, [t.type for t in tracers]


def _describe(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _reconcile_loop_state(traced_types: list[TensorType], in_types: list[TensorType], paths: list[str],
                          body: str) -> tuple[list | None, list | None]:
    """Compare what the body returns with the state it got.

    Returns (promoted input dtypes or None, output casts or None); raises
    LoopStateError when the two cannot agree."""
    promote_in, cast_out = [None] * len(in_types), [None] * len(in_types)
    for k, (got, want) in enumerate(zip(traced_types, in_types)):
        if got.shape != want.shape:
            raise _state_mismatch(paths[k], want, got, body, "shape",
                                  instead="loop state must keep its shape across iterations; pad to a fixed shape, "
                                          "or make the value a per-step output (egad.scan's ys)")
        if got.dtype == want.dtype:
            continue
        joined, _ = result_dtype(*(_dtype_token(t) for t in (got, want)))
        if want.weak and joined == got.dtype:
            promote_in[k] = got.dtype
        elif got.weak and joined == want.dtype:
            cast_out[k] = want.dtype
        else:
            raise _state_mismatch(paths[k], want, got, body, "dtype",
                                  instead=f"keep the dtype stable: start from a {got.dtype} value or "
                                          f".astype('{want.dtype}') the new state")
    return (promote_in if any(promote_in) else None), (cast_out if any(cast_out) else None)


def _state_mismatch(path: str, want: TensorType, got: TensorType, body: str, changed: str,
                    instead: str) -> LoopStateError:
    entered, returned, where = _describe(want), _describe(got), user_location().long()
    return LoopStateError(message(f"loop state leaf `{path}` enters {body} as {entered} but {body} returns {returned}",
                                  where=where, instead=instead),
                          leaf=path, entered=entered, returned=returned, body=body, changed=changed, where=where)


def _dtype_token(t: TensorType):
    """A stand-in value of type `t` for `result_dtype` (a Python scalar when weak)."""
    if t.weak:
        return {"bool": False, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0}[t.dtype] \
            if t.dtype in ("bool", "int64", "float64") else np.zeros((), t.dtype)
    return np.zeros((), t.dtype)


def _check_tree(got: TreeDef, want: TreeDef, what: str, instead: str, error=LoopStateError):
    if got != want:
        raise error(message(f"{what}: structure {got} differs from {want}", where=user_location().long(),
                            instead=instead))


def _one_value(x, what: str):
    """`x`, refused when it is a tuple, list or dict (numpy would read one of traced
    values as an array, and the error would blame numpy)."""
    if isinstance(x, (tuple, list, dict)):
        raise ShapeError(message(f"{what} must be one scalar, got a {type(x).__name__} of {len(x)}",
                                 where=user_location().long(),
                                 instead="combine the conditions into one, e.g. (a < 10) & (b < 3)"))
    return x


def _as_predicate(x, what: str):
    """A scalar bool from a traced predicate; ints are true when non-zero."""
    dtype, _ = dtype_of(_one_value(x, what))
    shape = x.type.shape if is_tracer(x) else np.shape(x)
    if shape != ():
        raise ShapeError(message(f"{what} must be a scalar, got shape {shape}",
                                 where=user_location().long(), instead="reduce it first, e.g. enp.any(x) or x[0]"))
    if dtype == "bool":
        return x
    if is_int(dtype):
        return apply1("ne", [cast_to(x, dtype), cast_to(0, dtype)])
    raise ShapeError(message(f"{what} must be a bool (or int) scalar, got {dtype}", where=user_location().long(),
                             instead="compare it, e.g. x > 0"))


# --- cond / switch -------------------------------------------------------------------

def cond(pred, true_fun, false_fun, *operands):
    """`true_fun(*operands) if pred else false_fun(*operands)`, with a traced `pred`.

    Example: `egad.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, x)`"""
    for name, fn in (("true_fun", true_fun), ("false_fun", false_fun)):
        _require_function(fn, f"cond's {name}", "egad.cond(pred, lambda x: x * 2, lambda x: -x, x)")
    if not is_tracer(_one_value(pred, "cond's predicate")):
        return true_fun(*operands) if bool(np.asarray(pred)) else false_fun(*operands)
    return _branch("if", _as_predicate(pred, "cond's predicate"), [true_fun, false_fun], operands,
                   ["then", "else"])


def switch(index, branches, *operands):
    """`branches[index](*operands)` with a traced `index`, clamped to range as in JAX.

    Example: `egad.switch(k, [lambda x: x, lambda x: x * x, enp.sin], x)`"""
    try:
        branches = list(branches)
    except TypeError:  # one function instead of a list of them
        raise ArgumentError(message(f"switch's branches must be a list of functions, got {type(branches).__name__}",
                                    where=user_location().long(),
                                    instead="egad.switch(index, [branch0, branch1, ...], *operands)")) from None
    for k, fn in enumerate(branches):
        _require_function(fn, f"switch's branch {k}", "egad.switch(index, [branch0, branch1, ...], *operands)")
    if not branches:
        raise ArgumentError(message("switch needs at least one branch", where=user_location().long(),
                                    instead="egad.switch(index, [branch0, branch1, ...], *operands)"))
    if not is_tracer(_one_value(index, "switch's index")):
        chosen = int(np.clip(np.asarray(index), 0, len(branches) - 1))
        return branches[chosen](*operands)
    if index.ndim != 0 or not (is_int(index.type.dtype) or index.type.dtype == "bool"):
        raise ShapeError(message(f"switch's index must be an int scalar, got {index.type}",
                                 where=user_location().long(), instead="convert with .astype('int64')"))
    if len(branches) == 1:
        return branches[0](*operands)
    return _branch("switch", cast_to(index, "int64"), branches, operands,
                   [f"branch{k}" for k in range(len(branches))])


def _require_function(fn, what: str, usage: str):
    if not callable(fn):
        raise ArgumentError(message(f"{what} must be a function, got {type(fn).__name__}", where=user_location().long(),
                                    instead=f"pass a function of the operands, e.g. {usage}"))


def _branch(op: str, selector, functions, operands, names):
    leaves, tree, types = _state_leaves(tuple(operands), "operands")

    def tracer_for(fn):
        return lambda *params: fn(*unflatten(tree, params))

    hints = [path_hint(p) for p in leaf_paths(tree, "operands")]
    traced = [_trace_region(name, types, tracer_for(fn), hints=hints) for fn, name in zip(functions, names)]
    for t, name in zip(traced[1:], names[1:]):
        _check_tree(t.out_tree, traced[0].out_tree, f"{op} branch {name!r} returns a different structure than {names[0]!r}",
                    "make every branch return the same pytree of arrays", BranchMismatchError)
    casts = _join_branch_types(traced, names, leaf_paths(traced[0].out_tree, "output"))
    if casts is not None:
        traced = [_trace_region(name, types, tracer_for(fn), cast, hints)
                  for fn, name, cast in zip(functions, names, casts)]
    regions, captured = _finish(*traced)
    out_types = [TensorType(t.shape, t.dtype, t.weak) for t in traced[0].out_types]
    for k in range(len(out_types)):
        out_types[k] = out_types[k].with_weak(all(t.out_types[k].weak for t in traced))
    inputs = [context.current().resolve(selector)] + [context.current().resolve(x) for x in leaves] + captured
    outputs = _emit(op, inputs, {}, regions, out_types)
    return unflatten(traced[0].out_tree, outputs)


def _join_branch_types(traced: list[_Traced], names: list[str], paths: list[str]):
    """Per branch, the dtype each output must be cast to (weak values adopt the
    others' dtype); None when the branches already agree."""
    casts = [[None] * len(paths) for _ in traced]
    for k, path in enumerate(paths):
        types = [t.out_types[k] for t in traced]
        if any(t.shape != types[0].shape for t in types):
            shown = ", ".join(f"{n}: {_describe(t)}" for n, t in zip(names, types))
            raise BranchMismatchError(message(f"branches return different shapes for {path} ({shown})",
                                              where=user_location().long(),
                                              instead="make every branch return arrays of the same shape"))
        joined, _ = result_dtype(*(_dtype_token(t) for t in types))
        for b, t in enumerate(types):
            if t.dtype == joined:
                continue
            if not t.weak:
                shown = ", ".join(f"{n}: {_describe(u)}" for n, u in zip(names, types))
                raise BranchMismatchError(message(f"branches return different dtypes for {path} ({shown})",
                                                  where=user_location().long(),
                                                  instead=f"convert with .astype('{joined}') in the branches"))
            casts[b][k] = joined
    return casts if any(any(c) for c in casts) else None


# --- loops ---------------------------------------------------------------------------

def _int_bound(x, what: str):
    dtype, _ = dtype_of(x)
    if not is_int(dtype) or (np.ndim(x) if not is_tracer(x) else x.ndim) != 0:
        shown = x.type if is_tracer(x) else repr(x)
        raise ShapeError(message(f"{what} must be an int scalar, got {shown}", where=user_location().long(),
                                 instead="convert with .astype('int64')"))
    return cast_to(x, "int64", weak=True)


def fori_loop(lower, upper, body_fun, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`; bounds may be traced
    ints, and the loop is never unrolled.

    Example: `egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0)`"""
    if not _tracing():
        lo, hi = _int_bound(lower, "fori_loop's lower bound"), _int_bound(upper, "fori_loop's upper bound")
        value = init_val
        for i in range(int(lo), int(hi)):
            value = body_fun(i, value)  # a Python int: weakly typed, like the traced counter
        return value
    trip_dim = _static_trip_count(lower, upper)
    lo, hi = _int_bound(lower, "fori_loop's lower bound"), _int_bound(upper, "fori_loop's upper bound")
    state, state_tree, state_types = _state_leaves(init_val, "init_val")
    hints = [path_hint(p) for p in leaf_paths(state_tree, "state")]
    counter = TensorType((), "int64", weak=True)

    def run(promoted_types, casts=None):
        call = lambda i, *s: body_fun(i, unflatten(state_tree, s))  # noqa: E731
        return _trace_region("body", [counter] + promoted_types, call, casts, ["i"] + hints)

    traced = run(state_types)
    _check_tree(traced.out_tree, state_tree, "fori_loop's body returns state whose structure differs from init_val",
                "return the same pytree structure as init_val")
    state, state_types, traced = _settle_state(state, state_types, traced, run, leaf_paths(state_tree, "state"),
                                               "fori_loop's body")
    (body,), captured = _finish(traced)
    builder = context.current()
    inputs = [builder.resolve(to_tracer(lo)), builder.resolve(to_tracer(hi))] + [builder.resolve(x) for x in state]
    outputs = _emit("for", inputs + captured, {"n_state": len(state), "reverse": False, "trip_dim": trip_dim},
                    (body,), state_types)
    return unflatten(state_tree, outputs)


def _settle_state(state, state_types, traced, retrace, paths, body_name, n_state=None):
    """Promote weak initial state / cast weak body outputs until the body's state
    types equal its input types (at most one re-trace each)."""
    n_state = len(state_types) if n_state is None else n_state
    for _ in range(3):
        promote, casts = _reconcile_loop_state(traced.out_types[:n_state], state_types, paths, body_name)
        if promote is None and casts is None:
            return state, state_types, traced
        if promote is not None:
            state = [cast_to(x, d, weak=False) if d else x for x, d in zip(state, promote)]
            state_types = [x.type for x in state]
            traced = retrace(state_types)
        else:
            traced = retrace(state_types, casts + [None] * (len(traced.results) - n_state))
    raise LoopStateError(message(f"{body_name}: could not settle the loop state's dtypes",
                                 where=user_location().long()))


def _static_trip_count(lo, hi):
    if not is_tracer(lo) and not is_tracer(hi):
        return max(int(hi) - int(lo), 0)
    return None


def while_loop(cond_fun, body_fun, init_val):
    """`while cond_fun(val): val = body_fun(val)` with traced, data-dependent trip counts.

    Example: `egad.while_loop(lambda s: s[1] > tol, newton_step, (x0, err0))`"""
    if not _tracing():
        value = init_val
        while bool(np.asarray(cond_fun(value))):
            value = body_fun(value)
        return value
    state, state_tree, state_types = _state_leaves(init_val, "init_val")
    paths = leaf_paths(state_tree, "state")
    hints = [path_hint(p) for p in paths]

    def run_body(types, casts=None):
        return _trace_region("body", types, lambda *s: body_fun(unflatten(state_tree, s)), casts, hints)

    traced_body = run_body(state_types)
    _check_tree(traced_body.out_tree, state_tree, "while_loop's body returns state whose structure differs from "
                "init_val", "return the same pytree structure as init_val")
    state, state_types, traced_body = _settle_state(state, state_types, traced_body, run_body, paths,
                                                    "while_loop's body")
    traced_cond = _trace_region("cond", state_types,
                                lambda *s: _as_predicate(cond_fun(unflatten(state_tree, s)), "while_loop's cond_fun result"),
                                hints=hints)
    if traced_cond.out_tree.num_leaves != 1:
        raise ShapeError(message("while_loop's cond_fun must return one scalar bool", where=user_location().long()))
    (cond_region, body_region), captured = _finish(traced_cond, traced_body)
    builder = context.current()
    inputs = [builder.resolve(x) for x in state] + captured
    outputs = _emit("while", inputs, {"n_state": len(state)}, (cond_region, body_region), state_types)
    return unflatten(state_tree, outputs)


def scan(f, init, xs=None, length=None, reverse=False):
    """JAX's scan: `carry, y = f(carry, x)` over the leading axis of `xs`; returns
    `(carry, ys)` with the ys stacked. `reverse=True` runs from the last step to the
    first (ys stay in the order of xs).

    Example: `h, hs = egad.scan(lambda h, x: (cell(h, x),) * 2, h0, xs)`"""
    x_leaves, x_tree = flatten(xs)
    if not _tracing():
        return _scan_eagerly(f, init, x_leaves, x_tree, length, reverse)
    x_tracers = [to_tracer(x) for x in x_leaves]
    length, trip_dim = _scan_length(x_tracers, length)
    carry, carry_tree, carry_types = _state_leaves(init, "init")
    n_carry = len(carry)
    carry_hints = [path_hint(p) for p in leaf_paths(carry_tree, "carry")]
    counter = TensorType((), "int64", weak=True)
    y_tree_box: list[TreeDef] = []

    def body(i, *carry_params):
        x = unflatten(x_tree, [getitem_row(x, i) for x in x_tracers])
        out = f(unflatten(carry_tree, carry_params), x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise EgadError(message("scan's f must return a pair (carry, y)", where=user_location().long(),
                                    instead="return (new_carry, y); use None for y when there is no per-step output"))
        new_carry, y = out
        new_leaves, new_tree = flatten(new_carry)
        y_leaves, y_tree = flatten(y)
        y_tree_box[:] = [new_tree, y_tree]
        return [*new_leaves, *y_leaves]

    def run(types, casts=None):
        return _trace_region("body", [counter] + types, body, casts, ["i"] + carry_hints)

    traced = run(carry_types)
    _check_tree(y_tree_box[0], carry_tree, "scan's f returns a carry whose structure differs from init",
                "return the same pytree structure as init")
    carry, carry_types, traced = _settle_state(carry, carry_types, traced, run, leaf_paths(carry_tree, "carry"),
                                               "scan's f", n_state=n_carry)
    _, y_tree = y_tree_box
    (body_region,), captured = _finish(traced)
    builder = context.current()
    lo = builder.resolve(to_tracer(np.int64(0)))
    hi = builder.resolve(cast_to(length, "int64", weak=True) if is_tracer(length) else to_tracer(np.int64(length)))
    y_types = [TensorType((trip_dim,) + t.shape, t.dtype) for t in traced.out_types[n_carry:]]
    outputs = _emit("for", [lo, hi] + [builder.resolve(x) for x in carry] + captured,
                    {"n_state": n_carry, "reverse": bool(reverse), "trip_dim": trip_dim}, (body_region,),
                    carry_types + y_types)
    return unflatten(carry_tree, outputs[:n_carry]), unflatten(y_tree, outputs[n_carry:])


def getitem_row(x, i):
    from .numpy_api import getitem

    return getitem(x, i)


def _scan_length(x_tracers, length):
    """(trip count, leading dim of the stacked ys) from xs and/or `length`."""
    dims = {x.type.shape[0] for x in x_tracers if x.ndim > 0}
    if any(x.ndim == 0 for x in x_tracers):
        raise ShapeError(message("scan's xs leaves need a leading axis to scan over", where=user_location().long()))
    if len(dims) > 1:
        raise ShapeError(message(f"scan's xs leaves disagree on their leading dim: {sorted(map(str, dims))}",
                                 where=user_location().long()))
    if dims:
        dim = dims.pop()
        if length is not None and not is_tracer(length) and isinstance(dim, int) and int(length) != dim:
            raise ShapeError(message(f"scan's length={length} differs from xs's leading dim {dim}",
                                     where=user_location().long()))
        if isinstance(dim, int):
            return dim, dim
        return x_tracers[0].shape[0], dim
    if length is None:
        raise EgadError(message("scan needs xs or length", where=user_location().long(),
                                instead="pass length=n when xs is None"))
    if is_tracer(length):
        _int_bound(length, "scan's length")
        return length, length._symbol or fresh_symbol("n")
    return int(length), int(length)


def _scan_eagerly(f, init, x_leaves, x_tree, length, reverse):
    n = length if length is not None else (np.shape(x_leaves[0])[0] if x_leaves else None)
    if n is None:
        raise EgadError(message("scan needs xs or length", where=user_location().long()))
    steps = range(int(n) - 1, -1, -1) if reverse else range(int(n))
    carry, ys = init, [None] * int(n)
    for i in steps:
        carry, ys[i] = f(carry, unflatten(x_tree, [np.asarray(x)[i] for x in x_leaves]))
    if int(n) == 0:
        raise EgadError(message("an eager scan of length 0 cannot know the shape of its ys",
                                where=user_location().long(), instead="trace the function with egad.trace"))
    y_leaves = [flatten(y)[0] for y in ys]
    _, y_tree = flatten(ys[0])
    stacked = [np.stack([leaves[k] for leaves in y_leaves]) for k in range(len(y_leaves[0]))]
    return carry, unflatten(y_tree, stacked)

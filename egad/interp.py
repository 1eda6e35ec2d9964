"""The numpy reference interpreter: the semantic oracle for every transformation.

`interpret(program, *args)` runs a Program binding by binding with each op's numpy
implementation and runs control ops' regions in plain Python loops, so it has
exactly the semantics of the same math written in Python/numpy — zero-iteration
loops and data-dependent trip counts included.
"""
from __future__ import annotations

import numpy as np

from .errors import INDEX_OUT_OF_RANGE_HINT, ArgumentError, EgadError, IndexOutOfRangeError, ShapeError, message
from .ir import ops
from .ir.program import Binding, Program, Region
from .ir.types import DTYPES, TensorType, bind_dims, canonical_dtype
from .pytree import flatten, leaf_paths, unflatten


_NUMPY_DTYPES = {name: np.dtype(name) for name in DTYPES}  # dtype.name is slow on a hot path


def interpret(program: Program, *args, stats: RunStats | None = None):
    """Run `program` on numpy values; returns numpy values in the traced function's
    output structure. Takes the same positional arguments as the traced function;
    a `RunStats` passed as `stats` receives the run's measurements (peak tape bytes).

    Example: `egad.interpret(egad.trace(loss, W, xs), W, xs)`"""
    if not isinstance(program, Program):
        raise ArgumentError(message(f"egad.interpret needs an egad.Program, got {type(program).__name__}",
                                    instead="trace the function first: egad.interpret(egad.trace(fn, *args), *args)"))
    symbols: dict[str, int] = {}
    flat = _flatten_arguments(program, args, symbols)
    with np.errstate(all="ignore"):
        results = run_region(program.region, flat, _Run(symbols, stats if stats is not None else RunStats()))
    return unflatten(program.out_tree, [r[()] if r.ndim == 0 else r for r in results])


class RunStats:
    """What a run of the interpreter measured; pass one as `interpret(..., stats=)`.

    `tape_bytes` is the bytes held by all tapes now, `peak_tape_bytes` its maximum
    over the run: exactly the residuals reverse-mode AD stored, counted per value
    pushed (no padding, no spare capacity). `while_trips[id(binding)]` lists the trip
    counts of each run of a `while` binding, `for_trips[id(binding)]` those of a `for`."""

    def __init__(self):
        self.tape_bytes = 0
        self.peak_tape_bytes = 0
        self.tape_pushes = 0
        self.while_trips: dict[int, list[int]] = {}  # id(while binding) -> its trip count, per run of it
        self.for_trips: dict[int, list[int]] = {}  # id(for binding) -> its trip count, per run of it

    def __repr__(self) -> str:
        return f"RunStats(peak_tape_bytes={self.peak_tape_bytes}, tape_pushes={self.tape_pushes})"


class Tape:
    """The interpreter's tape: a Python list used as a stack. It is mutated in place
    and returned, which is sound because AD threads every tape linearly (each tape
    value is consumed exactly once)."""

    __slots__ = ("values", "stats")

    def __init__(self, stats: RunStats):
        self.values: list[np.ndarray] = []
        self.stats = stats

    def push(self, value: np.ndarray) -> "Tape":
        self.values.append(value)
        self.stats.tape_bytes += value.nbytes
        self.stats.tape_pushes += 1
        self.stats.peak_tape_bytes = max(self.stats.peak_tape_bytes, self.stats.tape_bytes)
        return self

    def pop(self) -> np.ndarray:
        value = self.values.pop()
        self.stats.tape_bytes -= value.nbytes
        return value


class _Run:
    """Per-run state: symbolic dims bound from the arguments, and the stats."""

    def __init__(self, symbols: dict[str, int], stats: RunStats):
        self.symbols = symbols
        self.stats = stats


def _flatten_arguments(program: Program, args: tuple, symbols: dict[str, int]) -> list[np.ndarray]:
    return [_check_leaf(leaf, expected, path, symbols) for path, leaf, expected in argument_leaves(program, args)]


def check_arguments(program: Program, args: tuple) -> None:
    """The ArgumentError `interpret(program, *args)` would raise on `args`, without running it."""
    _flatten_arguments(program, args, {})


def argument_leaves(program: Program, args: tuple):
    """(path, leaf, the param type it binds) of every array leaf of `args`, in the
    program's param order, static arguments checked against their traced values;
    an ArgumentError where `args` do not fit the program's structure."""
    signature = program.signature
    if len(args) != signature.num_args:
        raise ArgumentError(message(
            f"program {program.name} takes {signature.num_args} positional arguments, got {len(args)}",
            where=str(program.loc.long()), instead="pass the same positional arguments as to egad.trace"))
    param_types = iter(program.param_types)
    for k, (arg, tree, baked) in enumerate(zip(args, signature.trees, signature.static_values)):
        if tree is None:
            if not _same_static(arg, baked):
                raise ArgumentError(message(
                    f"argument {k} is static and was {baked!r} when traced, got {arg!r}",
                    instead="re-trace with egad.trace for the new static value"))
            continue
        leaves, got_tree = flatten(arg)
        if got_tree != tree:
            raise ArgumentError(message(f"argument {k} has structure {got_tree}, the program was traced with {tree}",
                                        instead="pass arguments with the structure used at trace time"))
        for path, leaf in zip(leaf_paths(tree, f"argument {k}"), leaves):
            yield path, leaf, next(param_types)


def _same_static(a, b) -> bool:
    """Whether static argument `a` is the value `b` it was traced with: floats by their
    bits (-0.0 is not 0.0, and NaN is NaN), containers item by item, others by ==."""
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return float(a).hex() == float(b).hex()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_static, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_static(a[k], b[k]) for k in a)
    try:
        same = a == b
        return bool(np.all(same)) if not isinstance(same, bool) else same
    except Exception:  # noqa: BLE001 - incomparable values are simply different
        return a is b


def _host_array(leaf) -> np.ndarray:
    """`leaf` as a numpy array: anything np.asarray takes, or an array offered only
    through DLPack (a torch or TVM tensor, as compiled programs take them), copied to
    the host where it lives on a device."""
    if not isinstance(leaf, np.ndarray) and hasattr(leaf, "__dlpack__"):
        try:
            return np.from_dlpack(leaf)
        except (BufferError, RuntimeError, TypeError, ValueError):  # a device array: through its own copy
            if hasattr(leaf, "numpy"):
                return np.asarray(leaf.numpy())
            if hasattr(leaf, "cpu"):
                return np.asarray(leaf.cpu())
    return np.asarray(leaf)


def _check_leaf(leaf, expected: TensorType, path: str, symbols: dict[str, int]) -> np.ndarray:
    is_python_scalar = type(leaf) in (bool, int, float)
    try:
        value = _host_array(leaf)
        dtype = canonical_dtype(value.dtype)
    except (TypeError, ValueError) as error:
        raise ArgumentError(message(f"{path}: {type(leaf).__name__} is not an array ({error})",
                                    instead=f"pass a {expected.dtype} array of shape {expected.shape}")) from None
    if dtype != expected.dtype:
        convertible = np.can_cast(value.dtype, expected.dtype, "same_kind") and (is_python_scalar or expected.weak)
        if not convertible:
            raise ArgumentError(message(
                f"{path} is {dtype}, the program was traced with {expected.dtype}",
                instead=f"convert it with .astype(np.{expected.dtype}), or re-trace with "
                        f"{'an' if dtype[0] in 'aeiou' else 'a'} {dtype} argument"))
        value = value.astype(expected.dtype)
    mismatch = bind_dims(expected.shape, value.shape, symbols)
    if mismatch:
        raise ArgumentError(message(f"{path} has shape {value.shape}: {mismatch} (traced as {expected})",
                                    instead="pass an array of the traced shape, or trace with egad.Spec and a "
                                            "symbolic dim (e.g. egad.Spec(('T', 32), 'float32'))"))
    return value


def run_region(region: Region, values: list[np.ndarray], run: _Run) -> list[np.ndarray]:
    env: dict[int, np.ndarray] = {param.uid: value for param, value in zip(region.params, values)}
    for binding in region.bindings:
        inputs = [env[v.uid] for v in binding.inputs]
        if binding.op in ops.CONTROL_OPS:
            outputs = _CONTROL[binding.op](binding, inputs, run)
        elif binding.op in ops.TAPE_OPS:
            for var, value in zip(binding.outputs, _TAPES[binding.op](inputs, run)):
                env[var.uid] = value
            continue
        else:
            outputs = _run_op(binding, inputs)
        for var, value in zip(binding.outputs, outputs):
            if value.__class__ is np.ndarray:  # not a tape
                expected = _NUMPY_DTYPES[var.type.dtype]
                if value.dtype != expected:  # numpy may widen (e.g. int32 sums); the IR's type wins
                    value = value.astype(expected)
            env[var.uid] = value
    return [env[v.uid] for v in region.results]


def _run_op(binding: Binding, inputs: list[np.ndarray]) -> list[np.ndarray]:
    op = ops.OPS[binding.op]
    try:
        return [np.asarray(out) for out in op.impl(inputs, binding.attrs)]
    except IndexError as error:
        raise IndexOutOfRangeError(message(
            f"{binding.op}: {error}", where=f"op {binding.op!r} at {binding.loc.long()}",
            instead=INDEX_OUT_OF_RANGE_HINT)) from None
    except (ValueError, ShapeError) as error:
        raise ShapeError(message(f"{binding.op}: {error}", where=f"op {binding.op!r} at {binding.loc.long()}")) from None


def _run_if(binding, inputs, run):
    branch = binding.regions[0] if bool(inputs[0]) else binding.regions[1]
    return run_region(branch, inputs[1:], run)


def _run_switch(binding, inputs, run):
    # The index is clamped into range, as in JAX.
    index = min(max(int(inputs[0]), 0), len(binding.regions) - 1)
    return run_region(binding.regions[index], inputs[1:], run)


def _run_for(binding, inputs, run):
    n_state = binding.attrs["n_state"]
    lo, hi = int(inputs[0]), int(inputs[1])
    state, invariants = inputs[2:2 + n_state], inputs[2 + n_state:]
    (body,) = binding.regions
    trips = max(hi - lo, 0)
    if run.stats is not None:
        run.stats.for_trips.setdefault(id(binding), []).append(trips)
    y_types = body.result_types[n_state:]
    ys: list[list] = [[None] * trips for _ in y_types]
    steps = range(hi - 1, lo - 1, -1) if binding.attrs.get("reverse") else range(lo, hi)
    for i in steps:
        out = run_region(body, [np.asarray(i, "int64"), *state, *invariants], run)
        state = out[:n_state]
        for k, y in enumerate(out[n_state:]):
            ys[k][i - lo] = y
    stacked = [np.stack(column) if trips else _empty_stack(t, run, binding) for column, t in zip(ys, y_types)]
    return [*state, *stacked]


def _empty_stack(t: TensorType, run: _Run, binding: Binding) -> np.ndarray:
    """The stacked per-step outputs of a loop that ran zero times: shape (0, ...)."""
    try:
        shape = tuple(d if isinstance(d, int) else run.symbols[d] for d in t.shape)
    except KeyError as missing:
        raise EgadError(message(
            f"a loop ran zero times and the shape of its per-step output {t} depends on {missing}, "
            "which is only known inside the loop", where=f"op {binding.op!r} at {binding.loc.long()}",
            instead="give the per-step output a shape known outside the loop")) from None
    return np.zeros((0,) + shape, t.dtype)


def _run_while(binding, inputs, run):
    n_state = binding.attrs["n_state"]
    state, invariants = inputs[:n_state], inputs[n_state:]
    cond, body = binding.regions
    max_iters = binding.attrs.get("max_iters")
    trips = 0
    while bool(run_region(cond, [*state, *invariants], run)[0]):
        if max_iters is not None and trips >= max_iters:
            break
        state = run_region(body, [*state, *invariants], run)
        trips += 1
    run.stats.while_trips.setdefault(id(binding), []).append(trips)
    return state


_CONTROL = {"if": _run_if, "switch": _run_switch, "for": _run_for, "while": _run_while}

_TAPES = {
    "tape_alloc": lambda inputs, run: [Tape(run.stats)],
    "tape_push": lambda inputs, run: [inputs[0].push(inputs[1])],
    "tape_pop": lambda inputs, run: [inputs[0].pop(), inputs[0]],
}

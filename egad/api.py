"""`egad.optimize`: a program (and its gradient) compiled into a callable.

This is the unoptimized path of DESIGN §1: differentiate, lower to TVM Relax, build.
The e-graph optimizer (rule families, critical-path extraction) is not part of
egad yet, so `rules` must be empty or None, and the report says that no rewrite
ran. TVM is imported only when a program is built (egad.tvm_bridge).

Specialization: a program traced with symbolic dims (egad.Spec) runs for any size
of them from one build. A call whose static dims (or static arguments) differ from
the traced ones traces the function again for them and builds once per such shape
signature. Builds are cached by program fingerprint and target in memory and on
disk (tvm_bridge/cache.py), so a program built before is loaded, not compiled.
"""
from __future__ import annotations

import time

import numpy as np

from .errors import ArgumentError, UnsupportedError, message
from .ir.program import Program
from .ir.types import TensorType
from .pytree import flatten, unflatten


class Optimized:
    """A compiled program: call it with the program's positional arguments (numpy
    arrays, anything `np.asarray` takes, or DLPack arrays); it returns numpy values —
    `(value, grads)` when built with `wrt`, the value alone with `wrt=None`."""

    def __init__(self, program: Program, wrt, target, has_aux: bool):
        self.program = program
        self.target = target
        self.wrt = wrt
        self.has_aux = has_aux
        self.timings: dict[str, float] = {"differentiate": 0.0, "lower and build": 0.0}
        self.builds = 0  # specializations made ready: compiled, or loaded from a cache
        self.origins = {"built": 0, "memory": 0, "disk": 0}
        self._specializations: dict[tuple, object] = {}
        signature = program.signature
        baked = [value for value, tree in zip(signature.static_values, signature.trees) if tree is None]
        self._base_key = _signature_key(program, [_traced_shapes(program)], baked)

    def __call__(self, *args):
        return self._compiled_for(args)(*args)

    def _compiled_for(self, args):
        key = self._call_key(args)
        compiled = self._specializations.get(key)
        if compiled is None:
            compiled = self._specialize(args, key)
        return compiled

    def _call_key(self, args) -> tuple | None:
        """The shape signature of a call (static dims and static argument values), or
        None when the arguments do not even fit the program's structure (the build
        then reports exactly what is wrong)."""
        signature = self.program.signature
        if len(args) != signature.num_args:
            return None
        shapes, statics = [], []
        for arg, tree, baked in zip(args, signature.trees, signature.static_values):
            if tree is None:
                statics.append(arg)
                continue
            leaves, got_tree = flatten(arg)
            if got_tree != tree:
                return None
            shapes.append([_shape_of(leaf) for leaf in leaves])
        return _signature_key(self.program, shapes, statics)

    def _specialize(self, args, key):
        if key is None or key == self._base_key:
            program = self.program
        elif self.program.retrace is None:
            program = self.program  # not retraceable: the call reports the mismatch
            key = None
        else:
            program = self.program.retrace(*_retrace_args(self.program, args))
        compiled = self._build(program)
        if key is not None:
            self._specializations[key] = compiled
        return compiled

    def _build(self, program: Program):
        from . import ad
        from .tvm_bridge import build

        started = time.perf_counter()
        if self.wrt is not None:
            program = ad.value_and_grad(program, wrt=self.wrt, has_aux=self.has_aux)
        self.timings["differentiate"] += time.perf_counter() - started
        compiled = build(program, target=self.target)
        self.timings["lower and build"] += compiled.build_seconds
        self.builds += 1
        self.origins[compiled.origin] += 1
        return compiled

    def _base(self):
        compiled = self._specializations.get(self._base_key)
        if compiled is None:
            compiled = self._specializations[self._base_key] = self._build(self.program)
        return compiled

    @property
    def relax_text(self) -> str:
        """TVMScript of the module built for the traced shapes."""
        return self._base().relax_text

    @property
    def source(self) -> dict[str, str]:
        """Generated device source by kind (e.g. {"cuda": ...}) for the traced shapes;
        empty for CPU targets."""
        return self._base().source

    def report(self) -> str:
        from .tvm_bridge.cache import shared_cache

        cache = shared_cache()
        disk = str(cache.directory) if cache.directory else "off (EGAD_DISK_CACHE=0)"
        lines = [f"egad.optimize report for {self.program.name} (target {self.target})",
                 "  e-graph: not run (the optimizer is not part of egad yet; rules=() is the only option)",
                 f"  builds: {self.builds} ({self.origins['built']} compiled, {self.origins['memory']} from the "
                 f"memory cache, {self.origins['disk']} from the disk cache)",
                 f"  disk cache: {disk}" + (f"; {cache.disk_problem}" if cache.disk_problem else "")]
        lines += [f"  {phase}: {seconds * 1e3:.1f} ms" for phase, seconds in self.timings.items()]
        return "\n".join(lines)


def _traced_shapes(program: Program) -> list[tuple]:
    return [t.shape for t in program.param_types]


def _signature_key(program: Program, shapes_per_arg: list[list[tuple]], statics) -> tuple:
    """Shapes with the traced symbolic dims masked out, plus the static values."""
    flat_shapes = [shape for shapes in shapes_per_arg for shape in shapes]
    masked = []
    for shape, traced in zip(flat_shapes, program.param_types):
        if len(shape) == traced.ndim:
            shape = tuple(None if isinstance(d, str) else s for d, s in zip(traced.shape, shape))
        masked.append(tuple(shape))
    return tuple(masked), tuple(_static_key(value) for value in statics)


def _static_key(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *map(_static_key, value))
    if isinstance(value, dict):
        return ("dict", *sorted((repr(k), _static_key(v)) for k, v in value.items()))
    try:
        hash(value)
        return ("value", type(value).__name__, value)
    except TypeError:
        raise ArgumentError(message(
            f"a static argument of type {type(value).__name__} is not hashable, so egad.optimize cannot tell "
            "whether it changed between calls",
            instead="pass static arguments as hashable values (tuples, numbers, strings)")) from None


def _retrace_args(program: Program, args) -> list:
    """The call's arguments as param types for tracing again: each array leaf becomes
    its new shape, keeping the traced dtype, weakness and symbolic dims."""
    types = iter(program.param_types)
    traced_args = []
    for arg, tree in zip(args, program.signature.trees):
        if tree is None:
            traced_args.append(arg)
            continue
        new_types = []
        for leaf in flatten(arg)[0]:
            traced = next(types)
            shape = _shape_of(leaf)
            if len(shape) == traced.ndim:
                shape = tuple(d if isinstance(d, str) else s for d, s in zip(traced.shape, shape))
            new_types.append(TensorType(shape, traced.dtype, traced.weak))
        traced_args.append(unflatten(tree, new_types))
    return traced_args


def _shape_of(leaf) -> tuple:
    """A leaf's shape without converting it (DLPack arrays, numpy, Python scalars)."""
    return tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)


def optimize(program: Program, wrt=(0,), target="llvm", rules=None, has_aux: bool = False) -> Optimized:
    """Compile `program` and, unless `wrt=None`, its gradient into one callable
    returning `(value, grads)`. `target` is "llvm" (or "cpu"), "cuda", "metal",
    "opencl", "webgpu", "vulkan" or a TVM target dict.

    Example: `f = egad.optimize(egad.trace(loss, W, xs), wrt=(0,)); value, (dW,) = f(W, xs)`"""
    if not isinstance(program, Program):
        raise ArgumentError(message(f"egad.optimize needs an egad.Program, got {type(program).__name__}",
                                    instead="trace the function first: egad.optimize(egad.trace(fn, *args))"))
    if rules:
        raise UnsupportedError(message("the e-graph optimizer (rules=...) is not part of egad yet",
                                       instead="call egad.optimize(program, rules=()) for the unoptimized build"))
    from .tvm_bridge.targets import resolve

    resolve(target)  # unknown targets and missing codegens fail here, not at the first call
    return Optimized(program, wrt, target, has_aux)

"""Build a lowered program for a target (through the build cache) and run it on
numpy or DLPack arguments."""
from __future__ import annotations

import time

import numpy as np
import tvm
from tvm import relax

from egad.errors import UnsupportedError, message
from egad.interp import _flatten_arguments
from egad.ir.program import Program
from egad.pytree import flatten, unflatten

from . import runtime
from .cache import BuildCache, Entry, cache_key, shared_cache
from .lower import lower
from .targets import ResolvedTarget, device_source, resolve


class Compiled:
    """A program built with TVM: call it like `egad.interpret(program, *args)`; it
    returns numpy values. `origin` says whether this build compiled ("built") or came
    from the cache ("memory", "disk")."""

    def __init__(self, program: Program, entry: Entry, target: ResolvedTarget, seconds: float):
        self.program = program
        self.executable = entry.executable
        self.relax_text = entry.relax_text
        self.origin = entry.origin
        self.target = target
        self.build_seconds = seconds
        self._vm = None

    @property
    def source(self) -> dict[str, str]:
        """Generated device code by kind (e.g. {"cuda": "..."}); empty for CPU builds."""
        return device_source(self.executable)

    def export_library(self, path: str) -> None:
        """Write the built library (host code plus device code) to `path`."""
        self.executable.export_library(path)

    def _machine(self):
        if self._vm is None:
            device = self.target.device()
            vm = relax.VirtualMachine(self.executable, device)
            self._vm = (vm, vm.module["invoke_closure"], device)
        return self._vm

    def __call__(self, *args):
        vm, invoke, device = self._machine()
        flat = _flatten_arguments(self.program, _from_dlpack(args), {})
        tensors = [tvm.runtime.tensor(np.asarray(a, order="C"), device) for a in flat]
        first_tape = max(runtime._TAPES, default=0) + 1
        try:
            results = vm["main"](invoke, *tensors)
        finally:
            runtime.release_tapes(first_tape)
        values = [np.asarray(r.numpy()) for r in results]
        return unflatten(self.program.out_tree, [v[()] if v.ndim == 0 else v for v in values])


def _from_dlpack(args: tuple) -> tuple:
    """Arguments with DLPack leaves (torch, cupy, jax arrays...) as numpy arrays:
    zero-copy for CPU memory, a copy from device memory."""
    def convert(leaf):
        if isinstance(leaf, (np.ndarray, np.generic)) or not hasattr(leaf, "__dlpack__"):
            return leaf
        try:
            return np.from_dlpack(leaf)
        except (RuntimeError, BufferError, TypeError):  # device memory: through TVM
            return tvm.runtime.from_dlpack(leaf).numpy()

    converted = []
    for arg in args:
        leaves, tree = flatten(arg)
        converted.append(unflatten(tree, [convert(leaf) for leaf in leaves]))
    return tuple(converted)


def _compile(module, target: ResolvedTarget):
    try:
        return tvm.compile(module, target=target.tvm_target)
    except tvm.error.InternalError as error:
        if target.kind == "webgpu" and "i64" in str(error):
            raise UnsupportedError(message(
                "WebGPU has no 64-bit integers, and this program computes with int64 on the device (egad's loop "
                "counters and indices are int64)",
                instead="build loop-free float programs for webgpu, or use target='metal', 'cuda' or 'opencl'")) from None
        raise


def build(program: Program, target="llvm", cache: BuildCache | None = None) -> Compiled:
    """`program` built for `target` (a name or TVM target dict, see tvm_bridge/targets.py),
    from `cache` (default: the shared memory + disk cache) when it holds it."""
    resolved = resolve(target)
    cache = shared_cache() if cache is None else cache
    started = time.perf_counter()
    key = cache_key(program, resolved)
    entry = cache.get(key)
    if entry is None:
        module = lower(program)
        entry = Entry(_compile(module, resolved), module.script(), "built")
        cache.put(key, entry)
    return Compiled(program, entry, resolved, time.perf_counter() - started)

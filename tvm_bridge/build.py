"""Build a lowered program for a target (through the build cache) and run it on
numpy or DLPack arguments."""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import os
import threading
import time

import numpy as np
import tvm
from tvm import relax

from egad.errors import ArgumentError, BuildError, EgadError, UnsupportedError, message
from egad.interp import _flatten_arguments
from egad.ir.program import Program, walk_bindings
from egad.pytree import flatten, unflatten

from . import host_checks, index_checks, pack_weights, runtime, schedule
from .cache import BuildCache, Entry, cache_key, shared_cache
from .lower import lower
from .profile import Profile, Recorder, measure
from .targets import ResolvedTarget, device_source, resolve


class Compiled:
    """A program built with TVM: call it like `egad.interpret(program, *args)`; it
    returns numpy values. `origin` says whether this build compiled ("built") or came
    from the cache ("memory", "disk")."""

    def __init__(self, program: Program, entry: Entry, target: ResolvedTarget, seconds: float,
                 disk_problem: str | None = None):
        self.program = program
        self.executable = entry.executable
        self.relax_text = entry.relax_text
        self.origin = entry.origin
        self.disk_problem = disk_problem  # why this build's disk cache entry could not be read or written
        self.target = target
        self.build_seconds = seconds
        self._machines = _Machines()
        self._staging = _Staging()

    @property
    def source(self) -> dict[str, str]:
        """Generated device code by kind (e.g. {"cuda": "..."}); empty for CPU builds."""
        return device_source(self.executable)

    def export_library(self, path: str) -> None:
        """Write the built library (host code plus device code) to `path`."""
        self.executable.export_library(path)

    def _machine(self):
        if self._machines.vm is None:
            device = self.target.device()
            vm = relax.VirtualMachine(self.executable, device)
            self._machines.vm = (vm["main"], vm.module["invoke_closure"], device)
        return self._machines.vm

    def __call__(self, *args):
        return self._call(*self._machine(), args)

    def profile(self, *args, calls: int = 5) -> Profile:
        """Where a call on `args` spends its time (tvm_bridge/profile.py): the median of
        `calls` calls timed as they are, then `calls` more on a VM of its own whose every
        call (kernel, loop driver, VM builtin) is timed, after a warm-up call of each
        (`profile.measure`; bad arguments fail in the first, as in any call)."""
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise ArgumentError(message(f"profile: calls must be a positive int, got {calls!r}",
                                        instead="e.g. calls=5 (the medians are over that many calls)"))
        device = self.target.device()
        vm = relax.VirtualMachine(self.executable, device)
        recorder = Recorder(sync=None if _on_cpu(device) else device.sync)
        vm.set_instrument(recorder)
        machine = (vm["main"], vm.module["invoke_closure"], device)
        return measure(lambda: self(*args), lambda: self._call(*machine, args), recorder, calls)

    def _call(self, main, invoke, device, args):
        leaves = _Leaves(args, self.program.signature.trees, self._staging)
        flat = _flatten_arguments(self.program, leaves.for_checking, {})
        tensors = [leaves.tensor(k, value, device) for k, value in enumerate(flat)]
        tapes = runtime.start_call()
        try:
            results = main(invoke, *tensors)
        except IndexError as error:
            found = index_checks.found_out_of_range(error)
            if found is None:
                raise
            raise index_checks.out_of_range_error(self.program, found) from None
        except ValueError as error:
            failed = host_checks.found_failed_check(error)
            if failed is None:
                raise
            raise host_checks.host_check_error(self.program, *failed) from None
        finally:
            runtime.release_tapes(tapes)
        values = _to_numpy(results, tensors)
        return unflatten(self.program.out_tree, [v[()] if v.ndim == 0 else v for v in values])


_ALIGNMENT = 64  # TVM kernels assume 64-byte aligned buffers; others are copied


class _Leaves:
    """A call's argument leaves on their way to the VM without needless copies.

    TVM tensors already on the device pass through (a view re-based at its offset, or
    copied where kernels could not read it: `_as_kernel_argument`); numpy arrays that
    are 64-byte aligned are shared through DLPack (the VM only reads its arguments);
    others are copied into an aligned staging buffer and shared from there. Other DLPack arrays
    (torch, cupy, jax) are read through numpy: zero-copy for CPU memory, a copy from
    device memory. `for_checking` holds what `_flatten_arguments` checks: for a TVM
    tensor, a memory-free numpy stand-in of its shape and dtype."""

    def __init__(self, args: tuple, trees, staging: "_Staging"):
        self.staging = staging
        self.passed: list = []  # per traced leaf, in order: the TVM tensor given, or None
        checked = []
        for k, arg in enumerate(args):
            if k < len(trees) and trees[k] is None:  # a static argument: no leaves in the program
                checked.append(arg)
                continue
            leaves, tree = flatten(arg)
            converted = []
            for leaf in leaves:
                is_tensor = isinstance(leaf, tvm.runtime.Tensor)
                self.passed.append(leaf if is_tensor else None)
                converted.append(_stand_in(leaf) if is_tensor else _numpy_of(leaf))
            checked.append(unflatten(tree, converted))
        self.for_checking = tuple(checked)

    def tensor(self, k: int, value: np.ndarray, device):
        passed = self.passed[k] if k < len(self.passed) else None
        if passed is not None:
            ready = _as_kernel_argument(passed, device) if str(passed.dtype) == str(value.dtype) \
                and passed.device == device else None
            if ready is not None:
                return ready
            value = np.asarray(passed.numpy(), dtype=value.dtype)
        value = np.asarray(value, order="C")
        if not (_on_cpu(device) and value.size):  # device memory, or an empty array (unaligned pointer)
            return tvm.runtime.tensor(value, device)
        if value.ctypes.data % _ALIGNMENT:
            value = self.staging.aligned_copy(k, value)
        return tvm.runtime.from_dlpack(value)


class _Machines(threading.local):
    """A VM per thread: a Relax VM keeps its registers, frames and memory pool in the
    object, so calls in several threads at once each run on their own."""

    def __init__(self):
        self.vm = None


class _Staging(threading.local):
    """Per thread, one 64-byte aligned buffer per argument position, shape and dtype,
    reused across calls: copying an unaligned argument into it costs a memcpy, not an
    allocation (measured: 85 µs against 215 µs for a fresh 2 MB TVM tensor)."""

    def __init__(self):
        self.buffers: dict[tuple, np.ndarray] = {}

    def aligned_copy(self, k: int, value: np.ndarray) -> np.ndarray:
        key = (k, value.shape, value.dtype.str)
        buffer = self.buffers.get(key)
        if buffer is None:
            raw = np.empty(value.nbytes + _ALIGNMENT, np.uint8)
            start = -raw.ctypes.data % _ALIGNMENT
            buffer = self.buffers[key] = raw[start:start + value.nbytes].view(value.dtype).reshape(value.shape)
        np.copyto(buffer, value)
        return buffer


_ENSURE_ZERO_OFFSET = tvm.get_global_func("vm.builtin.ensure_zero_offset")


def _as_kernel_argument(tensor, device):
    """A TVM tensor as kernels can read it without a copy, or None. Kernels read from the
    data pointer alone (their argument checks are off: KERNEL_ARGUMENT_CHECKS), so a
    view with a byte offset (`Tensor._create_view`, Relax's `memory.view`) is re-based
    first, and it must be compact and, on the CPU or once re-based, 64-byte aligned (a
    row of a table need not be): read from its first row, or misaligned for the
    kernels' vector loads, it would be a wrong answer or a crash."""
    ready = _ENSURE_ZERO_OFFSET(tensor)
    if not ready.is_contiguous():
        return None
    if (_on_cpu(device) or not ready.same_as(tensor)) and ready.data_ptr() % _ALIGNMENT:
        return None
    return ready


def _on_cpu(device) -> bool:
    return device.dlpack_device_type() == _CPU


_CPU = tvm.cpu().dlpack_device_type()


def _stand_in(tensor) -> np.ndarray:
    return np.broadcast_to(np.zeros((), np.dtype(str(tensor.dtype))), tuple(tensor.shape))


def _numpy_of(leaf):
    if isinstance(leaf, (np.ndarray, np.generic)) or not hasattr(leaf, "__dlpack__"):
        return leaf
    try:
        return np.from_dlpack(leaf)
    except (RuntimeError, BufferError, TypeError):  # device memory: through TVM
        return tvm.runtime.from_dlpack(leaf).numpy()


def _to_numpy(results, arguments) -> list[np.ndarray]:
    """Results as numpy arrays: shared through DLPack when on the CPU and not also an
    argument or an earlier result (a program returning its input must not alias it),
    copied otherwise."""
    seen = {int(t.data_ptr()) for t in arguments}
    values = []
    for result in results:
        pointer = int(result.data_ptr())
        shared = _on_cpu(result.device) and pointer not in seen
        values.append(np.from_dlpack(result) if shared else np.asarray(result.numpy()))
        seen.add(pointer)
    return values


# TVM's kernels check their arguments (types, shapes, strides, alignment) on entry, with
# an error message per check. Every kernel here is called by the VM of its own build
# with buffers the lowering typed, and egad checks a call's arguments against the
# program before the VM sees them (interp._flatten_arguments), so the checks never
# fire; they are 40% of the LLVM IR, and JIT time follows IR size (measured on the LSTM
# T=64 gradient: 2.4 MB of IR and 1.2-1.5 s of JIT with them, 1.4 MB and 0.7-0.8 s
# without). False drops them.
KERNEL_ARGUMENT_CHECKS = False


# Ops FuseOps may fuse into one kernel (TVM's default: 256). Scheduling a kernel costs
# time in the square of its blocks (TVM's schedule primitives walk the function): a
# 200-way concatenation of products took 14.7 s to build as one kernel, 4.5 s in
# kernels of 32 ops. The elementwise ops of the LSTM's forward and reverse steps (33
# each) fit in one kernel a step: with 32 each ran as two, and the gradient of
# benchmarks/optimizer.py (T=64) took ~3% longer on 2 Zen 3 cores.
MAX_FUSED_OPS = 48


# The Relax pipeline runs Python passes with process-wide state (legalization's TE tag
# scope, egad's schedule rules): builds side by side take turns through it, and run
# the rest (TIR lowering, LLVM code generation, in C++) at once.
_RELAX_PIPELINE_TURN = threading.Lock()


def _compile(module, target: ResolvedTarget, program: Program):
    config = {"relax.FuseOps.max_depth": MAX_FUSED_OPS}
    if not KERNEL_ARGUMENT_CHECKS:
        config["tirx.disable_assert"] = True
    pipeline = schedule.relax_pipeline(target.tvm_target)  # llvm targets name the host CPU (targets.resolve)
    try:
        with tvm.transform.PassContext(opt_level=3, config=config):
            if pipeline is None:  # TVM's default pipeline for the target, all of the build in one turn
                with _RELAX_PIPELINE_TURN:
                    return tvm.compile(module, target=target.tvm_target, relax_pipeline="default")
            with _RELAX_PIPELINE_TURN, target.tvm_target:
                module = pipeline(module)
            return tvm.compile(module, target=target.tvm_target, relax_pipeline=None)
    except EgadError:
        raise
    except Exception as error:  # noqa: BLE001 - TVM's C++ errors arrive as RuntimeError, ValueError, TypeError...
        unsupported = _unsupported_dtype(program, target)
        if unsupported is not None:
            raise unsupported from None
        raise _build_error(error, program.name, target) from error


# The devices without some dtypes, by target kind: (the device's name, what it lacks).
_NO_DTYPES = {"metal": ("Metal", ("float64",)), "webgpu": ("WebGPU", ("float64", "int64"))}


def _unsupported_dtype(program: Program, target: ResolvedTarget) -> UnsupportedError | None:
    """Where a build for a device without some dtypes failed, and the program computes
    with one of them: an UnsupportedError naming the first op that does (TVM's own
    messages vary: "Cannot convert type float64 to Metal type", "only support f16 or
    f32", a line of TIR)."""
    device, missing = _NO_DTYPES.get(target.kind, (None, ()))
    instead = {"float64": "use float32 arrays and constants (x.astype('float32')), or target='cuda' or 'opencl'",
               "int64": "build loop-free programs without integer indices for webgpu, or use target='metal', "
                        "'cuda' or 'opencl'"}
    for param in program.params:
        if getattr(param.type, "dtype", None) in missing:
            return UnsupportedError(message(
                f"{device} has no {param.type.dtype}, and argument {param.hint or '?'} of {program.name} is "
                f"{param.type.dtype}", where=program.loc.long(), instead=instead[param.type.dtype]))
    for binding in walk_bindings(program.region):
        made = [] if binding.op == "const" and binding.outputs[0].type.weak else list(binding.outputs)  # (Python's)
        made += [param for region in binding.regions for param in region.params]  # a loop's counter, say
        dtype = next((v.type.dtype for v in made if getattr(v.type, "dtype", None) in missing), None)
        if dtype is None:
            continue
        why = " (egad's loop counters and indices are int64)" if dtype == "int64" else \
            " (numpy gives float64 for ints divided and for float64 inputs)"
        what = f"its {binding.op} loop counts" if binding.op in ("for", "while") else \
            f"this program computes {binding.op}"
        return UnsupportedError(message(f"{device} has no {dtype}, and {what} in {dtype}{why}",
                                        where=f"op {binding.op!r} at {binding.loc.long()}", instead=instead[dtype]))
    return None


def _lower(program: Program, target: ResolvedTarget):
    try:
        if target.is_cpu:
            program = pack_weights.pack_loop_invariant_operands(
                program, lambda dtype: schedule.matmul_column_tile(target.tvm_target, dtype))
        return lower(program, checks_in_kernels=target.is_cpu)
    except EgadError:
        raise
    except Exception as error:  # noqa: BLE001 - TVM's BlockBuilder checks, or egad's own lowering code
        raise _build_error(error, program.name, target, "lower") from error


def _build_error(error: Exception, name: str, target: ResolvedTarget, step: str = "compile") -> BuildError:
    lines = str(error).strip().splitlines()
    return BuildError(message(
        f"egad could not {step} program {name!r} for {target.kind}: "
        f"{lines[-1] if lines else type(error).__name__}",
        instead="this is a defect in egad, not in your program: please report it with print(program) and the error "
                "printed above this one; meanwhile another target, or egad.optimize with other rules, may build"))


def build(program: Program, target="llvm", cache: BuildCache | None = None) -> Compiled:
    """`program` built for `target` (a name or TVM target dict, see tvm_bridge/targets.py),
    from `cache` (default: the shared memory + disk cache) when it holds it. A CPU
    build comes back loaded (its machine code generated), ready to call."""
    return build_all([program], target, cache)[0]


def build_all(programs: list[Program], target="llvm", cache: BuildCache | None = None) -> list[Compiled]:
    """Each of `programs` built as `build` would, the builds side by side on threads.

    Lowering runs first, one program at a time (Relax's BlockBuilder keeps one current
    builder per process); compiling and generating machine code run in TVM's C++,
    which lets go of the GIL, so two builds on two cores take about the time of one
    (measured on the LSTM T=64 gradient: 6.0 s one after the other, 3.4 s side by
    side). Each Compiled's `build_seconds` is the wall time of the whole call."""
    resolved = resolve(target)
    cache = shared_cache() if cache is None else cache
    if resolved.foreign:  # a library for another machine neither loads nor checks here: kept in memory only
        cache = cache.memory_only()
    started = time.perf_counter()
    keys = [cache_key(program, resolved) for program in programs]
    entries = [cache.get(key) for key in keys]
    first_of = {key: k for k, key in reversed(list(enumerate(keys)))}  # a program given twice is built once
    modules = {k: _lower(programs[k], resolved) for k, entry in enumerate(entries)
               if entry is None and first_of[keys[k]] == k}

    def finish(k: int) -> Entry:
        library = _compile(modules[k], resolved, programs[k])
        entry = cache.put(keys[k], Entry(library, modules[k].script(), "built"))
        if resolved.runs_here:
            relax.VirtualMachine(entry.executable, tvm.cpu())  # generates the machine code now, not at the first call
        return entry

    if len(modules) > 1:
        with _collector_paused(), \
                concurrent.futures.ThreadPoolExecutor(max_workers=min(len(modules), _cpu_count())) as pool:
            for k, entry in zip(modules, pool.map(finish, modules)):
                entries[k] = entry
    else:
        for k in modules:
            entries[k] = finish(k)
    entries = [entry or dataclasses.replace(entries[first_of[key]], origin="memory")
               for entry, key in zip(entries, keys)]
    seconds = time.perf_counter() - started
    return [Compiled(program, entry, resolved, seconds, cache.problems.get(key))
            for program, entry, key in zip(programs, entries, keys)]


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while builds run on threads. It runs in
    whichever thread allocates, and an unreachable egglog EGraph (the optimizer's, in a
    reference cycle) must be dropped on the thread that made it: collected on a build
    thread, egglog raised "EGraph is unsendable, but is being dropped on another thread".
    Reference counting still frees everything else; cycles wait for the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

"""The optimizer benchmark's lstm and gnmt sections (benchmarks/optimizer.py) on a GPU
machine that has TVM's runtime but neither its compiler nor egglog (DESIGN §7: the
lent GPU machines have no TVM, and `libtvm_compiler.so` alone is larger than what may
travel there). Two steps:

    python -m benchmarks.gpu_run export DIR [--target=cuda] [--arch=sm_90]   # where egad is installed
    TVM_USE_RUNTIME_LIB=1 python -m benchmarks.gpu_run run DIR [--json=PATH]  # on the GPU machine
    TVM_USE_RUNTIME_LIB=1 python -m benchmarks.gpu_run profile DIR            # where the time goes

`export` optimizes each workload twice for the target, with the default rule families
and with `rules=()`, and writes to DIR each build's library (`Optimized.export_library`;
a CUDA library holds its kernels' source, compiled at load by NVRTC), the flat
arguments its VM takes, the flat results of the same workload built with `rules=()`
for the CPU (what both GPU builds are checked against) and `manifest.json`.

`run` needs numpy, TVM's runtime (the `tvm` package without `libtvm_compiler.so`;
TVM falls back to the runtime alone) and the two egad modules compiled code calls back
into (tvm_bridge/runtime.py, runtime_checks.py), loaded from their files, so no egad
install. It loads each library into a VM, checks its results, and times each pair as
optimizer.py does: calls as a user makes them (numpy arguments copied to the device,
results copied back), medians of interleaved rounds. It prints a table and writes JSON.
`--runtime=PATH` runs the loops and tapes with another runtime.py (to compare a change
to it side by side with the old one on one machine). `profile` prints where a call's
time goes, per kernel, loop driver and VM builtin (tvm_bridge/profile.py, as
`Optimized.profile` does) and, where PyTorch is installed, the GPU kernels it saw.
`--target=llvm` exports CPU builds, which `run` runs on the CPU (tests/benchmarks/
test_gpu_run.py checks the whole path that way).

benchmarks/gpu_pack.sh packs all that a GPU machine without TVM needs (TVM's runtime,
tvm-ffi for its Python, the exported builds) into one folder of about 30 MB, and
benchmarks/gpu_machine.sh installs it there and runs this module.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import platform
import sys
import time

import numpy as np

from .closeness import largest_relative_error
from .timing import median_seconds

REPO = pathlib.Path(__file__).resolve().parents[1]
SIDES = {"rules=()": (), "default": None}  # egad.optimize's rules= for each side
ROUNDS = 15
# Each leaf's largest error relative to its largest value, against the CPU's rules=()
# build: optimizer.py's 1e-3 on the CPU; on a GPU 1e-2, as NVRTC builds with --use_fast_math:
# GNMT-lite's gradient on an H100 differed by 1.4e-3 (rules=()) and 0.9e-3 (default).
RTOL = 1e-3
GPU_RTOL = 1e-2
PROFILE_ROWS = 15  # rows `profile` prints per build, longest first


def export(directory: str | os.PathLike, target: str = "cuda", arch: str = "sm_90", workloads=None) -> dict:
    """Optimize and build each workload ((name, traced loss, wrt, arguments); default:
    optimizer.py's lstm and gnmt) for `target`, write what `run` needs to `directory`
    and return the manifest."""
    import egad
    from egad.interp import _flatten_arguments
    from egad.pytree import flatten

    from . import optimizer

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tvm_target = {"kind": "cuda", "arch": arch} if target == "cuda" else target
    if workloads is None:
        workloads = [optimizer.lstm_workload(), optimizer.gnmt_workload()]
    manifest = {"target": target, "arch": arch if target == "cuda" else None, "workloads": []}
    for name, program, wrt, args in workloads:
        slug = "".join(c if c.isalnum() else "_" for c in name)
        expected, _ = flatten(egad.optimize(program, wrt=wrt, rules=())(*args))
        np.savez(directory / f"{slug}-expected.npz", *[np.asarray(v) for v in expected])
        entry = {"workload": name, "expected": f"{slug}-expected.npz", "sides": {}}
        previous = None
        for side, rules in SIDES.items():
            started = time.perf_counter()
            optimized = egad.optimize(program, wrt=wrt, target=tvm_target, rules=rules, example_args=args)
            library = f"{slug}-{'plain' if rules == () else 'default'}.so"
            optimized.export_library(str(directory / library))
            seconds = time.perf_counter() - started
            flat = [np.asarray(a) for a in _flatten_arguments(optimized.program, args, {})]
            if not _same_arrays(flat, previous):  # else the other side's file (the same VM arguments)
                arguments = f"{slug}-{'plain' if rules == () else 'default'}-args.npz"
                np.savez(directory / arguments, *flat)
                previous = flat
            (optimization,) = optimized.optimizations or (None,)
            entry["sides"][side] = {
                "library": library, "arguments": arguments, "optimize+build s": seconds,
                "fallback": optimization.fallback if optimization else None,
                "rules extracted": dict(optimization.chosen) if optimization else {},
                "predicted speed-up": optimization.predicted_before.seconds / optimization.predicted_after.seconds
                if optimization else 1.0}
            print(f"  exported {name} {side}: {seconds:.1f} s", flush=True)
        manifest["workloads"].append(entry)
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def run(directory: str | os.PathLike, rounds: int = ROUNDS, runtime_path: str | None = None) -> dict:
    """Load, check and time what `export` wrote to `directory`; the results as a dict.
    `runtime_path`: another runtime.py to run the loops and tapes (to compare two)."""
    tvm, runtime, manifest, device = _open(directory, runtime_path)
    directory = pathlib.Path(directory)
    rows = []
    for entry in manifest["workloads"]:
        expected = _arrays(directory / entry["expected"])
        calls, errors = {}, {}
        for side, built in entry["sides"].items():
            started = time.perf_counter()
            call = _caller(tvm, runtime, directory / built["library"], _arrays(directory / built["arguments"]),
                           device)
            errors[side] = _relative_error(call(), expected, f"{entry['workload']} {side}",
                                           GPU_RTOL if manifest["target"] == "cuda" else RTOL)
            built["load+first call s"] = time.perf_counter() - started
            calls[side] = call
        times = median_seconds(calls, rounds)
        rows.append({"workload": entry["workload"], "rules=() ms": times["rules=()"] * 1e3,
                     "default ms": times["default"] * 1e3, "speed-up": times["rules=()"] / times["default"],
                     "relative error": errors, "sides": entry["sides"]})
    return {"device": _device_name(tvm, device), "target": manifest["target"], "arch": manifest["arch"],
            "runtime only": bool(getattr(tvm.base, "_RUNTIME_ONLY", False)), "rounds": rounds,
            "runtime.py": str(runtime_path or REPO / "tvm_bridge" / "runtime.py"),
            "python": platform.python_version(), "tvm": tvm.__version__, "rows": rows}


def _open(directory, runtime_path: str | None = None):
    """(tvm, egad's runtime module, the manifest, the device) for the libraries `export`
    wrote to `directory`, with TVM's runtime alone where TVM's compiler is not loaded yet."""
    if "tvm" not in sys.modules:  # the compiler is not needed (nor, there, installed)
        # set only where it decides TVM's import: within pytest (TVM imported) it would leak into
        # every subprocess started later, whose TVM then loaded without its compiler
        os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    import tvm
    import tvm.runtime.vm  # noqa: F401 - tvm.runtime does not import it

    runtime = _load_callbacks(runtime_path)
    manifest = json.loads((pathlib.Path(directory) / "manifest.json").read_text())
    if manifest["target"] == "cuda":
        _prepare_cuda(tvm, manifest["arch"])
    device = tvm.cuda(0) if manifest["target"] == "cuda" else tvm.cpu(0)
    if not device.exist:
        raise SystemExit(f"no {manifest['target']} device here: the libraries in {directory} cannot run")
    return tvm, runtime, manifest, device


def _load_callbacks(runtime_path: str | None = None):
    """egad's loop drivers and tapes (runtime.py, or `runtime_path`; returned) and host
    checks (runtime_checks.py), registered as the packed functions compiled code calls,
    without importing the rest of egad.tvm_bridge (which needs TVM's compiler). In a
    process that has egad.tvm_bridge, its own (loading them again would take the packed
    functions' names from the modules egad's builds call back into)."""
    if runtime_path is None and "egad.tvm_bridge.runtime" in sys.modules:
        import egad.tvm_bridge.runtime_checks  # noqa: F401 - registered with host_checks, imported by lowering

        return sys.modules["egad.tvm_bridge.runtime"]
    modules = []
    for name in ("runtime", "runtime_checks"):
        path = runtime_path if name == "runtime" and runtime_path else REPO / "tvm_bridge" / f"{name}.py"
        modules.append(_load_file(f"egad_gpu_run_{name}", path))
    return modules[0]


def _load_file(name: str, path) -> object:
    """The Python file at `path` loaded as module `name`, outside any package."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def profile(directory: str | os.PathLike, calls: int = 3, top: int = PROFILE_ROWS) -> None:
    """Where a call's time goes, per callee (tvm_bridge/profile.py, loaded from its file:
    the recorder `Optimized.profile` uses): each kernel, loop driver, egad runtime
    function and VM builtin by self time, in main or the loop it ran in, with a device
    synchronization after each call on a GPU; and, where PyTorch is installed, the GPU
    kernels CUPTI saw (their number and summed time, against the calls' wall time)."""
    tvm, runtime, manifest, device = _open(directory)
    timing = _load_file("egad_gpu_run_profile", REPO / "tvm_bridge" / "profile.py")
    table = _load_file("egad_gpu_run_text_table", REPO / "egad" / "text_table.py").text_table
    directory = pathlib.Path(directory)
    on_cpu = device.dlpack_device_type() == tvm.cpu().dlpack_device_type()
    for entry in manifest["workloads"]:
        for side, built in entry["sides"].items():
            library, arguments = directory / built["library"], _arrays(directory / built["arguments"])
            call = _caller(tvm, runtime, library, arguments, device)
            recorder = timing.Recorder(sync=None if on_cpu else device.sync)
            timed = _caller(tvm, runtime, library, arguments, device, instrument=recorder)
            result = timing.measure(call, timed, recorder, calls)
            print(f"== {entry['workload']} {side}")
            print("\n".join(result.lines(top, text_table=table)))
            _print_kernels(call, calls)


def _print_kernels(call, calls: int) -> None:
    try:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
    except ImportError:
        return
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total = sum(e.device_time for e in kernels) / calls
    print(f"  GPU: {len(kernels) / calls:.0f} kernels and copies a call, {total / 1e3:.2f} ms of GPU time a call")
    by_name: dict[str, list] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.device_time)
    for name, times in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:8]:
        print(f"    {sum(times) / calls / 1e3:8.3f} ms {len(times) / calls:6.0f}x  {name[:90]}")


def _prepare_cuda(tvm, arch: str) -> None:
    """What TVM's compiler sets up for CUDA, done with the runtime alone: load
    libtvm_runtime_cuda.so (TVM loads it in a hook of its compiler's backends), and
    compile the kernels' source at load for `arch` (TVM's own callback asks the
    compiler's current target for the arch, which the runtime alone cannot answer).
    TVM_CUDA_COMPILE_MODE=nvcc compiles with nvcc, as TVM's callback does."""
    import tvm_ffi
    from tvm.support import nvcc
    from tvm_ffi.libinfo import load_lib_ctypes

    loaded = tvm.base._LOADED_LIBS
    if "tvm_runtime_cuda" not in loaded:
        directory = pathlib.Path(loaded["tvm_runtime"]._name).resolve().parent
        loaded["tvm_runtime_cuda"] = load_lib_ctypes(package="tvm", target_name="tvm_runtime_cuda",
                                                     extra_lib_paths=[directory], mode="RTLD_LOCAL")
    with_nvcc = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower() == "nvcc"

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _compile(code, *_):
        if with_nvcc:
            return nvcc.compile_cuda(code, target_format="fatbin", arch=arch, compiler="nvcc")
        return nvcc.compile_cuda(code, target_format="cubin", arch=arch, compiler="nvrtc")


def _caller(tvm, runtime, library: pathlib.Path, arguments: list[np.ndarray], device, instrument=None):
    """A call of the library's `main` as `Compiled.__call__` makes it: the arguments
    copied to the device, the tapes released after, the results copied back.
    `instrument`: the VM's instrument hook (a profile's recorder)."""
    vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(library)), device)
    if instrument is not None:
        vm.set_instrument(instrument)
    main, invoke = vm["main"], vm.module["invoke_closure"]

    def call() -> list[np.ndarray]:
        tensors = [tvm.runtime.tensor(a, device) for a in arguments]
        tapes = runtime.start_call()
        try:
            results = main(invoke, *tensors)
        finally:
            runtime.release_tapes(tapes)
        results = [results] if isinstance(results, tvm.runtime.Tensor) else list(results)
        return [r.numpy() for r in results]

    return call


def _arrays(path: pathlib.Path) -> list[np.ndarray]:
    with np.load(path) as saved:
        return [saved[f"arr_{k}"] for k in range(len(saved.files))]


def _same_arrays(these: list[np.ndarray], those: list[np.ndarray] | None) -> bool:
    return those is not None and len(these) == len(those) and all(
        a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in zip(these, those))


def _relative_error(got: list[np.ndarray], want: list[np.ndarray], context: str, rtol: float) -> float:
    """The largest error of any leaf relative to that leaf's largest value; raises when
    above `rtol` or when the leaves do not match, so nothing wrong is timed."""
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        raise AssertionError(f"{context}: results of shapes {[g.shape for g in got]}, "
                             f"expected {[w.shape for w in want]}")
    worst = largest_relative_error(got, want)
    if not worst <= rtol:  # NaN fails too
        raise AssertionError(f"{context}: results differ from the CPU's rules=() build by {worst:.3g} (relative)")
    return worst


def _device_name(tvm, device) -> str:
    name = device.device_name if device.dlpack_device_type() != tvm.cpu().dlpack_device_type() else None
    return str(name) if name else platform.processor() or platform.machine()


def _print_rows(result: dict) -> None:
    print(f"device: {result['device']} (target {result['target']}, TVM runtime only: {result['runtime only']})")
    print(f"  {'workload':20s} {'rules=() ms':>12s} {'default ms':>11s} {'speed-up':>9s} {'rel. error':>11s}")
    for row in result["rows"]:
        print(f"  {row['workload']:20s} {row['rules=() ms']:12.3f} {row['default ms']:11.3f} "
              f"{row['speed-up']:8.2f}x {max(row['relative error'].values()):11.2g}")


def main(argv=None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    options = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    positional = [a for a in argv if not a.startswith("--")]
    if len(positional) != 2 or positional[0] not in ("export", "run", "profile"):
        print(__doc__)
        return 2
    command, directory = positional
    if command == "profile":
        profile(directory)
        return 0
    if command == "export":
        export(directory, options.get("--target", "cuda"), options.get("--arch", "sm_90"))
        return 0
    result = run(directory, int(options.get("--rounds", ROUNDS)), options.get("--runtime"))
    _print_rows(result)
    path = pathlib.Path(options.get("--json", pathlib.Path(directory) / "gpu_run.json"))
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

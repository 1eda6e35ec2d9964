"""Targets: the names egad accepts, the TVM target and device for each, and the
generated device source (DESIGN §7).

`"llvm"`/`"cpu"` build and run here. `"cuda"` builds anywhere (TVM keeps the CUDA
source in the library and compiles it with NVRTC when the library is loaded) and
runs where a GPU is present. `"metal"`, `"opencl"` and `"webgpu"` build source for a
machine that has that runtime. `"vulkan"` needs a TVM built with Vulkan codegen,
which the PyPI wheel is not.
"""
from __future__ import annotations

import dataclasses
import functools

import tvm
from tvm.target.codegen import llvm_get_system_cpu

from egad.errors import UnsupportedError, message

# egad's target names -> TVM target kind
TARGET_KINDS = {"llvm": "llvm", "cpu": "llvm", "cuda": "cuda", "metal": "metal", "opencl": "opencl",
                "webgpu": "webgpu", "vulkan": "vulkan"}

# the TVM function that builds each kind's device code; missing ones mean no codegen
_CODEGEN = {"cuda": "target.build.cuda", "metal": "target.build.metal", "opencl": "target.build.opencl",
            "webgpu": "target.build.webgpu", "vulkan": "target.build.vulkan"}

_DEVICES = {"llvm": tvm.cpu, "cuda": tvm.cuda, "metal": tvm.metal, "opencl": tvm.opencl, "vulkan": tvm.vulkan}


@dataclasses.dataclass(frozen=True)
class ResolvedTarget:
    """A target as egad uses it: the TVM target (with an llvm host for GPUs) and a
    stable text for cache keys."""

    kind: str
    tvm_target: tvm.target.Target

    @property
    def key(self) -> str:
        return str(self.tvm_target)

    @property
    def is_cpu(self) -> bool:
        return self.kind == "llvm"

    @property
    def foreign(self) -> bool:
        """An llvm target for another machine (an `mtriple` not the host's): it builds, but
        neither runs nor loads here."""
        triple = self.tvm_target.attrs.get("mtriple") if self.is_cpu else None
        return triple is not None and str(triple) != _host_triple()

    @property
    def runs_here(self) -> bool:
        """Whether its builds run on this machine's CPU (where they can be timed)."""
        return self.is_cpu and not self.foreign

    def device(self):
        """The device to run on, or an EgadError saying why this target only builds."""
        if self.foreign:
            raise UnsupportedError(message(
                f"the program was built for {self.tvm_target.attrs['mtriple']}, not for this machine "
                f"({_host_triple()})",
                instead="export the library (Compiled.export_library, with a cross compiler) and run it there, "
                        "or build with target='llvm'"))
        make = _DEVICES.get(self.kind)
        if make is None:
            raise UnsupportedError(message(
                f"target {self.kind} builds source but cannot run from Python",
                instead="export the library (Compiled.export_library) and load it in a WebGPU runtime, "
                        "or run with target='llvm'"))
        device = make(0)
        if not device.exist:
            raise UnsupportedError(message(
                f"the program was built for {self.kind} but this machine has no {self.kind} device",
                instead=f"run on a machine with a {self.kind} device (the built library and `.source` are "
                        "still available), or build with target='llvm'"))
        return device


def resolve(target) -> ResolvedTarget:
    """egad's target argument (a name from TARGET_KINDS or a TVM target dict) as a
    ResolvedTarget. Raises UnsupportedError for unknown targets and for targets whose
    codegen this TVM lacks."""
    if isinstance(target, str):
        kind = TARGET_KINDS.get(target)
        if kind is None:
            raise UnsupportedError(message(f"unknown target {target!r}",
                                           instead=f"use one of {sorted(TARGET_KINDS)} or a TVM target dict"))
        spec: str | dict = kind
    elif isinstance(target, dict) and isinstance(target.get("kind"), str):
        kind, spec = target["kind"], dict(target)
    else:
        raise UnsupportedError(message(f"target {target!r} is neither a target name nor a TVM target dict",
                                       instead='use e.g. "llvm", "cuda" or {"kind": "llvm", "num-cores": 2}'))
    _require_codegen(kind)
    foreign = isinstance(spec, dict) and spec.get("mtriple") not in (None, _host_triple())
    if kind == "llvm" and (isinstance(spec, str) or "mcpu" not in spec) and not foreign:
        # the host CPU, named: LLVM's baseline x86-64 forfeits most vector work, and the
        # name keys the build cache, so a library is never loaded on a CPU it was not built for
        spec = {"kind": "llvm", **({} if isinstance(spec, str) else spec), "mcpu": llvm_get_system_cpu()}
    try:
        tvm_target = tvm.target.Target(spec) if kind == "llvm" else tvm.target.Target(spec, host="llvm")
    except Exception as error:  # noqa: BLE001 - TVM raises several types for a bad target
        raise UnsupportedError(message(f"TVM does not accept the target {target!r}: {error}",
                                       instead="check the target's kind and attributes")) from None
    return ResolvedTarget(kind, tvm_target)


@functools.cache
def _host_triple() -> str:
    return str(tvm.target.Target("llvm").attrs["mtriple"])


def _require_codegen(kind: str) -> None:
    name = _CODEGEN.get(kind)
    if name is None or tvm.get_global_func(name, allow_missing=True) is not None:
        return
    if kind == "vulkan":
        raise UnsupportedError(message(
            "the installed TVM has no Vulkan codegen (the PyPI apache-tvm wheel is built without it)",
            instead="build TVM 0.27 from source with set(USE_VULKAN ON) in config.cmake "
                    "(https://tvm.apache.org/docs/install/from_source.html) and install it in place of the wheel, "
                    "or use target='cuda', 'metal', 'opencl' or 'webgpu'"))
    raise UnsupportedError(message(f"the installed TVM has no {kind} codegen ({name} is missing)",
                                   instead=f"install a TVM built with {kind} support, or use target='llvm'"))


def device_source(executable) -> dict[str, str]:
    """The generated device code of a built executable, by module kind (e.g. "cuda",
    "metal"); empty for CPU builds."""
    sources: dict[str, str] = {}

    def visit(module):
        for child in module.imports:
            if child.kind not in ("llvm", "c", "relax.VMExecutable", "static_library"):
                sources[child.kind] = child.inspect_source()
            visit(child)

    visit(getattr(executable, "mod", executable))  # a built VMExecutable, or a library loaded from disk
    return sources

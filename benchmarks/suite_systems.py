"""The systems `benchmarks/suite.py` compares, each as a gradient step ready to run:
egad (`egad.optimize` with the default rules, target llvm), JAX `jit(value_and_grad)`
of the structured loss (`lax.scan`/`lax.cond`/`lax.while_loop`), JAX of the
Python-unrolled loss, PyTorch eager, and `torch.compile` of the eager loss.

`prepare(system, module, case, args, wrt)` returns a `Step`: calling it runs one
gradient step on inputs already converted to the system's arrays and returns its
own arrays; `to_numpy` turns a result into (value, [gradients]). Nothing is
compiled before the first call, so the first call's time is the compile time.

    step = prepare("jax-scan", lstm_lm, "T16", lstm_lm.arguments("T16"), lstm_lm.WRT)
    value, grads = step.to_numpy(step())
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from egad.cli_bench import SYSTEMS  # the command line's choices: one list, in egad (which cannot import benchmarks)

FRAMEWORK = {"egad": "egad", "jax-scan": "jax", "jax-unrolled": "jax", "torch-eager": "torch",
             "torch-compile": "torch"}
INSTALL_HINT = "install the peers with pip install -e '.[peers]' (jax, jaxlib, torch==2.13.0 CPU)"


@dataclasses.dataclass
class Step:
    """One gradient step of a system on fixed inputs."""

    run: Callable[[], Any]
    to_numpy: Callable[[Any], tuple[float, list[np.ndarray]]]
    forward: Callable[[], Any] | None = None  # the value alone (egad only); compiles on its first call
    details: Callable[[], dict] = dict  # system-specific facts for the record (egad: phase timings)

    def __call__(self):
        return self.run()


def import_framework(system: str) -> str:
    """Import the framework of `system` (so that its import is not counted as compile
    time or compile memory) and return its version; ImportError when missing."""
    framework = FRAMEWORK[system]
    if framework == "egad":
        import egad
        import egad.tvm_bridge  # noqa: F401  (TVM itself loads here, not in the first build)

        return egad.__version__
    if framework == "jax":
        import jax

        return jax.__version__
    import torch

    return torch.__version__


def prepare(system: str, module, case: str, args: tuple, wrt: tuple[int, ...]) -> Step:
    if system == "egad":
        return _egad(module, case, args, wrt)
    if system in ("jax-scan", "jax-unrolled"):
        loss = module.jax_loss(case) if system == "jax-scan" else module.jax_unrolled_loss(case)
        return _jax(loss, args, wrt)
    if system in ("torch-eager", "torch-compile"):
        return _torch(module.torch_loss(case), args, wrt, compiled=system == "torch-compile")
    raise ValueError(f"unknown system {system!r}; the systems are {SYSTEMS}")


def _egad(module, case, args, wrt) -> Step:
    import egad

    program = egad.trace(module.loss(case), *args)
    gradient = egad.optimize(program, wrt=wrt, target="llvm")
    forward = egad.optimize(program, wrt=None, target="llvm")

    def details() -> dict:
        optimization = gradient.optimizations[0] if gradient.optimizations else None
        return {"egad phases s": {phase: round(seconds, 3) for phase, seconds in gradient.timings.items()},
                "egad fallback": getattr(optimization, "fallback", None),
                "egad rules extracted": sorted(getattr(optimization, "chosen", {}) or {})}

    return Step(run=lambda: gradient(*args), to_numpy=lambda result: (float(result[0]), list(result[1])),
                forward=lambda: forward(*args), details=details)


def _jax(loss, args, wrt) -> Step:
    import jax
    import jax.numpy as jnp

    step = jax.jit(jax.value_and_grad(loss, argnums=wrt))
    arrays = [jnp.asarray(a) for a in args]
    return Step(run=lambda: jax.block_until_ready(step(*arrays)),
                to_numpy=lambda result: (float(result[0]), [np.asarray(g) for g in result[1]]))


def _torch(loss, args, wrt, compiled: bool) -> Step:
    import torch

    if compiled:
        loss = torch.compile(loss)
    tensors = [torch.from_numpy(np.array(a)) for a in args]  # a copy: torch never writes into the caller's arrays
    for position in wrt:
        tensors[position].requires_grad_(True)
    differentiated = [tensors[position] for position in wrt]

    def run():
        value = loss(*tensors)
        return value.detach(), torch.autograd.grad(value, differentiated)

    return Step(run=run, to_numpy=lambda result: (float(result[0]), [g.numpy() for g in result[1]]))

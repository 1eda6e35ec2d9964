"""`egad.optimize`: a program (and its gradient) compiled into a callable.

This is the unoptimized path of DESIGN §1: differentiate, lower to TVM Relax, build.
The e-graph optimizer (rule families, critical-path extraction) is not part of
egad yet, so `rules` must be empty or None, and the report says that no rewrite
ran. TVM is imported only here and in egad.tvm_bridge.
"""
from __future__ import annotations

import time

from .errors import ArgumentError, UnsupportedError, message
from .ir.program import Program


class Optimized:
    """A compiled program: call it with the program's positional arguments (numpy
    arrays or anything `np.asarray` takes); it returns numpy values — `(value,
    grads)` when built with `wrt`, the value alone with `wrt=None`."""

    def __init__(self, program: Program, wrt, target, has_aux: bool):
        from . import ad

        self.program = program
        self.target = target
        self.wrt = wrt
        self.timings: dict[str, float] = {}
        started = time.perf_counter()
        self.built_program = program if wrt is None else ad.value_and_grad(program, wrt=wrt, has_aux=has_aux)
        self.timings["differentiate"] = time.perf_counter() - started
        self.builds = 0
        self._compiled = None

    def _build(self):
        from .tvm_bridge import build

        started = time.perf_counter()
        self._compiled = build(self.built_program, target=self.target)
        self.timings["lower and build"] = time.perf_counter() - started
        self.builds += 1
        return self._compiled

    def __call__(self, *args):
        compiled = self._compiled or self._build()
        return compiled(*args)

    @property
    def relax_text(self) -> str:
        """TVMScript of the module that was built."""
        return (self._compiled or self._build()).relax_text

    def report(self) -> str:
        lines = [f"egad.optimize report for {self.program.name} (target {self.target})",
                 "  e-graph: not run (the optimizer is not part of egad yet; rules=() is the only option)",
                 f"  builds: {self.builds}"]
        lines += [f"  {phase}: {seconds * 1e3:.1f} ms" for phase, seconds in self.timings.items()]
        return "\n".join(lines)


_TARGETS = {"llvm": "llvm", "cpu": "llvm"}


def optimize(program: Program, wrt=(0,), target="llvm", rules=None, has_aux: bool = False) -> Optimized:
    """Compile `program` and, unless `wrt=None`, its gradient into one callable
    returning `(value, grads)`.

    Example: `f = egad.optimize(egad.trace(loss, W, xs), wrt=(0,)); value, (dW,) = f(W, xs)`"""
    if not isinstance(program, Program):
        raise ArgumentError(message(f"egad.optimize needs an egad.Program, got {type(program).__name__}",
                                    instead="trace the function first: egad.optimize(egad.trace(fn, *args))"))
    if rules:
        raise UnsupportedError(message("the e-graph optimizer (rules=...) is not part of egad yet",
                                       instead="call egad.optimize(program, rules=()) for the unoptimized build"))
    if not isinstance(target, str) or target not in _TARGETS:
        raise UnsupportedError(message(f"target {target!r} is not supported yet; egad builds for llvm (cpu) today",
                                       instead='use target="llvm"'))
    return Optimized(program, wrt, _TARGETS[target], has_aux)

"""Build a lowered program and run it on numpy arguments."""
from __future__ import annotations

import time

import numpy as np
import tvm
from tvm import relax

from egad.interp import _flatten_arguments
from egad.ir.program import Program
from egad.pytree import unflatten

from . import runtime
from .lower import lower


class Compiled:
    """A program built with TVM: call it like `egad.interpret(program, *args)`."""

    def __init__(self, program: Program, target="llvm"):
        self.program = program
        started = time.perf_counter()
        self.module = lower(program)
        self.executable = tvm.compile(self.module, target=target)
        self.build_seconds = time.perf_counter() - started
        self.device = tvm.cpu()
        self.vm = relax.VirtualMachine(self.executable, self.device)
        self.invoke = self.vm.module["invoke_closure"]

    @property
    def relax_text(self) -> str:
        return self.module.script()

    def __call__(self, *args):
        flat = _flatten_arguments(self.program, args, {})
        tensors = [tvm.runtime.tensor(np.array(a, order="C"), self.device) for a in flat]
        first_tape = max(runtime._TAPES, default=0) + 1
        try:
            results = self.vm["main"](self.invoke, *tensors)
        finally:
            runtime.release_tapes(first_tape)
        values = [np.asarray(r.numpy()) for r in results]
        return unflatten(self.program.out_tree, [v[()] if v.ndim == 0 else v for v in values])


def build(program: Program, target="llvm") -> Compiled:
    return Compiled(program, target)

"""egad: differentiate and compile numerical programs with real control flow.

    import egad
    import egad.numpy as enp

    def loss(W, xs, h0):
        h = egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] + h @ W), h0)
        return enp.sum(h * h)

    program = egad.trace(loss, W, xs, h0)   # an egad.Program; print(program) shows its IR
    egad.interpret(program, W, xs, h0)       # numpy reference semantics
"""
from . import nn, numpy
from .ad import grad, value_and_grad
from .api import Optimized, optimize
from .errors import (
    ArgumentError, BranchMismatchError, BuildError, EgadError, IndexOutOfRangeError, LoopStateError,
    NumpyInteropError, RuleError, ShapeError, TracerConversionError, TracerLeakError, UnsupportedError, VerifyError,
)
from .frontend.control import cond, fori_loop, scan, switch, while_loop
from .frontend.convert import function
from .frontend.numpy_api import stop_gradient
from .frontend.tracing import Spec, trace
from .interp import RunStats, interpret
from .ir import Program, TensorType, verify

__version__ = "0.1.0"

__all__ = [
    "trace", "function", "Program", "Spec", "interpret", "RunStats", "grad", "value_and_grad", "optimize",
    "Optimized", "cond", "switch", "fori_loop", "while_loop", "scan",
    "stop_gradient", "numpy", "nn", "verify", "TensorType", "EgadError", "ArgumentError", "BranchMismatchError",
    "BuildError", "IndexOutOfRangeError", "LoopStateError", "NumpyInteropError", "ShapeError", "TracerConversionError",
    "TracerLeakError", "UnsupportedError", "VerifyError", "RuleError",
]


def __getattr__(name):
    # egad.rules (the rule families, which import egglog) loads when first used
    if name == "rules":
        import importlib

        return importlib.import_module("egad.rules")
    raise AttributeError(f"module 'egad' has no attribute {name!r}")

"""Lowering of egad programs to TVM Relax, installed as `egad.tvm_bridge`.

The only layer that imports TVM (DESIGN §2, §7). `build(program, target)` lowers a
Program (primal or gradient) to a Relax IRModule (tvm_bridge/lower.py; one file of
op lowerings per op family), builds it and returns a callable taking the program's
arguments. Loops run in a driver (tvm_bridge/runtime.py).
"""
from .build import Compiled, build
from .lower import lower

__all__ = ["Compiled", "build", "lower"]

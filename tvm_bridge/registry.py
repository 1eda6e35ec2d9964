"""Where each op's Relax lowering is registered (one file per op family, named as
the family in egad/ir/ops.py: elementwise.py, linalg.py, shape.py, ...)."""
from __future__ import annotations

from typing import Callable

from tvm import tirx as tir

LOWERINGS: dict[str, Callable] = {}


def lowers(*names: str):
    """Register `fn(bb, args, attrs, binding) -> relax expr (or tuple of exprs)` for ops."""
    def register(fn):
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


class FunctionScope:
    """What a lowering may want to know beyond its binding: the symbolic dims
    (name -> tir.Var) of the Relax function being built, so a lowering that creates a
    symbolic shape reuses the function's own variable; and the program's known
    constants (IR var uid -> numpy value, tvm_bridge/lower.py `known_constants`), so a
    lowering can specialize on a constant operand even where decoding hoisted its
    `const` out of the loop that reads it; and the indices wrapped and clamped so far
    (tvm_bridge/index.py), so takes at one index (a loop body's rows at its counter)
    share one small kernel."""

    symbols: dict = {}
    constants: dict = {}
    indices: dict = {}


def symbol_var(symbols: dict, name: str):
    """The function's tir variable for symbolic dim `name` (made on first use)."""
    if name not in symbols:
        symbols[name] = tir.Var("".join(c if c.isalnum() else "_" for c in name), "int64")
    return symbols[name]

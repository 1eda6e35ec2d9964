"""Where each op's Relax lowering is registered (one file per op family, named as
the family in egad/ir/ops.py: elementwise.py, linalg.py, shape.py, ...)."""
from __future__ import annotations

from typing import Callable

LOWERINGS: dict[str, Callable] = {}


def lowers(*names: str):
    """Register `fn(bb, args, attrs, binding) -> relax expr (or tuple of exprs)` for ops."""
    def register(fn):
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


class FunctionScope:
    """The symbolic dims (name -> tir.Var) of the Relax function being built, so a
    lowering that creates a symbolic shape reuses the function's own variable."""

    symbols: dict = {}

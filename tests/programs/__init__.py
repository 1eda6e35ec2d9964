"""The shared corpus of small control-flow programs (CONVENTIONS 8).

Each program is a `CorpusProgram`: a function written against egad's public API
(`egad.numpy`, `egad.nn`, the combinators), a plain-Python/numpy reference that
computes the same math with ordinary Python control flow, and a factory for
arguments. Every configuration (interpreter today; AD, compiled and optimised
later) runs the whole corpus and compares against the reference.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class CorpusProgram:
    name: str
    fn: Callable[..., Any]  # traced: uses egad.numpy / egad.nn / combinators
    reference: Callable[..., Any]  # same math, plain Python control flow + numpy
    make_args: Callable[[np.random.Generator], tuple]  # fresh positional arguments
    static_argnums: tuple[int, ...] = ()
    # indices of float arguments a gradient is meaningful for (used by the AD issue)
    differentiable_argnums: tuple[int, ...] = ()
    # relative tolerance for comparing with the reference
    rtol: float = 1e-6
    tags: tuple[str, ...] = ()


def all_programs() -> list[CorpusProgram]:
    """Every corpus program, in a stable order."""
    from . import branches, loops, models, nested

    programs = [*loops.PROGRAMS, *branches.PROGRAMS, *nested.PROGRAMS, *models.PROGRAMS]
    names = [p.name for p in programs]
    assert len(names) == len(set(names)), "corpus program names must be unique"
    return programs

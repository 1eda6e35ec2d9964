"""Trip counts and symbolic sizes seen on example inputs, as the cost model's guesses.

The cost model prices a loop as its trips times one trip (egad/extract.py). A `for`
loop's trips are mostly known (constant bounds, an `egad.Spec` symbol); a `while`
loop's are not, and the extractor's default guess (64) can be far off: a Newton
iteration that converges in 5 trips, an integrator that takes 2000 steps. DESIGN §6
("Dynamic"): observed trip counts replace the guesses.

`observe(program, args)` interprets the program once and writes each `while`
loop's mean trips over its runs into its `trip_guess` attr (docs/ir.md), nested
loops included. AD copies the attr to the gradient's forward copy and adjoint loop
(egad/ad/transform.py, `KEPT_LOOP_ATTRS`), so the e-graph's extractor prices them
with it, and the checkpoint planner plans a top-level `while` loop for it.
`egad.optimize` observes on the example inputs it checks on (the first call's
arguments, or `example_args=`) and says what it saw in its report.

Likewise `symbol_sizes(program, args)`: the sizes an `egad.Spec`'s symbolic dims
("T") take in the arguments a build is for, which `egad.optimize` gives the cost
model as its guesses for those symbols (a loop over "T" steps, a batch of "B" rows)
instead of the default 64. The program stays symbolic: only its price changes.

    program, seen = trip_counts.observe(program, example_args)
    seen  # [Observed(where='newton.py:14', runs=1, mean_trips=5.0)]
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import ArgumentError
from .interp import RunStats, argument_leaves, interpret
from .ir.program import Program, Region, walk_bindings
from .ir.types import bind_dims


@dataclasses.dataclass(frozen=True)
class Observed:
    """One `while` loop's trips on the example inputs."""

    where: str  # the user's source line of the loop
    runs: int  # how many times the loop ran (more than once inside another loop)
    mean_trips: float

    def __str__(self) -> str:
        runs = f" (mean of {self.runs} runs)" if self.runs > 1 else ""
        return f"while loop at {self.where}: {self.mean_trips:.3g} trips{runs}"


def has_while_loops(program: Program) -> bool:
    return any(b.op == "while" for b in walk_bindings(program.region))


def observe(program: Program, args) -> tuple[Program, list[Observed]]:
    """`program` with a `trip_guess` on each `while` loop that ran on `args` (its mean
    trips, at least 1), and what was seen, in program order. A loop that did not run
    (a branch not taken) keeps the guess it had."""
    stats = RunStats()
    interpret(program, *args, stats=stats)
    seen: list[Observed] = []
    region = _annotated(program.region, stats.while_trips, seen)
    return dataclasses.replace(program, region=region), seen


def _annotated(region: Region, trips: dict[int, list[int]], seen: list[Observed]) -> Region:
    bindings = []
    for binding in region.bindings:
        attrs = binding.attrs
        runs = trips.get(id(binding)) if binding.op == "while" else None
        if runs:
            mean = sum(runs) / len(runs)
            attrs = {**attrs, "trip_guess": max(1, round(mean))}
            seen.append(Observed(str(binding.loc), len(runs), mean))
        regions = tuple(_annotated(sub, trips, seen) for sub in binding.regions)
        if attrs is not binding.attrs or any(new is not old for new, old in zip(regions, binding.regions)):
            binding = dataclasses.replace(binding, attrs=attrs, regions=regions)
        bindings.append(binding)
    return dataclasses.replace(region, bindings=bindings)


def symbol_sizes(program: Program, args) -> dict[str, int]:
    """The size each symbolic dim of `program` takes in `args`, read off the arguments'
    shapes (nothing is copied or run); {} where they do not fit the program (the build
    says what is wrong)."""
    symbols: dict[str, int] = {}
    try:
        for _, leaf, expected in argument_leaves(program, args):
            shape = tuple(int(n) for n in getattr(leaf, "shape", np.shape(leaf)))
            if bind_dims(expected.shape, shape, symbols) is not None:
                return {}
    except ArgumentError:
        return {}
    return symbols

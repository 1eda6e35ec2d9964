"""The IR's data structures: values, bindings in A-normal form, regions, programs.

A `Program` is a list of params and one `Region`. A region has params, bindings
(one op each, SSA: every `Var` is defined exactly once) and results. Control ops
(`if`, `switch`, `for`, `while`) carry sub-regions; a region sees only its own
params and its own earlier bindings — values from outside are passed in explicitly
(the tracer lambda-lifts closures), so a region is a closed function.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from ..errors import ArgumentError, message
from ..pytree import TreeDef
from ..source import UNKNOWN, SourceLoc
from .types import TensorType

_var_ids = itertools.count()


class Var:
    """One SSA value. Identity is object identity; `hint` only helps printing."""

    __slots__ = ("type", "hint", "uid")

    def __init__(self, type: TensorType, hint: str = ""):
        self.type = type
        self.hint = hint
        self.uid = next(_var_ids)

    def __repr__(self) -> str:
        return f"Var({self.hint or self.uid}: {self.type})"


@dataclasses.dataclass(eq=False)
class Binding:
    """`outputs = op(inputs; attrs; regions)`, recorded at the user's source line `loc`."""

    outputs: tuple[Var, ...]
    op: str
    inputs: tuple[Var, ...]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    regions: tuple["Region", ...] = ()
    loc: SourceLoc = UNKNOWN


@dataclasses.dataclass(eq=False)
class Region:
    """A closed function body: params -> bindings -> results."""

    params: tuple[Var, ...]
    bindings: list[Binding]
    results: tuple[Var, ...]
    name: str = "region"

    @property
    def param_types(self) -> list[TensorType]:
        return [v.type for v in self.params]

    @property
    def result_types(self) -> list[TensorType]:
        return [v.type for v in self.results]


@dataclasses.dataclass(frozen=True)
class ArgSignature:
    """How `interpret` maps positional arguments to the program's flat params.

    For each positional argument: either a pytree structure whose leaves are
    params, or a static Python value baked in at trace time (`static_argnums`)."""

    trees: tuple[TreeDef | None, ...]  # None for a static argument
    static_values: tuple[Any, ...]  # the baked value for static args, else None

    @property
    def num_args(self) -> int:
        return len(self.trees)


@dataclasses.dataclass(eq=False)
class Program:
    """A traced function: `egad.interpret(program, *args)` runs it, `print(program)` shows it."""

    region: Region
    signature: ArgSignature
    out_tree: TreeDef
    name: str = "program"
    loc: SourceLoc = UNKNOWN
    # `retrace(*args)` traces the same function again for other argument shapes (set
    # by egad.trace; None for programs made by transformations such as egad.grad)
    retrace: Any = dataclasses.field(default=None, repr=False)

    @property
    def params(self) -> tuple[Var, ...]:
        return self.region.params

    @property
    def param_types(self) -> list[TensorType]:
        return self.region.param_types

    @property
    def result_types(self) -> list[TensorType]:
        return self.region.result_types

    def __call__(self, *args, **kwargs):
        # JAX users write egad.grad(program)(W) as jax.grad(f)(W): point them to the two ways to run one
        raise ArgumentError(message(f"an egad.Program ({self.name}) is not called directly",
                                    instead="run it with egad.interpret(program, *args), or compile it with "
                                            "egad.optimize(program, wrt=...) and call the result"))

    def __str__(self) -> str:
        from .printer import format_program

        return format_program(self)

    def __repr__(self) -> str:
        params = ", ".join(str(t) for t in self.param_types)
        return f"<egad.Program {self.name}({params}) with {count_bindings(self.region)} bindings>"


def walk_bindings(region: Region):
    """Every binding of `region` and its sub-regions, outer before inner."""
    for binding in region.bindings:
        yield binding
        for sub in binding.regions:
            yield from walk_bindings(sub)


def count_bindings(region: Region) -> int:
    return sum(1 for _ in walk_bindings(region))

"""Region builders: where traced ops are recorded, and how closures are lifted.

Tracing a loop body or a branch opens a child `RegionBuilder`. When the body uses
a value traced in an enclosing region, `resolve` lambda-lifts it: the child gets a
new param for it, recorded in `captures`, and the control op passes the outer
value in as an explicit operand. This keeps every region closed (DESIGN §3).
"""
from __future__ import annotations

import contextlib
import threading

from ..errors import TracerLeakError, message
from ..ir.program import Binding, Region, Var
from ..ir.types import TensorType
from ..source import user_location


class _Stack(threading.local):
    """The regions being traced, innermost last: one stack a thread, so that programs
    traced in several threads at once each record into their own regions."""
    regions: list["RegionBuilder"]

    def __init__(self):
        self.regions = []


_STACK = _Stack()


class RegionBuilder:
    def __init__(self, parent: "RegionBuilder | None", name: str):
        self.parent = parent
        self.name = name
        self.params: list[Var] = []
        self.bindings: list[Binding] = []
        # outer Var uid -> (outer Var, this region's param standing for it)
        self.captures: dict[int, tuple[Var, Var]] = {}
        self.closed = False

    def add_param(self, type: TensorType, hint: str = "") -> Var:
        var = Var(type, hint)
        self.params.append(var)
        return var

    def is_within(self, other: "RegionBuilder") -> bool:
        builder = self
        while builder is not None:
            if builder is other:
                return True
            builder = builder.parent
        return False

    def resolve(self, tracer) -> Var:
        """The Var that stands for `tracer` inside this region (capturing it if outer)."""
        owner = tracer._builder
        if owner is self:
            return tracer._var
        if owner.closed or not self.is_within(owner):
            made = next((b.loc for b in owner.bindings if any(v is tracer._var for v in b.outputs)), None)
            made_at = f" at {made.long()}" if made is not None and made.line else ""
            raise TracerLeakError(message(
                f"a traced value {tracer._var.type} computed in {_region_words(owner)}{made_at} was used outside it",
                where=f"{user_location().long()}",
                instead="return the value from the loop body or branch (as loop state or output) "
                        "instead of storing it in a Python variable or list"))
        outer = self.parent.resolve(tracer)
        if outer.uid not in self.captures:
            self.captures[outer.uid] = (outer, Var(outer.type, outer.hint))
        return self.captures[outer.uid][1]

    def finish(self, results: list[Var], capture_order: list[Var]) -> Region:
        """Close the region; params are its own params then one per captured outer Var
        in `capture_order` (shared by sibling regions, e.g. both branches of an `if`)."""
        params = list(self.params)
        for outer in capture_order:
            if outer.uid in self.captures:
                params.append(self.captures[outer.uid][1])
            else:
                params.append(Var(outer.type, outer.hint))  # a sibling needs it, this region doesn't
        self.closed = True
        return Region(tuple(params), self.bindings, tuple(results), self.name)


def _region_words(builder: RegionBuilder) -> str:
    """How a message names a region: in the user's terms (a `probe` is egad.function's
    trial trace of a loop body or branch, which the user never wrote)."""
    if builder.name == "probe":
        return "a loop body or branch on a traced value"
    if builder.name in ("then", "else") or builder.name.startswith("branch"):
        return f"a branch ({builder.name}) of a traced if or egad.cond"
    if builder.name in ("body", "cond"):
        return f"a traced loop's {'body' if builder.name == 'body' else 'condition'}"
    return f"a {builder.name} region"


def current() -> RegionBuilder | None:
    return _STACK.regions[-1] if _STACK.regions else None


@contextlib.contextmanager
def open_region(name: str, top_level: bool = False, parent: "RegionBuilder | None" = None):
    """Record ops into a new region until the block ends. Its parent (for capturing
    outer values) is the current region unless `parent` is given: reverse-mode AD
    builds an adjoint body whose parent is the forward body it reads residuals from."""
    if parent is None and not top_level:
        parent = current()
        if parent is None:
            raise AssertionError("open_region(top_level=False) outside tracing")
    builder = RegionBuilder(parent, name)
    _STACK.regions.append(builder)
    try:
        yield builder
    finally:
        popped = _STACK.regions.pop()
        assert popped is builder
        builder.closed = True


def capture_order(*builders: RegionBuilder) -> list[Var]:
    """The union of the outer values captured by sibling regions, in first-seen order."""
    seen: dict[int, Var] = {}
    for builder in builders:
        for uid, (outer, _) in builder.captures.items():
            seen.setdefault(uid, outer)
    return list(seen.values())

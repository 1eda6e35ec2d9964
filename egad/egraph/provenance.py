"""Which rule introduced each e-node, and where the user wrote it (DESIGN §5).

Every e-node gets an `Origin`: the `RuleSite` that introduced it (a rule's kebab-case
name and the file:line where the rule is written; `"input"` for nodes inserted from
the program), the order in which it was recorded, and the user's source line and
value names of the IR binding it stands for (kept for the decoded program, reports
and the visualiser).

The table is keyed by e-node written against insertion handles (see enode.py), not
by egglog's e-class ids, which change as rules union classes; `resolve(snapshot)`
re-keys it by the e-nodes of that snapshot. A rule records the nodes it adds the
same way: `provenance.record(node, Origin(site, ...))` with `site = RuleSite.here(name)`
taken where the rule is defined. The first record of a node wins, so a rule that
rebuilds an existing node does not claim it.
"""
from __future__ import annotations

import dataclasses
import os
import sys

from ..source import UNKNOWN, SourceLoc
from .enode import ENode


@dataclasses.dataclass(frozen=True)
class RuleSite:
    name: str  # kebab-case rule name, or "input"
    file: str
    line: int

    @classmethod
    def here(cls, name: str, depth: int = 1) -> "RuleSite":
        """The site of the caller (`depth` frames up): call it where the rule is written."""
        frame = sys._getframe(depth)  # not inspect.stack(), which reads the source of every frame
        return cls(name, frame.f_code.co_filename, frame.f_lineno)

    def __str__(self) -> str:
        return f"{self.name} ({os.path.basename(self.file)}:{self.line})"


@dataclasses.dataclass(frozen=True)
class Origin:
    site: RuleSite
    order: int  # when it was recorded: earlier nodes never depend on later ones at insertion
    loc: SourceLoc = UNKNOWN  # the user's line of the binding the node stands for
    hints: tuple[str, ...] = ()  # names of the binding's outputs, for printing


class Provenance:
    def __init__(self):
        self._origins: dict[ENode, Origin] = {}

    def record(self, node: ENode, site: RuleSite, loc: SourceLoc = UNKNOWN, hints: tuple[str, ...] = ()) -> None:
        if node not in self._origins:
            self._origins[node] = Origin(site, len(self._origins), loc, hints)

    def __len__(self) -> int:
        return len(self._origins)

    def items(self):
        return self._origins.items()

    def origin(self, node: ENode) -> Origin | None:
        """The origin recorded under `node` exactly as it was recorded (handles, nested nodes)."""
        return self._origins.get(node)

    def keys_by_class(self, snapshot) -> dict:
        """For each e-class of the snapshot, the earliest node recorded in it, as recorded:
        a form of the class that survives later rewrites (rules write new nodes over it)."""
        return self.index(snapshot)[1]

    def index(self, snapshot) -> tuple[dict, dict]:
        """`resolve(snapshot)` and `keys_by_class(snapshot)` in one pass."""
        resolved: dict[ENode, Origin] = {}
        keys: dict = {}
        for node, origin in self._origins.items():  # in recording order
            canonical = snapshot.canonical(node)
            if canonical is None:
                continue
            resolved.setdefault(canonical, origin)
            cid = snapshot.index.get(canonical)
            if cid is not None and cid not in keys:
                keys[cid] = node
        return resolved, keys

    def resolve(self, snapshot) -> dict[ENode, Origin]:
        """The origins keyed by the snapshot's own e-nodes (fields as class ids)."""
        resolved: dict[ENode, Origin] = {}
        for node, origin in self._origins.items():
            canonical = snapshot.canonical(node)
            if canonical is not None and canonical not in resolved:
                resolved[canonical] = origin
        return resolved

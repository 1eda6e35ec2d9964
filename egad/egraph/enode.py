"""E-nodes as plain Python values, the common currency of the e-graph layer.

`ENode(head, args)` mirrors one egglog node: `head` is its constructor's egglog name
(`"Op2"`, `"For"`, `"AttrInt"`...), `args` its fields in order. A field is a Python
`int`/`str`/`bool` for primitive fields, a tuple for a `Vec`, and for a field of a
term sort (`Term`, `Attrs`, `Attr`) one of:

- a nested `ENode`, or a `Handle` (an IR binding inserted earlier): how the encoder
  writes a node before it is in the e-graph;
- a `ClassId`: how a `Snapshot` of the e-graph writes it, once the e-graph has
  assigned e-classes.

`Snapshot.resolve` turns the first form into the second, which is how side tables
written at insertion (provenance) find their nodes in an e-graph that rules changed.
"""
from __future__ import annotations

import dataclasses
from typing import Any


# ENodes and ClassIds are dict keys everywhere (snapshots, extraction, rule views): their
# hash is computed once, at creation, not at every lookup (a dataclass hashes its fields
# each time: a third of an extraction's time went to it), and equality tries it first.

@dataclasses.dataclass(frozen=True)
class ENode:
    head: str
    args: tuple[Any, ...] = ()
    _hash: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.head, self.args)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is ENode and self._hash == other._hash and self.head == other.head
                                 and self.args == other.args)

    def __reduce__(self):  # rebuilt, not restored: string hashes differ between processes
        return ENode, (self.head, self.args)

    def __repr__(self) -> str:
        return f"{self.head}({', '.join(map(repr, self.args))})"


@dataclasses.dataclass(frozen=True)
class Handle:
    """The e-class bound to IR binding number `index` at insertion (`Bound(index)`)."""

    index: int

    def __repr__(self) -> str:
        return f"%{self.index}"


@dataclasses.dataclass(frozen=True)
class ClassId:
    """An e-class of sort `sort` in one snapshot; `value` is egglog's id for it."""

    sort: str
    value: Any
    _hash: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.sort, self.value)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is ClassId and self._hash == other._hash and self.value == other.value
                                 and self.sort == other.sort)

    def __reduce__(self):
        return ClassId, (self.sort, self.value)

    def __repr__(self) -> str:
        return f"{self.sort}#{self.value!r}"


def children(node: ENode):
    """The term-sorted fields of `node` (handles, nested nodes or class ids), Vecs flattened."""
    stack = list(reversed(node.args))
    while stack:
        field = stack.pop()
        if isinstance(field, tuple):
            stack.extend(reversed(field))
        elif isinstance(field, (ENode, Handle, ClassId)):
            yield field


def post_order(roots, reads, on_cycle=None) -> list:
    """Every item reachable from `roots` through `reads(item)`, each after everything
    it reads. Iterative, since a loop body can be a chain thousands of nodes long. A
    read of an item still being visited closes a cycle: `on_cycle(item)` is called
    (it may raise) and that read is skipped."""
    order: list = []
    closed: dict = {}  # False: its reads are still being visited
    for root in roots:
        stack = [(root, False)]
        while stack:
            item, expanded = stack.pop()
            if expanded:
                closed[item] = True
                order.append(item)
                continue
            if item in closed:
                continue  # a stale second push: visited already
            closed[item] = False
            stack.append((item, True))
            for child in reversed(list(reads(item))):
                if closed.get(child) is False:
                    if on_cycle is not None:
                        on_cycle(child)
                elif child not in closed:
                    stack.append((child, False))
    return order

"""Copying a loop's body, for the loop transformers that build a whole alternative loop
(rules/batching.py's `batch-weight-gradient`, rules/checkpoint.py's
`stack-taped-residuals`).

A region's body is not a list of bindings in the e-graph: it is the classes that read,
at any depth, an `Arg` of the loop (everything else is read from where it is, since a
body refers directly to outer classes: egad/egraph/encoding.py). `loop_body` walks
those classes from the values the new loop must compute, each through its earliest
recorded node (the one the program was written with, or the first a rule made), and
`copy_body` rebuilds them over the new loop's `Arg`s.
"""
from __future__ import annotations

from egad.egraph.enode import ClassId, ENode, children, post_order
from egad.egraph.placement import CONTROL_HEADS


def loop_body(view, region: int, starts, invariant, leaves=frozenset()):
    """The classes the new loop recomputes: those whose earliest recorded node reads, at
    any depth, an `Arg` of the loop; each with that node, and the loop's Args they read.
    Everything else they read is read from where it is (classes are values: a forward
    loop's ys, tape and all, is the same value in both loops). A class of `leaves` is
    in the body but not walked: the caller gives its node (`copy_body`'s `seeded`).
    None for a body the copy cannot hold: a control node or a tape allocation in it, an
    Arg of a region nested in the loop, a class with no recorded node, a cycle."""
    snapshot, origins = view.snapshot, view.editor.origins
    outer = {0}
    parent = view.encoding.regions[region].parent
    while parent is not None:
        outer.add(parent)
        parent = view.encoding.regions[parent].parent
    earliest: dict[ClassId, ENode | None] = {}

    def node_of(cid: ClassId) -> ENode | None:
        if cid not in earliest:
            recorded = [n for n in snapshot.nodes.get(cid, ()) if n in origins]
            earliest[cid] = min(recorded, key=lambda n: origins[n].order) if recorded else None
        return earliest[cid]

    def term_reads(cid: ClassId) -> list[ClassId]:
        node = node_of(cid)
        if cid in invariant or cid in leaves or node is None:
            return []
        return [c for c in children(node) if c.sort == "Term"]

    cycles: list[ClassId] = []
    order = post_order(starts, term_reads, cycles.append)
    if cycles or any(node_of(cid) is None for cid in order if cid not in invariant and cid not in leaves):
        return None  # a cycle through the earliest nodes, or nothing recorded
    reading: dict[ClassId, bool] = {}  # class -> reads the loop's Args
    for cid in order:
        node = node_of(cid)
        if cid in leaves:
            reading[cid] = True
        elif cid in invariant:
            reading[cid] = False
        elif node.head == "Arg":
            reading[cid] = node == ENode("Arg", (region, node.args[1]))
        else:
            reading[cid] = any(reading[c] for c in children(node) if c.sort == "Term")

    body: dict[ClassId, ENode] = {}
    reads: set[int] = set()
    stack = [c for c in starts if reading[c]]
    while stack:
        cid = stack.pop()
        if cid in body:
            continue
        node = body[cid] = node_of(cid)
        if cid in leaves:
            continue
        if node.head in CONTROL_HEADS or node.head == "NewTape":
            return None
        if node.head == "Arg":
            reads.add(node.args[1])
        for child in children(node):
            if child.sort != "Term":
                continue
            if reading[child]:
                stack.append(child)
            elif node_of(child) is not None and node_of(child).head == "Arg" and node_of(child).args[0] not in outer:
                return None  # an Arg of a region nested in the loop, outside its own region
    return body, reads


def copy_body(body: dict[ClassId, ENode], arg, record, seeded=None) -> dict[ClassId, ENode]:
    """Each body class's node rebuilt over the copies of its inputs, `arg(i)` for `Arg(loop, i)`,
    and `seeded[cid]` as it is for a class of `seeded` (loop_body's leaves); each passed to
    `record(class, copy)` in dependency order (no recursion: a body can be a long chain)."""
    seeded = seeded or {}
    copies: dict[ClassId, ENode] = {}
    for cid in post_order(body, lambda cid: [] if cid in seeded else [c for c in children(body[cid]) if c in body]):
        node = body[cid]
        if cid in seeded:
            copies[cid] = record(cid, seeded[cid])
        elif node.head == "Arg":
            copies[cid] = record(cid, arg(node.args[1]))
        else:
            copies[cid] = record(cid, ENode(node.head, tuple(_substitute(field, copies) for field in node.args)))
    return copies


def _substitute(field, copies):
    if isinstance(field, ClassId):
        return copies.get(field, field)
    if isinstance(field, tuple):
        return tuple(_substitute(item, copies) for item in field)
    return field

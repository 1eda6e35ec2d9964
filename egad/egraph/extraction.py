"""An extraction: one chosen e-node per e-class the program needs.

This is the contract between an extractor and the decoder: `Extraction.choice` maps
each needed `Term` class to its chosen node, `roots` are the program's results. The
cost-based extractor (egad/extract.py, DESIGN §6) will produce the same object.

`extract_inserted` is the trivial extractor: it picks, in every class, the node that
was inserted first (an input node). Inputs were inserted in dependency order, so an
input node's children hold inputs inserted before it, and following first-inserted
nodes can never cycle even after rules have merged classes.

`extract_latest` is its opposite, for judging rules (`egad rules check`, the rule
tests): in every class it prefers the node recorded last, so whatever a rule made is
used wherever it can be, and the decoded program shows what the rule did.
"""
from __future__ import annotations

import dataclasses

from ..errors import EgadError
from .enode import ClassId, ENode, children, post_order
from .language import TERM_HEADS
from .provenance import Origin
from .snapshot import Snapshot


@dataclasses.dataclass
class Extraction:
    roots: tuple[ClassId, ...]
    choice: dict[ClassId, ENode]  # every Term class reachable from the roots


def extract_inserted(snapshot: Snapshot, origins: dict[ENode, Origin], roots) -> Extraction:
    """For each class reachable from `roots` (handles or nodes over handles), its
    earliest-recorded node among those `origins` names (resolved: provenance.resolve)."""
    root_classes = tuple(snapshot.class_of(root) for root in roots)
    choice: dict[ClassId, ENode] = {}
    stack = list(root_classes)
    while stack:
        cid = stack.pop()
        if cid in choice:
            continue
        recorded = [node for node in snapshot.nodes[cid] if node in origins and node.head in TERM_HEADS]
        if not recorded:
            raise EgadError(f"e-class {cid} has no recorded node to extract (nodes: {snapshot.nodes[cid]})")
        node = min(recorded, key=lambda n: origins[n].order)
        choice[cid] = node
        stack.extend(child for child in children(node) if child.sort == "Term" and child not in choice)
    return Extraction(root_classes, choice)


def extract_latest(snapshot: Snapshot, origins: dict[ENode, Origin], roots) -> Extraction:
    """In every class, the most recently recorded node (rule-made nodes come after the
    inputs they rewrite) that closes no cycle and reads no Arg the class did not read
    before (a class can hold a top-level constant and an in-loop `t - t`: only the
    constant may be used outside the loop). Starts from the inserted program (the
    earliest input node of each class; new classes bottom-up), then switches a class
    to a later node while that is allowed, until nothing changes."""
    candidates = {cid: sorted((n for n in members if n in origins and n.head in TERM_HEADS),
                              key=lambda n: origins[n].order, reverse=True)
                  for cid, members in snapshot.nodes.items() if cid.sort == "Term"}
    choice = {}
    for cid, nodes in candidates.items():
        inputs = [n for n in nodes if origins[n].site.name == "input"]
        if inputs:
            choice[cid] = inputs[-1]
    progress = True
    while progress:
        progress = False
        for cid, nodes in candidates.items():
            ready = [n for n in nodes if all(c in choice for c in _term_children(n))]
            if cid not in choice and ready:
                choice[cid] = ready[-1]
                progress = True
    free = {}  # the regions whose Args each class reads as first chosen: never widened
    for cid in post_order(choice, lambda cid: _term_children(choice[cid])):
        free[cid] = _free_regions(choice[cid], free)

    def reaches(start, target) -> bool:
        stack, seen = [start], set()
        while stack:
            cid = stack.pop()
            if cid == target:
                return True
            if cid in seen or cid not in choice:
                continue
            seen.add(cid)
            stack.extend(_term_children(choice[cid]))
        return False

    changed = True
    while changed:
        changed = False
        for cid, nodes in candidates.items():
            for node in nodes:
                if cid not in choice or node == choice[cid]:
                    break
                inputs = _term_children(node)
                if all(c in choice for c in inputs) and _free_regions(node, free) <= free[cid] and \
                        not any(reaches(c, cid) for c in inputs):
                    choice[cid] = node
                    changed = True
                    break
    root_classes = tuple(snapshot.class_of(root) for root in roots)
    needed, stack = {}, list(root_classes)
    while stack:
        cid = stack.pop()
        if cid not in needed:
            needed[cid] = choice[cid]
            stack.extend(_term_children(choice[cid]))
    return Extraction(root_classes, needed)


def _term_children(node: ENode) -> list:
    return [c for c in children(node) if c.sort == "Term"]


def _free_regions(node: ENode, free: dict) -> frozenset:
    if node.head == "Arg":
        return frozenset({node.args[0]}) - {0}
    regions = frozenset().union(*(free.get(c, frozenset()) for c in _term_children(node)))
    return regions - {node.args[0]} if node.head in ("For", "While", "If", "Switch") else regions

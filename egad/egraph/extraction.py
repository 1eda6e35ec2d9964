"""An extraction: one chosen e-node per e-class the program needs.

This is the contract between an extractor and the decoder: `Extraction.choice` maps
each needed `Term` class to its chosen node, `roots` are the program's results. The
cost-based extractor (egad/extract.py, DESIGN §6) will produce the same object.

`extract_inserted` is the trivial extractor: it picks, in every class, the node that
was inserted first (an input node). Inputs were inserted in dependency order, so an
input node's children hold inputs inserted before it, and following first-inserted
nodes can never cycle even after rules have merged classes.
"""
from __future__ import annotations

import dataclasses

from ..errors import EgadError
from .enode import ClassId, ENode, children
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

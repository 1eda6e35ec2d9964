"""A read-only view of an egglog e-graph as plain Python e-nodes.

`Snapshot.of(egraph)` reads every constructor table of egad's language once and
gives, per e-class, its e-nodes (`ENode` with fields decoded: ints, strings, bools,
tuples for `Vec`s, `ClassId` for terms), plus the class bound to each insertion
handle. Extractors and the decoder work on this view only. Tables that are not
part of the language (analyses such as `ShapeOf`, the marks rules leave for
provenance) are not e-nodes; their rows are kept apart in `tables`.

It reads egglog's tables through `EGraph._egraph.freeze()`, the raw form behind
egglog-python's public `EGraph.freeze()` (which re-wraps every value as a Python
expression); this is the one module that touches that internal.
"""
from __future__ import annotations

from collections import defaultdict

from egglog import EGraph

from .enode import ClassId, ENode, Handle
from .language import LANGUAGE_HEADS

_VEC_PREFIX = "egglog.builtins.Vec["


class Snapshot:
    def __init__(self, nodes: dict[ClassId, list[ENode]], handles: dict[int, ClassId],
                 tables: dict[str, list[tuple]] | None = None):
        self.nodes = nodes  # e-class -> its e-nodes, in table order
        self.handles = handles  # insertion handle -> its e-class
        self.tables = tables or {}  # any other table -> its rows, (*inputs, output) with fields decoded
        self.index: dict[ENode, ClassId] = {node: cid for cid, members in nodes.items() for node in members}

    @classmethod
    def of(cls, egraph: EGraph) -> "Snapshot":
        raw = egraph._egraph
        frozen = raw.freeze()
        nodes: dict[ClassId, list[ENode]] = defaultdict(list)
        handles: dict[int, ClassId] = {}
        tables: dict[str, list[tuple]] = {}
        for head, table in frozen.functions.items():
            if table.is_let_binding:
                continue
            if head not in LANGUAGE_HEADS:
                sorts = (*table.input_sorts, table.output_sort)
                tables[head] = [tuple(_field(raw, sort, value) for sort, value in zip(sorts, (*row.inputs, row.output)))
                                for row in table.rows]
                continue
            if head == "Bound":
                for row in table.rows:
                    handles[raw.value_to_i64(row.inputs[0])] = ClassId(table.output_sort, row.output)
                continue
            for row in table.rows:
                args = tuple(_field(raw, sort, value) for sort, value in zip(table.input_sorts, row.inputs))
                nodes[ClassId(table.output_sort, row.output)].append(ENode(head, args))
        return cls(dict(nodes), handles, tables)

    def node_of(self, cid: ClassId) -> ENode:
        """A class's first e-node (attribute classes have exactly one)."""
        return self.nodes[cid][0]

    def class_of(self, field) -> ClassId | None:
        """The e-class of a handle or of a node written over handles; None if absent."""
        if isinstance(field, ClassId):
            return field
        if isinstance(field, Handle):
            return self.handles.get(field.index)
        canonical = self.canonical(field)
        return None if canonical is None else self.index.get(canonical)

    def canonical(self, node: ENode) -> ENode | None:
        """`node` with every term field replaced by its e-class in this snapshot."""
        args = []
        for field in node.args:
            resolved = self._resolve(field)
            if resolved is _MISSING:
                return None
            args.append(resolved)
        return ENode(node.head, tuple(args))

    def _resolve(self, field):
        if isinstance(field, tuple):
            items = tuple(self._resolve(item) for item in field)
            return _MISSING if _MISSING in items else items
        if isinstance(field, (ENode, Handle, ClassId)):
            cid = self.class_of(field)
            return _MISSING if cid is None else cid
        return field


_MISSING = object()


def _field(raw, sort: str, value):
    if sort == "i64":
        return raw.value_to_i64(value)
    if sort == "String":
        return raw.value_to_string(value)
    if sort == "bool":
        return raw.value_to_bool(value)
    if sort.startswith(_VEC_PREFIX):
        element = sort[len(_VEC_PREFIX):-1]
        return tuple(_field(raw, element, item) for item in raw.value_to_vec(value))
    return ClassId(sort.rsplit(".", 1)[-1], value)  # a term sort: "Term", or "egad.egraph.language.Term" in a Vec

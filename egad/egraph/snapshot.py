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
from collections.abc import Mapping

from egglog import EGraph

from .enode import ClassId, ENode, Handle
from .language import LANGUAGE_HEADS

_VEC_PREFIX = "egglog.builtins.Vec["


class Snapshot:
    def __init__(self, nodes: dict[ClassId, list[ENode]], handles: dict[int, ClassId],
                 tables: Mapping[str, list[tuple]] | None = None):
        self.nodes = nodes  # e-class -> its e-nodes, in table order
        self.handles = handles  # insertion handle -> its e-class
        self.tables = tables or {}  # any other table -> its rows, (*inputs, output) with fields decoded
        self.index: dict[ENode, ClassId] = {node: cid for cid, members in nodes.items() for node in members}
        self._classes_of_nodes: dict[ENode, ClassId | None] = {}  # class_of's answers for nodes, memoized
        self.derived: dict = {}  # what readers derive from it, computed once (extract.py's _Shared)

    @classmethod
    def of(cls, egraph: EGraph) -> "Snapshot":
        raw = egraph._egraph
        frozen = raw.freeze()
        nodes: dict[ClassId, list[ENode]] = defaultdict(list)
        handles: dict[int, ClassId] = {}
        others = {}
        decoders: dict[str, object] = {}  # sort -> its field decoder, made once per snapshot
        class_id = _interner()
        for head, table in frozen.functions.items():
            if table.is_let_binding:
                continue
            if head not in LANGUAGE_HEADS:
                others[head] = table
                continue
            if head == "Bound":
                for row in table.rows:
                    handles[raw.value_to_i64(row.inputs[0])] = class_id(table.output_sort, row.output)
                continue
            fields = [_decoder(raw, sort, decoders, class_id) for sort in table.input_sorts]
            sort = table.output_sort
            for row in table.rows:
                args = tuple(decode(value) for decode, value in zip(fields, row.inputs))
                nodes[class_id(sort, row.output)].append(ENode(head, args))
        return cls(dict(nodes), handles, _Tables(raw, others, decoders, class_id))

    def node_of(self, cid: ClassId) -> ENode:
        """A class's first e-node (attribute classes have exactly one)."""
        return self.nodes[cid][0]

    def class_of(self, field) -> ClassId | None:
        """The e-class of a handle or of a node written over handles; None if absent."""
        if isinstance(field, ClassId):
            return field
        if isinstance(field, Handle):
            return self.handles.get(field.index)
        if field not in self._classes_of_nodes:  # attribute nodes recur in most recorded nodes
            canonical = self.canonical(field)
            self._classes_of_nodes[field] = None if canonical is None else self.index.get(canonical)
        return self._classes_of_nodes[field]

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


class _Tables(Mapping):
    """The tables that are not e-nodes, each decoded when first read: most snapshots
    are read for their e-nodes only, and the analysis tables are as long as the e-graph.
    The rows are frozen with the snapshot, but a `Vec` field (the marks of n-ary ops)
    is read from the live e-graph: read such a table before the e-graph changes, as
    `record_marks` does."""

    def __init__(self, raw, tables: dict, decoders: dict, class_id):
        self._raw, self._tables, self._decoders, self._class_id = raw, tables, decoders, class_id
        self._decoded: dict[str, list[tuple]] = {}

    def __getitem__(self, head: str) -> list[tuple]:
        if head not in self._decoded:
            table = self._tables[head]
            fields = [_decoder(self._raw, sort, self._decoders, self._class_id)
                      for sort in (*table.input_sorts, table.output_sort)]
            self._decoded[head] = [tuple(decode(value) for decode, value in zip(fields, (*row.inputs, row.output)))
                                   for row in table.rows]
        return self._decoded[head]

    def __iter__(self):
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)


def _interner():
    """`class_id(sort, value)`: one ClassId object per e-class in a snapshot, so that the
    dict lookups and tuple comparisons of extraction and rule views stop at identity
    (`is`) instead of calling ClassId.__eq__ (~600,000 calls in GNMT's optimization)."""
    interned: dict[tuple, ClassId] = {}

    def class_id(sort: str, value) -> ClassId:
        cid = interned.get((sort, value))
        if cid is None:
            cid = interned[(sort, value)] = ClassId(sort, value)
        return cid

    return class_id


def _decoder(raw, sort: str, decoders: dict, class_id):
    """The function that decodes a field of `sort` (see the module docstring), cached in `decoders`."""
    if sort not in decoders:
        if sort == "i64":
            decoders[sort] = raw.value_to_i64
        elif sort == "String":
            decoders[sort] = raw.value_to_string
        elif sort == "bool":
            decoders[sort] = raw.value_to_bool
        elif sort.startswith(_VEC_PREFIX):
            item = _decoder(raw, sort[len(_VEC_PREFIX):-1], decoders, class_id)
            decoders[sort] = lambda value: tuple(item(v) for v in raw.value_to_vec(value))
        else:  # a term sort: "Term", or "egad.egraph.language.Term" in a Vec
            name = sort.rsplit(".", 1)[-1]
            decoders[sort] = lambda value: class_id(name, value)
    return decoders[sort]

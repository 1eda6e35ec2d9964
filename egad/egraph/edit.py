"""Changing an e-graph from Python: facts, new nodes and unions, each with its origin.

Analyses (analysis.py), the marks rules leave (marks.py) and loop transformers
(rules/) address e-classes of a `Snapshot`, whose class ids do not survive the next
rewrite. So every class is written in a *stable form*: the insertion handle bound to
it (`Bound(h)`), or else the earliest node recorded in it, written over stable forms
(provenance.py keys nodes the same way). A new node gets a fresh handle of its own
(appended to `Encoding.bound`), so every stable form is one node over handles, as
inserted nodes are (A-normal form): a chain of new nodes never nests. Each new node
is recorded in the provenance under its stable form, so `Provenance.resolve` finds it
in any later snapshot. Commands go to egglog's low-level bindings in one
`run_program` call per `flush()`, like insertion.py.
"""
from __future__ import annotations

import os
import tempfile

from egglog import EGraph, bindings

from .enode import ClassId, ENode, Handle
from .insertion import _SPAN, _expr, _int
from .provenance import Provenance, RuleSite
from .snapshot import Snapshot


class Editor:
    """Stable forms of one snapshot's classes, and a queue of commands against them."""

    def __init__(self, egraph: EGraph, snapshot: Snapshot, provenance: Provenance, bound: list | None = None):
        self.egraph = egraph
        self.snapshot = snapshot
        self.provenance = provenance
        self.bound = bound  # the encoding's node per handle: a new node gets a handle of its own
        self.origins, self.keys = provenance.index(snapshot)  # resolved origins; class -> stable form
        for handle, cid in sorted(snapshot.handles.items(), reverse=True):
            self.keys[cid] = Handle(handle)  # the shortest form; the lowest handle wins
        self._commands: list = []
        self._files: list[str] = []  # row files the queued `input` commands read
        # id(new node) -> (node, the node as recorded, the stable form of its class)
        self._recorded: dict[int, tuple[ENode, ENode, object]] = {}

    # --- stable forms ------------------------------------------------------------

    def form(self, field):
        """The stable form of a snapshot field: a term class, an attribute class or node, a
        Vec, or a primitive (returned as is). Raises KeyError for a term class with no
        recorded node yet. New term nodes get theirs from `record`."""
        if isinstance(field, ClassId):
            if field.sort == "Term":
                return self.keys[field]
            node = self.snapshot.node_of(field)  # attributes are hash-consed: one node per class
            return ENode(node.head, tuple(self.form(arg) for arg in node.args))
        if isinstance(field, ENode):
            return ENode(field.head, tuple(self.form(arg) for arg in field.args))
        if isinstance(field, tuple):
            return tuple(self.form(item) for item in field)
        return field

    def expression(self, field):
        """The egglog expression of a field, for a low-level command."""
        return _expr(self.form(field))

    def class_origin(self, cid: ClassId):
        """The origin of the earliest node recorded in a class (None for a new class)."""
        recorded = [self.origins[n] for n in self.snapshot.nodes.get(cid, ()) if n in self.origins]
        return min(recorded, key=lambda origin: origin.order) if recorded else None

    # --- changes -------------------------------------------------------------------

    def record(self, node: ENode, site: RuleSite, like: ClassId | None = None):
        """Record `node` (fields: class ids, primitives, or new term nodes, recorded too)
        as introduced by `site`; it takes the user's line and names of the earliest node
        of `like`, the class it joins. Returns the stable form of its class: with `bound`,
        a fresh handle bound to it, so stable forms stay one node deep however long a
        chain of new nodes is (a DAG written as nested forms would grow exponentially).
        A node object met twice is recorded once."""
        origin = self.class_origin(like) if like is not None else None
        return self._record(node, site, origin)

    def _record(self, node: ENode, site: RuleSite, origin):
        if id(node) in self._recorded:
            return self._recorded[id(node)][2]
        stable = ENode(node.head, tuple(self._new_field(arg, site) for arg in node.args))
        self.provenance.record(stable, site, *((origin.loc, origin.hints) if origin is not None else ()))
        result = stable
        if self.bound is not None:
            result = Handle(len(self.bound))
            self.bound.append(stable)
            self._commands.append(bindings.ActionCommand(bindings.Set(_SPAN, "Bound", [_int(result.index)],
                                                                      _expr(stable))))
        self._recorded[id(node)] = (node, stable, result)
        return result

    def _new_field(self, field, site: RuleSite):
        if isinstance(field, ENode) and not _is_attribute(field):
            return self._record(field, site, None)
        if isinstance(field, tuple):
            return tuple(self._new_field(item, site) for item in field)
        return self.form(field)

    def handle(self, cid: ClassId) -> Handle:
        """The insertion handle of a term class. A class whose stable form is a node (an
        `Arg`, a `Get`) gets a fresh handle bound to it (queued), so that facts about it
        can be written as rows over handles (`load_rows`)."""
        key = self.keys[cid]
        if isinstance(key, Handle):
            return key
        if self.bound is None:
            raise ValueError("an Editor made without the encoding's `bound` list cannot add handles")
        handle = Handle(len(self.bound))
        self.bound.append(key)
        self._commands.append(bindings.ActionCommand(bindings.Set(_SPAN, "Bound", [_int(handle.index)], _expr(key))))
        self.keys[cid] = handle
        return handle

    def settle(self) -> None:
        """After a flush that only bound handles to nodes of this snapshot (the marks'
        records, egraph/marks.py, add no node: a class keeps its id), make what was
        recorded visible as a new snapshot and editor would: the nodes' origins, and a
        handle as the stable form of a class that had none."""
        for node, stable, result in self._recorded.values():
            canonical = self.snapshot.canonical(node)
            cid = self.snapshot.index.get(canonical) if canonical is not None else None
            if cid is None:
                continue
            self.origins.setdefault(canonical, self.provenance.origin(stable))
            if isinstance(result, Handle) and not isinstance(self.keys.get(cid), Handle):
                self.keys[cid] = result

    def union(self, cid: ClassId, node: ENode | ClassId | Handle, site: RuleSite) -> None:
        """Queue: the class `cid` also holds `node` (fields as for `record`), introduced by
        `site`; or, for a class id or the handle `record` returned for a node, the two
        classes are one."""
        if isinstance(node, Handle):
            stable = node
        else:
            stable = self.form(node) if isinstance(node, ClassId) else self.record(node, site, like=cid)
        self._commands.append(bindings.ActionCommand(bindings.Union(_SPAN, _expr(self.keys[cid]), _expr(stable))))

    def set_value(self, function: str, key: ClassId | int | str, value) -> None:
        """Queue `(set (function <key>) value)`; key: a class or a primitive; value: an int,
        str or an attribute node."""
        argument = _expr(self.keys[key]) if isinstance(key, ClassId) else _expr(key)
        self._commands.append(bindings.ActionCommand(bindings.Set(_SPAN, function, [argument], _expr(value))))

    def load_rows(self, relation: str, rows: list[tuple[int | str, ...]]) -> None:
        """Queue rows of a relation over i64 and String columns as one `(input relation
        file)`: egglog reads thousands of rows from a file in milliseconds, where a command
        a row costs about 0.1 ms each (the analyses write thousands of facts a round)."""
        if not rows:
            return
        lines = []
        for row in rows:
            fields = [str(field) for field in row]
            if any("\t" in field or "\n" in field for field in fields):
                raise ValueError(f"a row of {relation} holds a tab or a newline: {row!r}")
            lines.append("\t".join(fields) + "\n")
        descriptor, path = tempfile.mkstemp(prefix="egad-rows-", suffix=".tsv")
        self._files.append(path)
        with os.fdopen(descriptor, "w") as file:
            file.writelines(lines)
        self._commands.append(bindings.Input(_SPAN, relation, path))

    def flush(self) -> int:
        """Send the queued commands; returns how many there were."""
        commands, self._commands = self._commands, []
        files, self._files = self._files, []
        try:
            if commands:
                self.egraph._egraph.run_program(*commands)
        finally:
            for path in files:
                os.remove(path)
        return len(commands)


def _is_attribute(node: ENode) -> bool:
    return node.head.startswith("Attr") or node.head in ("NoAttrs", "WithAttr")

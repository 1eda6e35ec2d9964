"""Changing an e-graph from Python: facts, new nodes and unions, each with its origin.

Analyses (analysis.py) write facts and loop transformers (rules/) add whole nodes;
both address e-classes of a `Snapshot`, whose class ids do not survive the next
rewrite. So every class is written in a *stable form*: the insertion handle bound
to it (`Bound(h)`), or else the earliest node recorded in it, itself written over
stable forms (provenance.py keys nodes the same way). A new node is recorded in the
provenance under its stable form, so `Provenance.resolve` finds it in any later
snapshot. Commands go to egglog's low-level bindings in one `run_program` call per
`flush()`, like insertion.py.
"""
from __future__ import annotations

from egglog import EGraph, bindings

from .enode import ClassId, ENode, Handle
from .insertion import _SPAN, _expr, _int
from .provenance import Provenance, RuleSite
from .snapshot import Snapshot


class Editor:
    """Stable forms of one snapshot's classes, and a queue of commands against them."""

    def __init__(self, egraph: EGraph, snapshot: Snapshot, provenance: Provenance):
        self.egraph = egraph
        self.snapshot = snapshot
        self.provenance = provenance
        self.origins, self.keys = provenance.index(snapshot)  # resolved origins; class -> stable form
        for handle, cid in sorted(snapshot.handles.items(), reverse=True):
            self.keys[cid] = Handle(handle)  # the shortest form; the lowest handle wins
        self._commands: list = []

    # --- stable forms ------------------------------------------------------------

    def form(self, field):
        """The stable form of a snapshot field: a term class, an attribute class, a Vec,
        a nested node written over either, or a primitive (returned as is).
        Raises KeyError for a term class with no recorded node yet."""
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

    # --- changes -------------------------------------------------------------------

    def record(self, node: ENode, site: RuleSite, like: ClassId | None = None) -> ENode:
        """Record `node` (snapshot form: fields may be class ids, nested nodes are recorded
        too) as introduced by `site`; it takes the user's line and names of the earliest
        node of `like`, the class it joins. Returns its stable form."""
        stable = self.form(node)
        origin = self.provenance.origin(self.keys[like]) if like is not None and like in self.keys else None
        for nested in _term_nodes(stable):
            self.provenance.record(nested, site, *((origin.loc, origin.hints) if origin and nested is stable else ()))
        return stable

    def union(self, cid: ClassId, node: ENode, site: RuleSite) -> None:
        """Queue: the class `cid` also holds `node` (snapshot form), introduced by `site`."""
        stable = self.record(node, site, like=cid)
        self._commands.append(bindings.ActionCommand(bindings.Union(_SPAN, _expr(self.keys[cid]), _expr(stable))))

    def set_value(self, function: str, cid: ClassId, value) -> None:
        """Queue `(set (function <cid>) value)`; value: an int, str or an attribute node."""
        self._commands.append(bindings.ActionCommand(bindings.Set(_SPAN, function, [_expr(self.keys[cid])],
                                                                  _expr(value))))

    def assert_fact(self, relation: str, cid: ClassId, *values: int) -> None:
        """Queue `(relation <cid> values...)`."""
        call = bindings.Call(_SPAN, relation, [_expr(self.keys[cid]), *(_int(v) for v in values)])
        self._commands.append(bindings.ActionCommand(bindings.Expr_(_SPAN, call)))

    def flush(self) -> int:
        """Send the queued commands; returns how many there were."""
        commands, self._commands = self._commands, []
        if commands:
            self.egraph._egraph.run_program(*commands)
        return len(commands)


def _term_nodes(form):
    """The Term nodes of a stable form, innermost first (handles and attributes skipped)."""
    if isinstance(form, ENode):
        if form.head.startswith("Attr") or form.head in ("NoAttrs", "WithAttr"):
            return
        for arg in form.args:
            yield from _term_nodes(arg)
        yield form
    elif isinstance(form, tuple):
        for item in form:
            yield from _term_nodes(item)

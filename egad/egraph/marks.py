"""Which rule made which e-node: marks that rules leave in the e-graph (DESIGN §5).

egglog keeps no record of which rule built a node, and an e-class is the wrong key
(the node a rewrite adds joins the class of the term it rewrote, inputs and all). So
every rule also asserts a *mark* for each node its right-hand side builds: a row
`MadeOp2(site, name, attrs, a, b)` holds the same fields as the node `Op2(name,
attrs, a, b)`, and egglog keeps the two in step as classes merge. After a run,
`record_marks` reads the rows, finds each marked node in the snapshot and records it
in the provenance with the rule's `RuleSite`, unless the node was recorded before
(the first record wins: a rule that rebuilds an input node does not claim it).

`marks(site_id, expr)` builds the mark actions for a right-hand side; rules/registry.py
adds them to every rule, so rule authors never write them.
"""
from __future__ import annotations

from collections import Counter

from egglog import String, Vec, get_callable_args, get_callable_fn, i64, relation

from .edit import Editor
from .enode import ENode
from .language import Attr, Attrs, Term
from .provenance import RuleSite

made_op0 = relation("MadeOp0", i64, String, Attrs, egg_fn="MadeOp0")
made_op1 = relation("MadeOp1", i64, String, Attrs, Term, egg_fn="MadeOp1")
made_op2 = relation("MadeOp2", i64, String, Attrs, Term, Term, egg_fn="MadeOp2")
made_op3 = relation("MadeOp3", i64, String, Attrs, Term, Term, Term, egg_fn="MadeOp3")
made_opn = relation("MadeOpN", i64, String, Attrs, Vec[Term], egg_fn="MadeOpN")
made_scalar = relation("MadeScalar", i64, String, i64, egg_fn="MadeScalar")
made_splat = relation("MadeSplat", i64, String, i64, Attr, egg_fn="MadeSplat")

# constructor a rule may build -> (its egglog name, the relation that marks it)
_MARKED = {
    Term.op0: ("Op0", made_op0), Term.op1: ("Op1", made_op1), Term.op2: ("Op2", made_op2),
    Term.op3: ("Op3", made_op3), Term.opn: ("OpN", made_opn), Term.scalar: ("Scalar", made_scalar),
    Term.splat: ("Splat", made_splat),
}
MARK_TABLES = {relation_name: head for head, relation_name in
               (("Op0", "MadeOp0"), ("Op1", "MadeOp1"), ("Op2", "MadeOp2"), ("Op3", "MadeOp3"),
                ("OpN", "MadeOpN"), ("Scalar", "MadeScalar"), ("Splat", "MadeSplat"))}


def marks(site_id: int, expr) -> list:
    """Mark actions for every node `expr` (a rule's right-hand side) builds."""
    actions = []
    stack = [expr]
    while stack:
        current = stack.pop()
        try:
            fn, args = get_callable_fn(current), get_callable_args(current)
        except TypeError:
            continue  # a literal
        if fn is None or args is None:
            continue  # a variable
        for constructor, (_, mark) in _MARKED.items():
            if fn == constructor:
                actions.append(mark(i64(site_id), *args))
                break
        stack.extend(arg for arg in args if not isinstance(arg, (int, str)))
    return actions


def record_marks(editor: Editor, sites: dict[int, RuleSite]) -> Counter:
    """Record every marked node not recorded yet under its rule's site; returns the
    number of nodes recorded per site id. A node over a class that has no stable form
    yet (made in the same run) waits until that class has one."""
    snapshot = editor.snapshot
    resolved = set(editor.origins)
    pending = []
    for table, head in MARK_TABLES.items():
        for row in snapshot.tables.get(table, ()):
            site_id, fields = row[0], row[1:-1]  # the last field is the relation's unit output
            node = ENode(head, tuple(fields))
            if node not in resolved and site_id in sites:
                pending.append((site_id, node))
    pending.sort(key=lambda item: item[0])
    recorded: Counter = Counter()
    while pending:
        waiting = []
        for site_id, node in pending:
            if node in resolved:
                continue
            cid = snapshot.index.get(node)
            try:
                stable = editor.record(node, sites[site_id], like=cid)
            except KeyError:
                waiting.append((site_id, node))
                continue
            resolved.add(node)
            recorded[site_id] += 1
            if cid is not None:
                editor.keys.setdefault(cid, stable)  # later nodes over this new class are written over it
        if len(waiting) == len(pending):
            break  # nodes over classes no recorded node reaches (a cycle of new classes)
        pending = waiting
    return recorded

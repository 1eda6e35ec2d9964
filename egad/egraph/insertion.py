"""Insert e-nodes into an egglog e-graph, one command per IR binding (A-normal form).

Each binding becomes `(set (Bound h) node)`, its node referring to its inputs by
handle, so no inserted term is more than a couple of levels deep (egglog-python's
expression conversion recurses and fails near 250 levels). The commands are built
with egglog's low-level bindings and sent in one `run_program` call: building them
through egglog-python's expression layer costs about 1 ms a node, mostly Python
type checks; this path costs about a fifth of that (DESIGN §5 measured 0.4-0.5 ms).
"""
from __future__ import annotations

from egglog import EGraph
from egglog import bindings

from .enode import ENode, Handle
from .language import LANGUAGE

_SPAN = bindings.RustSpan(__file__, 0, 0)


def new_egraph() -> EGraph:
    """An e-graph with egad's language declared (so low-level commands can name it)."""
    egraph = EGraph()
    for callable_ in LANGUAGE:
        egraph._callable_to_egg(callable_)  # declares the function in egglog, once
    return egraph


def insert(egraph: EGraph, bound: list[tuple[int, ENode]]) -> None:
    """`(set (Bound h) node)` for each (handle, node), in order."""
    commands = [bindings.ActionCommand(bindings.Set(_SPAN, "Bound", [_int(h)], _expr(node))) for h, node in bound]
    if commands:
        egraph._egraph.run_program(*commands)


def _int(value: int):
    return bindings.Lit(_SPAN, bindings.Int(value))


def _expr(field):
    if isinstance(field, Handle):
        return bindings.Call(_SPAN, "Bound", [_int(field.index)])
    if isinstance(field, ENode):
        return bindings.Call(_SPAN, field.head, [_expr(arg) for arg in field.args])
    if isinstance(field, tuple):
        return bindings.Call(_SPAN, "vec-of", [_expr(item) for item in field]) if field else \
            bindings.Call(_SPAN, "vec-empty", [])
    if isinstance(field, bool):
        return bindings.Lit(_SPAN, bindings.Bool(field))
    if isinstance(field, int):
        return _int(field)
    if isinstance(field, str):
        return bindings.Lit(_SPAN, bindings.String(field))
    raise TypeError(f"cannot insert field {field!r}")

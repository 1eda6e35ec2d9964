"""unroll: a short loop with a known trip count, as its body written out n times.

A compiled loop pays its driver and a dispatch per step for every kernel of its body;
for a loop of a few steps with a small body that costs more than the work. The
alternative here is the full unrolling: the body's classes copied once per step, the
counter a constant, the state of step m the results of step m - 1, and the stacked
outputs (`ys`) one `concat` of the steps' values in counter order (as `for` stacks
them, `ys[i - lo]`, reversed loops included). The copies are unioned with the loop's
outputs; the cost model picks one or the other.

Assumes: `lo` and `hi` are int constants with `hi - lo` between 1 and `MAX_TRIPS`;
the body (the classes that read the loop's Args, each copied through its earliest
recorded node) holds no tape op and no control node, so running both the loop and a
copy (an extraction that takes some outputs from each) only repeats pure work; ys
have static shapes; body classes times trips stay under `MAX_COPIES`. A loop whose
results are all invariant in it has no body to write out and is left alone: its
result unioned with a class its own body reads was a cycle no extraction could cut.
Unroll-by-k with a remainder loop (a new region) is not written yet.
"""
from __future__ import annotations

from egad.egraph.attrs import attrs_node
from egad.egraph.enode import ClassId, ENode, children
from egad.egraph.placement import CONTROL_HEADS, is_effect
from egad.ir.types import TensorType

from .loop_body import copy_recorder
from .patterns import int_constant
from .registry import family

UNROLL = family("unroll", __doc__)

MAX_TRIPS = 8
MAX_COPIES = 160  # body classes x trips: copies nest step by step, and stable forms nest with them


@UNROLL.transformer("unroll-short-loop", "a for loop of at most 8 known trips, tape-free and flat, is its body "
                                         "written out: no loop driver, no per-step dispatch of each kernel")
def unroll_short_loops(view) -> int:
    snapshot = view.snapshot
    outputs = view.outputs()  # loop class -> {output index: its Get class}
    unrolled = 0
    for cid, members in snapshot.nodes.items():
        for node in members:
            if node.head == "For" and _not_yet_unrolled(view, outputs.get(cid, {})) and \
                    _unroll(view, node, outputs.get(cid, {})):
                unrolled += 1
    return unrolled


def _not_yet_unrolled(view, gets: dict[int, ClassId]) -> bool:
    origins = view.editor.origins
    return not any(origins.get(n) is not None and origins[n].site == view.site
                   for get in gets.values() for n in view.snapshot.nodes[get])


def _unroll(view, loop: ENode, gets: dict[int, ClassId]) -> bool:
    region, lo, hi, inits, results, attrs_class = loop.args
    lo_value, hi_value = int_constant(view, lo), int_constant(view, hi)
    if lo_value is None or hi_value is None or not 0 < hi_value - lo_value <= MAX_TRIPS or not gets:
        return False
    invariant = view.facts.invariant.get(region, set())
    origins = view.editor.origins
    body: dict[ClassId, ENode] = {}  # each body class -> the node copied for it
    stack = [c for c in results if c not in invariant]
    while stack:
        cid = stack.pop()
        if cid in body or cid in invariant:
            continue
        recorded = [n for n in view.snapshot.nodes[cid] if n in origins]
        if not recorded:
            return False
        node = min(recorded, key=lambda n: origins[n].order)
        if is_effect(node) or node.head in CONTROL_HEADS or (node.head == "Arg" and node.args[0] != region):
            return False
        body[cid] = node
        stack.extend(c for c in children(node) if c.sort == "Term")
    if not body or len(body) * (hi_value - lo_value) > MAX_COPIES:
        return False
    n_state = len(inits)
    ys_types = [view.types.get(c) for c in results[n_state:]]
    if any(not isinstance(t, TensorType) or not t.is_static for t in ys_types):
        return False

    record = copy_recorder(view)  # each copy keeps the user's line of the body node it copies
    state = list(inits)
    steps = [[] for _ in ys_types]  # per ys: (counter, value) of each step
    counters = range(hi_value - 1, lo_value - 1, -1) if view.attrs(attrs_class).get("reverse") else \
        range(lo_value, hi_value)
    for counter in counters:
        copies: dict[ClassId, object] = {}

        def copy(cid: ClassId):
            if cid not in body:
                return cid
            if cid not in copies:
                node = body[cid]
                if node.head == "Arg":
                    copies[cid] = record(cid, ENode("Scalar", ("int64", counter))) if node.args[1] == 0 \
                        else state[node.args[1] - 1]
                else:
                    copied = ENode(node.head, tuple(_substitute(arg, copy) for arg in node.args))
                    copies[cid] = record(cid, copied, node)
            return copies[cid]

        new_state = [copy(c) for c in results[:n_state]]
        for k, c in enumerate(results[n_state:]):
            steps[k].append((counter, copy(c)))
        state = new_state
    for k, value in enumerate(state):
        if k in gets:
            view.union(gets[k], value)
    constants = view.encoding.constants
    for k, (type_, values) in enumerate(zip(ys_types, steps)):
        if n_state + k not in gets:
            continue
        rows = [ENode("Op1", ("reshape", attrs_node({"shape": (1, *type_.shape)}, constants), value))
                for _, value in sorted(values, key=lambda item: item[0])]
        stacked = rows[0] if len(rows) == 1 else ENode(
            {2: "Op2", 3: "Op3"}.get(len(rows), "OpN"),
            ("concat", attrs_node({"axis": 0}, constants), *(rows if len(rows) <= 3 else [tuple(rows)])))
        view.union(gets[n_state + k], stacked)
    return True


def _substitute(field, copy):
    if isinstance(field, ClassId):
        return copy(field) if field.sort == "Term" else field
    if isinstance(field, tuple):
        return tuple(_substitute(item, copy) for item in field)
    return field

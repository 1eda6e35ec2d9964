"""checkpoint: how a forward loop keeps the residuals its reverse loop reads (DESIGN §5).

AD writes every residual a reverse loop reads onto a tape: pushed once per trip by the
forward loop, popped once per trip by the reverse loop, in the opposite order. This
family adds alternatives for how those residuals are kept, weighed by the cost model
against each other and against the other families' rewrites:

    stack-taped-residuals   store as stacked rows: the forward loop stacks each pushed
                            value as an output (ys) and the reverse loop reads row i of
                            it (`take(V, i)`) where it popped. The same bytes, a
                            stacked put instead of a push, and the residuals become
                            rows of an invariant table, which batching reads in place
                            (a per-step value the reverse loop only popped to stack it
                            again is that table itself).

Assumes (`stack-taped-residuals`): a forward `for` loop F from the constant 0 with its
`trip_dim` set, every tape state of which starts as `NewTape` and gains exactly one
`tape_push(Arg, v)` per trip; a reverse `for` loop R over the same bound classes, run
in the opposite direction, every tape state of which starts as one of F's final tapes
(each at most once) and loses exactly one `tape_pop` per trip. Then R's trip at
counter i pops what F's trip at counter i pushed, and F stacks that trip's values at
row i - lo = i (docs/ir.md), so the pop is `take(V, i)`: bit-identical. Neither body
holds a control node (rules/loop_body.py copies straight-line bodies). A forward
loop's stacked copy F' is made once and shared by every reverse loop that pops F's
tapes (`batch-weight-gradient` makes a second one); both copies' regions record what
they copy (`RegionInfo.copied_from`), so a later round finds them.

Memory is unchanged by this rule (rows or tape, every residual is held). The
`GradLoop` policies that hold fewer are written today outside the e-graph:
`egad.optimize(..., memory_budget=bytes)` plans one policy per top-level `for` loop
with a static trip count and per top-level `while` loop (egad/ad/checkpoint.py:
store-all where the budget allows, else every-k checkpointing with the k that fits,
nested over as many levels as the budget needs; a `while` loop's k is planned for the
trips it runs on the example inputs) and differentiates the segmented program, whose
adjoint recomputes each segment's residuals from its checkpointed state; the e-graph
then optimizes that gradient.

Still to do, and why it would live here: those policies as whole-loop alternatives in
the e-graph, so that the cost model weighs recomputation against the other rewrites;
binomial Revolve(s) when the trip count is known before the loop, and online
(Stumm-Walther) policies that bound a `while` loop's checkpoints for any T.
"""
from __future__ import annotations

import dataclasses

from egad.egraph.attrs import attrs_node
from egad.egraph.encoding import RegionInfo
from egad.egraph.enode import ClassId, ENode
from egad.ir.types import TapeType

from .loop_body import copy_body, loop_body
from .patterns import int_constant
from .registry import family

CHECKPOINT = family("checkpoint", __doc__, todo="every-k, Revolve and online policies as e-graph alternatives "
                    "(every-k, for and while, runs outside the e-graph: egad/ad/checkpoint.py, memory_budget=)")

STACK = "stack-taped-residuals"


@dataclasses.dataclass
class _Forward:
    """A forward loop whose tapes can be stacked rows: F's class and node, and per tape
    state k the value pushed each trip."""

    cid: ClassId
    node: ENode
    pushed: dict[int, ClassId]
    rows: dict[int, object] | None = None  # tape state k -> its stacked rows (a class, or F''s new Get)


@CHECKPOINT.transformer(STACK, "a forward loop's tape pushes as stacked outputs, its reverse loop's pops as rows "
                               "of them: the same bytes, a stacked put instead of a push, and residuals that "
                               "batching reads as rows of an invariant")
def stack_taped_residuals(view) -> int:
    snapshot, encoding = view.snapshot, view.encoding
    loops = {node.args[0]: (cid, node) for cid, members in snapshot.nodes.items()
             for node in members if node.head == "For"}
    copied = {info.copied_from[1]: region for region, info in encoding.regions.items()
              if info.copied_from is not None and info.copied_from[0] == STACK}
    forwards: dict[ClassId, tuple[_Forward, int]] = {}  # a forward loop's final tape -> (the loop, tape state)
    for region, (cid, node) in loops.items():
        forward = _forward(view, cid, node)
        if forward is not None:
            for k in forward.pushed:
                tape = snapshot.index.get(ENode("Get", (cid, k)))
                if tape is not None:
                    forwards[tape] = (forward, k)
    outputs = view.outputs()
    stacked = 0
    for region, (cid, node) in sorted(loops.items()):
        if region in copied:
            continue  # copied in an earlier round
        found = _pops(view, node, forwards)
        if found is None:
            continue
        forward, pops = found
        if forward.rows is None and not _stack_forward(view, forward, outputs, loops.get(copied.get(
                forward.node.args[0]))):
            continue
        if _read_rows(view, cid, node, pops, forward, outputs):
            stacked += 1
    return stacked


def _forward(view, cid: ClassId, node: ENode) -> _Forward | None:
    """F when it is a forward loop whose every tape gains one push a trip (module docstring)."""
    region, lo, _, inits, results, attrs_class = node.args
    if view.attrs(attrs_class).get("trip_dim") is None or int_constant(view, lo) != 0:
        return None
    pushed = {}
    for k, init in enumerate(inits):
        if not isinstance(view.types.get(init), TapeType):
            continue
        arg = view.snapshot.index.get(ENode("Arg", (region, 1 + k)))
        if not any(n.head == "NewTape" for n in view.snapshot.nodes[init]):
            return None
        value = next((n.args[3] for n in view.snapshot.nodes[results[k]]
                      if n.head == "Op2" and n.args[0] == "tape_push" and n.args[2] == arg), None)
        if value is None:
            return None
        pushed[k] = value
    return _Forward(cid, node, pushed) if pushed else None


def _pops(view, node: ENode, forwards):
    """(F, {tape state j: (the class of the value popped from it each trip or None when
    nothing reads it, F's tape state)}) when `node` is a reverse loop that pops one forward
    loop F's tapes, once a trip each, over the same bounds in the opposite direction; else None."""
    snapshot = view.snapshot
    region, lo, hi, inits, results, attrs_class = node.args
    pops: dict[int, tuple[ClassId | None, int]] = {}
    forward = None
    for j, init in enumerate(inits):
        if not isinstance(view.types.get(init), TapeType):
            continue
        if init not in forwards or (forward is not None and forwards[init][0] is not forward):
            return None
        forward = forwards[init][0]
        arg = snapshot.index.get(ENode("Arg", (region, 1 + j)))
        pop = next((g.args[0] for g in snapshot.nodes[results[j]] if g.head == "Get" and g.args[1] == 1
                    and any(p.head == "Op1" and p.args[0] == "tape_pop" and p.args[2] == arg
                            for p in snapshot.nodes[g.args[0]])), None)
        if pop is None:
            return None
        pops[j] = (snapshot.index.get(ENode("Get", (pop, 0))), forwards[init][1])
    if forward is None:
        return None
    popped_tapes = [k for _, k in pops.values()]
    _, f_lo, f_hi, _, _, f_attrs = forward.node.args
    f_reverse = bool(view.attrs(f_attrs).get("reverse"))
    if len(set(popped_tapes)) != len(popped_tapes) or (lo, hi) != (f_lo, f_hi) \
            or bool(view.attrs(attrs_class).get("reverse")) == f_reverse:
        return None
    return forward, pops


def _new_region(view, region: int) -> int:
    encoding = view.encoding
    new_region = max(encoding.regions) + 1
    info = encoding.regions[region]
    encoding.regions[new_region] = RegionInfo(info.op, info.names, info.parent, copied_from=(STACK, region))
    return new_region


def _recorder(view):
    def record(cid: ClassId, node: ENode):  # a copy keeps the old node's source line and names
        return view.editor.record(node, view.site, like=cid)

    return record


def _stack_forward(view, forward: _Forward, outputs, existing) -> bool:
    """F' (F without its tapes, stacking each pushed value), or the one an earlier round
    made (`existing`: its class and node); F's other outputs are unioned with F''s. Sets
    `forward.rows`; False when F's body cannot be copied."""
    region, lo, hi, inits, results, attrs_class = forward.node.args
    n_state = len(inits)
    kept = [k for k in range(n_state) if k not in forward.pushed]
    ys = list(results[n_state:])
    first_row = len(kept) + len(ys)
    if existing is not None:
        loop_class = existing[0]
        forward.rows = {k: view.snapshot.index.get(ENode("Get", (loop_class, first_row + t)))
                        or ENode("Get", (loop_class, first_row + t)) for t, k in enumerate(forward.pushed)}
        return True
    invariant = view.facts.invariant.get(region, set())
    starts = [results[k] for k in kept] + ys + list(forward.pushed.values())
    walked = loop_body(view, region, starts, invariant)
    if walked is None or walked[1] & {1 + k for k in forward.pushed}:
        return False  # a kept or pushed value that reads a tape
    body, _ = walked
    new_region = _new_region(view, region)
    renumbered = {0: 0, **{1 + k: 1 + j for j, k in enumerate(kept)}}
    record = _recorder(view)
    copies = copy_body(body, lambda index: ENode("Arg", (new_region, renumbered[index])), record)
    new_results = tuple(copies.get(c, c) for c in [results[k] for k in kept] + ys + list(forward.pushed.values()))
    new_loop = record(forward.cid, ENode("For", (new_region, lo, hi, tuple(inits[k] for k in kept), new_results,
                                                attrs_class)))
    gets = outputs.get(forward.cid, {})
    for k, get in sorted(gets.items()):
        if k >= n_state:
            view.union(get, ENode("Get", (new_loop, len(kept) + k - n_state)))
        elif k in kept:
            view.union(get, ENode("Get", (new_loop, kept.index(k))))
    forward.rows = {}
    for t, (k, value) in enumerate(forward.pushed.items()):
        # recorded here, for the pushed value's source line; a later use of the same
        # node object (a take of it, a union with it) gets this record back
        forward.rows[k] = ENode("Get", (new_loop, first_row + t))
        record(value, forward.rows[k])
    return True


def _read_rows(view, cid: ClassId, node: ENode, pops, forward: _Forward, outputs) -> bool:
    """R' (R without its tapes, reading row i of F''s stacked values where R popped);
    R's other outputs are unioned with R''s. A stacked output of R that is a popped value
    is those rows themselves, unioned directly."""
    region, lo, hi, inits, results, attrs_class = node.args
    n_state = len(inits)
    kept = [k for k in range(n_state) if k not in pops]
    ys = list(results[n_state:])
    rows_of = {popped: forward.rows[k] for popped, k in pops.values() if popped is not None}
    same_trips = view.attrs(attrs_class).get("trip_dim") == view.attrs(forward.node.args[5]).get("trip_dim")
    direct = {j: rows_of[y] for j, y in enumerate(ys) if y in rows_of and same_trips}
    kept_ys = [j for j in range(len(ys)) if j not in direct]
    starts = [results[k] for k in kept] + [ys[j] for j in kept_ys]
    invariant = view.facts.invariant.get(region, set())
    walked = loop_body(view, region, starts, invariant, leaves=frozenset(rows_of))
    if walked is None or walked[1] & {1 + j for j in pops}:
        return False  # the body reads a tape other than through its one pop a trip
    body, _ = walked
    new_region = _new_region(view, region)
    renumbered = {0: 0, **{1 + k: 1 + j for j, k in enumerate(kept)}}
    args = {index: ENode("Arg", (new_region, renumbered[index])) for index in renumbered}
    record = _recorder(view)
    counter = view.snapshot.index.get(ENode("Arg", (region, 0)))
    if counter is not None:  # the counter keeps its name in the seeds (a body may not have read it before)
        record(counter, args[0])
    axis = attrs_node({"axis": 0}, view.encoding.constants)
    seeded = {popped: ENode("Op2", ("take", axis, rows, args[0])) for popped, rows in rows_of.items()}
    copies = copy_body(body, args.__getitem__, record, seeded)
    new_results = tuple(copies.get(c, c) for c in starts)
    new_loop = record(cid, ENode("For", (new_region, lo, hi, tuple(inits[k] for k in kept), new_results,
                                         attrs_class)))
    for k, get in sorted(outputs.get(cid, {}).items()):
        if k >= n_state and k - n_state in direct:
            view.union(get, direct[k - n_state])
        elif k >= n_state:
            view.union(get, ENode("Get", (new_loop, len(kept) + kept_ys.index(k - n_state))))
        elif k in kept:
            view.union(get, ENode("Get", (new_loop, kept.index(k))))
    return True


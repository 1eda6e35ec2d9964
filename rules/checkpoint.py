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
    recompute-taped-residuals
                            recompute: residuals that are at most `MAX_RECOMPUTED_OPS`
                            elementwise ops of other residuals, invariants and the
                            counter (an LSTM's h_t = o_t * tanh(c_t)) are not stacked;
                            the reverse loop rebuilds them from the rows of those it
                            reads, at the same counter. Fewer bytes held and written
                            per trip, for a few elementwise ops. A late rule (Rule.late):
                            it runs once the other rules have settled.
    checkpoint-carried-states
                            checkpoint every trip: the forward loop stacks its carried
                            state as it enters each trip (S bytes a trip) and nothing
                            else; the reverse loop recomputes every residual of the trip
                            from that row, the invariants and the counter (the step's
                            ops, matmuls included). S bytes held a trip instead of R,
                            for one more forward step a trip. Made only where S < R; a
                            late rule too.
    checkpoint-every-k-trips
                            checkpoint every k trips (k the divisor of a static trip
                            count T that holds the fewest bytes, T/k x S + k x R, near
                            sqrt(T x S / R)): the forward loop becomes an outer
                            loop over T/k segments around a copy of its body, stacking
                            the states a segment starts from (those the pushed values
                            read); the reverse loop becomes an outer loop over the
                            segments, last first, that re-runs segment s from its row,
                            stacking every pushed value, then runs the segment's
                            adjoint trips reading row i - s x k where it popped (per-trip
                            outputs are stacked per segment and joined). T/k x S + k x R
                            bytes held, for one more forward pass. Bodies are copied as
                            written, so that a rewrite that holds more (an input
                            projection batched over every trip) is made again in the
                            copy beside the form that holds less. Late, and made only
                            under a memory limit (Rule.memory): the extractor prices
                            time alone without one, and this never wins on time.

Assumes (all four rules): a forward `for` loop F from the constant 0 with its
`trip_dim` set, every tape state of which starts as `NewTape` and gains exactly one
`tape_push(Arg, v)` per trip; a reverse `for` loop R over the same bound classes, run
in the opposite direction, every tape state of which starts as one of F's final tapes
(each at most once) and loses exactly one `tape_pop` per trip. Then R's trip at
counter i pops what F's trip at counter i pushed, and F stacks that trip's values at
row i - lo = i (docs/ir.md), so the pop is `take(V, i)`: bit-identical; a recomputed
residual runs the ops that made it on the same values, so it is the same value (the
lowering may fuse them differently, within float rounding). Neither body
holds a control node (rules/loop_body.py copies straight-line bodies). A forward
loop's stacked copy F' is made once and shared by every reverse loop that pops F's
tapes (`batch-weight-gradient` makes a second one); both copies' regions record what
they copy (`RegionInfo.copied_from`), so a later round finds them.

Memory: storing keeps every residual (rows or tape, the same bytes); recomputing holds
fewer; checkpointing the state every trip fewer still (T x S), every k trips fewest
(T/k x S + k x R). A memory budget's check (`_within_budget`, egad/api.py) counts tapes
and stacked rows alike (egad/ad/checkpoint.py: `taped_bytes` beside `held_bytes`; a
segment's rows, remade in every segment, count once, and the extractor prices them
once too). The extractor prices time, so it takes `checkpoint-carried-states` where
recomputing a step costs less than reading its rows back (moe_topk's gradient); under
a memory limit, the extraction that prices bytes held (egad/optimizer.py,
`_within_memory`) weighs every alternative's rows. `egad.optimize(...,
memory_budget=bytes)` also plans one policy per top-level loop outside the e-graph
(egad/ad/checkpoint.py: every-k nested over as many levels as the budget needs,
binomial cuts, and `while` loops' online doubling, egad/ad/online.py) and
differentiates the segmented program; when it checkpoints, the e-graph is also given
the store-all gradient under the budget, and the program predicted faster is built
(egad/api.py, `_egraph_policies`).

Still to do, and why it would live here: binomial cuts, nested levels and the online
doubling of `while` loops' segments as whole-loop alternatives (today only the plan
writes them); every-k for a loop pair whose reverse loop stacks a popped residual
directly (`batch-weight-gradient`'s copies).
"""
from __future__ import annotations

import dataclasses

from egad.cost_model import nbytes
from egad.egraph.attrs import attrs_node
from egad.egraph.enode import ClassId, ENode, children
from egad.ir import ops
from egad.ir.types import TapeType, TensorType

from .loop_body import copy_body, copy_loop, copy_recorder, copy_region, loop_attrs, loop_body
from .patterns import int_constant
from .registry import family

CHECKPOINT = family("checkpoint", __doc__, todo="binomial cuts, nested levels and online doubling as e-graph "
                    "alternatives (planned outside the e-graph today: egad/ad/checkpoint.py)")

STACK = "stack-taped-residuals"
RECOMPUTE = "recompute-taped-residuals"
STATES = "checkpoint-carried-states"


@dataclasses.dataclass
class _Forward:
    """A forward loop whose tapes can be stacked rows: F's class and node, per tape state
    k the value pushed each trip, and (once planned) which tapes its copy stacks and how
    the others are recomputed."""

    cid: ClassId
    node: ENode
    pushed: dict[int, ClassId]
    stored: list[int] | None = None  # the tape states whose values the copy stacks
    recomputed: dict[int, dict[ClassId, ENode]] | None = None  # tape state -> its definition (a body to copy)
    rows: dict[int, object] | None = None  # stored tape state -> its stacked rows (a class, or the copy's new Get)


@CHECKPOINT.transformer(STACK, "a forward loop's tape pushes as stacked outputs, its reverse loop's pops as rows "
                               "of them: the same bytes, a stacked put instead of a push, and residuals that "
                               "batching reads as rows of an invariant")
def stack_taped_residuals(view) -> int:
    return _transform(view, STACK, lambda forward, stored: (sorted(forward.pushed), {}))


# late: a second copy of every loop pair, for a put or two a trip; on GNMT-lite, made
# in every round, it doubled saturation and extraction time for nothing the model prices
@CHECKPOINT.transformer(RECOMPUTE, "a residual that is a few elementwise ops of other residuals, recomputed by the "
                                   "reverse loop from their rows: fewer bytes stacked and written each trip",
                        late=True)
def recompute_taped_residuals(view) -> int:
    return _transform(view, RECOMPUTE, lambda forward, stored: _recompute_plan(view, forward) if stored is None
                      else _replan(view, forward, stored))


# late, like recompute: a third copy of every loop pair, which the cost model takes only
# where recomputing a step costs less than the rows it saves
@CHECKPOINT.transformer(STATES, "a forward loop stacks its carried state at the top of each trip and its reverse "
                                "loop recomputes the trip's residuals from that row: S bytes held a trip instead "
                                "of R, for one more forward step a trip", late=True)
def checkpoint_carried_states(view) -> int:
    return _transform(view, STATES, lambda forward, stored: _states_plan(view, forward, stored))


def _transform(view, rule: str, plan) -> int:
    """Every (forward, reverse) pair of loops that fits: the forward loop's copy stacks the
    tapes `plan(forward)` stores and the reverse loop's copy reads their rows, recomputing
    the others; each copy is made once (a copy's region says what it copies)."""
    encoding = view.encoding
    loops, forwards = _loops_and_forwards(view)
    # a copied region -> (its copy, what the copy stored: tape states of a forward loop)
    copied = {info.copied_from[1]: (region, info.copied_from[2]) for region, info in encoding.regions.items()
              if info.copied_from is not None and info.copied_from[0] == rule}
    outputs = view.outputs()
    changed = 0
    for region, (cid, node) in sorted(loops.items()):
        if region in copied:
            continue  # copied in an earlier round
        found = _pops(view, node, forwards)
        if found is None:
            continue
        forward, pops = found
        existing = copied.get(forward.node.args[0])
        if forward.stored is None:
            # a copy made in an earlier round fixes what is stored: its rows are laid out so
            forward.stored, forward.recomputed = plan(forward, None if existing is None else list(existing[1]))
        if forward.stored is None:
            continue  # nothing to recompute, or no longer recomputable as the copy was planned
        walked = _reverse_body(view, node, pops, forward)
        if walked is None:
            continue  # checked before the forward copy is made: a copy no reverse loop reads is no use
        if forward.rows is None and not _stack_forward(view, rule, forward, outputs,
                                                       existing and loops.get(existing[0])):
            continue
        _read_rows(view, rule, cid, node, pops, forward, outputs, walked)
        changed += 1
    return changed


def _loops_and_forwards(view):
    """(loop region -> (its class, its `For` node); a forward loop's final tape -> (the
    loop as a _Forward, its tape state)) of the snapshot."""
    snapshot = view.snapshot
    loops = {node.args[0]: (cid, node) for cid, members in snapshot.nodes.items()
             for node in members if node.head == "For"}
    forwards: dict[ClassId, tuple[_Forward, int]] = {}
    for cid, node in loops.values():
        forward = _forward(view, cid, node)
        if forward is not None:
            for k in forward.pushed:
                tape = snapshot.index.get(ENode("Get", (cid, k)))
                if tape is not None:
                    forwards[tape] = (forward, k)
    return loops, forwards


MAX_RECOMPUTED_OPS = 4  # elementwise ops a recomputed residual may take


def _recompute_plan(view, forward: _Forward):
    """(the tapes to store, {tape: definition}) for the residuals that are at most
    `MAX_RECOMPUTED_OPS` elementwise ops of stored residuals, invariants and the counter
    (an LSTM's h_t = o_t * tanh(c_t), both taped). From the last pushed value back, each
    is recomputed when its definition reads only residuals still stored, and one another
    definition reads stays stored. (None, None) when nothing can be recomputed."""
    pushers: dict[ClassId, list[int]] = {}
    for k, value in forward.pushed.items():
        pushers.setdefault(value, []).append(k)
    stored, recomputed, needed = set(forward.pushed), {}, set()
    for k in sorted(forward.pushed, key=lambda k: view.order(forward.pushed[k]), reverse=True):
        value = forward.pushed[k]
        if value in needed or len(pushers[value]) > 1:
            continue
        leaves = {forward.pushed[j] for j in stored if j != k}
        definition = _definition(view, forward, value, leaves)
        if definition is not None:
            body, read = definition
            recomputed[k] = body
            stored.discard(k)
            needed |= read
    if not recomputed:
        return None, None
    return sorted(stored), recomputed


def _replan(view, forward: _Forward, stored: list[int], any_op: bool = False):
    """(stored, {tape: definition}) for a forward loop whose copy stores `stored`, or
    (None, None) when a residual it does not store can no longer be defined from them."""
    leaves = {forward.pushed[j] for j in stored}
    recomputed = {}
    for k in sorted(set(forward.pushed) - set(stored)):
        definition = _definition(view, forward, forward.pushed[k], leaves, any_op)
        if definition is None:
            return None, None
        recomputed[k] = definition[0]
    return stored, recomputed


def _states_plan(view, forward: _Forward, stored: list[int] | None):
    """(what the copy stores, {tape: definition}): every carried state at the top of the
    trip, and every residual defined from those rows, the loop's invariants and counter.
    A state is keyed `n_state + j` in `forward.pushed` (its `Arg`), unless a tape pushes
    that very `Arg` (an RNN's h_{t-1}): that tape is stored. (None, None) when a residual
    reads a tape or a loop, or when the states are no fewer bytes than the residuals."""
    region, _, _, inits, _, _ = forward.node.args
    n_state, tapes = len(inits), sorted(forward.pushed)
    keys = []
    for j in range(n_state):
        arg = view.snapshot.index.get(ENode("Arg", (region, 1 + j)))
        if j in forward.pushed or arg is None:
            continue  # a tape, or a state the body never reads
        direct = [k for k in tapes if forward.pushed[k] == arg]
        if not direct:
            forward.pushed[n_state + j] = arg
        keys.append(direct[0] if direct else n_state + j)
    if stored is not None:
        return _replan(view, forward, stored, any_op=True)
    if _static_bytes(view, [forward.pushed[k] for k in keys]) >= _static_bytes(view, [forward.pushed[k]
                                                                                      for k in tapes]):
        return None, None
    return _replan(view, forward, sorted(keys), any_op=True)


def _static_bytes(view, classes) -> float:
    """Bytes of the values of `classes` (inf when a shape is not static)."""
    total = 0.0
    for cid in classes:
        value_type = view.types.get(cid)
        if not isinstance(value_type, TensorType) or not all(isinstance(d, int) for d in value_type.shape):
            return float("inf")
        total += nbytes(value_type)
    return total


def _definition(view, forward: _Forward, value: ClassId, leaves: set, any_op: bool = False):
    """(the classes to copy, each with its earliest recorded node; the leaves it reads)
    when `value` is at most `MAX_RECOMPUTED_OPS` elementwise ops of `leaves`, invariants
    of the forward loop and its counter (with `any_op`: any number of ops of any kind
    but tape ops and loops); else None."""
    region = forward.node.args[0]
    invariant = view.facts.invariant.get(region, set())
    counter = view.snapshot.index.get(ENode("Arg", (region, 0)))
    origins = view.editor.origins
    body: dict[ClassId, ENode] = {}
    read: set[ClassId] = set()
    stack = [value]
    while stack:
        cid = stack.pop()
        if cid in body:
            continue
        if cid != value and (cid in leaves or cid in invariant):
            read |= {cid} & leaves
            continue
        recorded = [n for n in view.snapshot.nodes.get(cid, ()) if n in origins]
        if not recorded:
            return None
        node = body[cid] = min(recorded, key=lambda n: origins[n].order)
        if cid == counter:
            continue
        if any_op:
            is_op = node.head in _OP_HEADS and not node.args[0].startswith("tape_")
            if not is_op and node.head != "Get":  # a Get of a loop fails at the loop's class
                return None
        elif node.head not in ("Op1", "Op2", "Op3") or ops.OPS[node.args[0]].family != "elementwise" \
                or sum(1 for n in body.values() if n.head != "Arg") > MAX_RECOMPUTED_OPS:
            return None
        stack.extend(c for c in children(node) if c.sort == "Term")
    return body, read


_OP_HEADS = ("Op0", "Op1", "Op2", "Op3", "OpN")


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


def _stack_forward(view, rule: str, forward: _Forward, outputs, existing) -> bool:
    """F' (F without its tapes, stacking the values of the stored ones), or the one an
    earlier round made (`existing`: its class and node); F's other outputs are unioned
    with F''s. Sets `forward.rows`; False when F's body cannot be copied."""
    region, _, _, inits, results, _ = forward.node.args
    n_state = len(inits)
    kept = [k for k in range(n_state) if k not in forward.pushed]
    ys = list(results[n_state:])
    first_row = len(kept) + len(ys)
    if existing is not None:
        loop_class = existing[0]
        forward.rows = {k: view.snapshot.index.get(ENode("Get", (loop_class, first_row + t)))
                        or ENode("Get", (loop_class, first_row + t)) for t, k in enumerate(forward.stored)}
        return True
    invariant = view.facts.invariant.get(region, set())
    stacked = [forward.pushed[k] for k in forward.stored]
    starts = [results[k] for k in kept] + ys + stacked
    walked = loop_body(view, region, starts, invariant)
    if walked is None or walked[1] & {1 + k for k in forward.pushed}:
        return False  # a kept or pushed value that reads a tape
    body, _ = walked
    new_loop = copy_loop(view, forward.cid, forward.node, body, starts, kept, (rule, region, tuple(forward.stored)))
    gets = outputs.get(forward.cid, {})
    for k, get in sorted(gets.items()):
        if k >= n_state:
            view.union(get, ENode("Get", (new_loop, len(kept) + k - n_state)))
        elif k in kept:
            view.union(get, ENode("Get", (new_loop, kept.index(k))))
    forward.rows = {}
    record = copy_recorder(view)
    for t, k in enumerate(forward.stored):
        # recorded here, for the pushed value's source line; a later use of the same
        # node object (a take of it, a union with it) gets this record back
        forward.rows[k] = ENode("Get", (new_loop, first_row + t))
        record(forward.pushed[k], forward.rows[k])
    return True


@dataclasses.dataclass
class _ReverseBody:
    """What R's copy computes: R's kept state and stacked outputs (`starts`), the body
    classes behind them, and R's stacked outputs that are popped stored values (`direct`:
    output j -> the tape state whose rows it is)."""

    kept: list[int]
    kept_ys: list[int]
    direct: dict[int, int]
    starts: list[ClassId]
    body: dict[ClassId, ENode]


def _reverse_body(view, node: ENode, pops, forward: _Forward, as_written: bool = False) -> _ReverseBody | None:
    """R's body as its copy would compute it (`as_written`: loop_body's), or None when it
    cannot be copied (a control node; a tape read other than through its one pop a trip)."""
    region, _, _, inits, results, attrs_class = node.args
    n_state = len(inits)
    kept = [k for k in range(n_state) if k not in pops]
    ys = list(results[n_state:])
    popped = {p: k for p, k in pops.values() if p is not None}
    same_trips = view.attrs(attrs_class).get("trip_dim") == view.attrs(forward.node.args[5]).get("trip_dim")
    direct = {j: popped[y] for j, y in enumerate(ys) if y in popped and popped[y] in forward.stored and same_trips}
    kept_ys = [j for j in range(len(ys)) if j not in direct]
    starts = [results[k] for k in kept] + [ys[j] for j in kept_ys]
    invariant = view.facts.invariant.get(region, set())
    walked = loop_body(view, region, starts, invariant, leaves=frozenset(popped), as_written=as_written)
    if walked is None or walked[1] & {1 + j for j in pops}:
        return None
    return _ReverseBody(kept, kept_ys, direct, starts, walked[0])


def _read_rows(view, rule: str, cid: ClassId, node: ENode, pops, forward: _Forward, outputs,
               walked: _ReverseBody) -> None:
    """R' (R without its tapes: where R popped a stored residual it reads row i of F''s
    stacked values, where it popped a recomputed one it recomputes it from such rows);
    R's other outputs are unioned with R''s. A stacked output of R that is a popped
    stored value is F''s rows themselves, unioned directly."""
    region, lo, hi, inits, _, attrs_class = node.args
    n_state = len(inits)
    kept, kept_ys, starts, body = walked.kept, walked.kept_ys, walked.starts, walked.body
    direct = {j: forward.rows[k] for j, k in walked.direct.items()}
    recomputed = {popped: k for popped, k in pops.values() if popped is not None and k in forward.recomputed}
    new_region = copy_region(view, region, (rule, region, ()))
    renumbered = {0: 0, **{1 + k: 1 + j for j, k in enumerate(kept)}}
    args = {index: ENode("Arg", (new_region, renumbered[index])) for index in renumbered}
    record = copy_recorder(view)
    counter = view.snapshot.index.get(ENode("Arg", (region, 0)))
    if counter is not None:  # the counter keeps its name in the seeds (a body may not have read it before)
        record(counter, args[0])
    axis = attrs_node({"axis": 0}, view.encoding.constants)
    row_reads = {k: ENode("Op2", ("take", axis, rows, args[0])) for k, rows in forward.rows.items()}
    seeded = {popped: row_reads[k] for popped, k in pops.values() if popped is not None and k in forward.rows}
    for popped, k in recomputed.items():
        seeded[popped] = _recompute(view, forward, k, row_reads, args[0], record)
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


def _recompute(view, forward: _Forward, k: int, row_reads: dict, counter: ENode, record):
    """Residual k rebuilt in the reverse loop's copy: its definition copied over the rows
    of the stored residuals it reads and the copy's counter (the same trip: the same i)."""
    body = dict(forward.recomputed[k])
    stored_value = {forward.pushed[j]: j for j in forward.stored}
    leaves = {c: row_reads[stored_value[c]] for node in body.values() if node.head != "Arg"
              for c in children(node) if c in stored_value and c not in body}
    body.update({leaf: ENode("Arg", ()) for leaf in leaves})  # placeholders: seeded below
    copies = copy_body(body, lambda index: counter, record, leaves)
    return copies[forward.pushed[k]]


# ------------------------------------------------------------------ every k trips

EVERY_K = "checkpoint-every-k-trips"


# memory: without a memory limit the extractor prices time alone, and this alternative
# (one more forward pass, for fewer bytes held) never wins: it is made only under one
@CHECKPOINT.transformer(EVERY_K, "a loop pair split into segments of k trips: the forward loop stacks its state "
                                 "at each segment's start only, the reverse loop re-runs each segment storing its "
                                 "residuals, then its adjoint: T/k x S + k x R bytes held instead of T x R, for "
                                 "one more forward pass", late=True, memory=True)
def checkpoint_every_k_trips(view) -> int:
    loops, forwards = _loops_and_forwards(view)
    made = [(region, info.copied_from) for region, info in view.encoding.regions.items()
            if info.copied_from is not None and info.copied_from[0] == EVERY_K]
    copied = {of for _, (_, of, _) in made} | {region for region, _ in made}  # copied, and the copies
    # a forward loop's region -> its copy's outer region, whose stacked rows are the checkpoints
    forward_copies = {of: region for region, (_, of, record) in made if record}
    outputs = view.outputs()
    changed = 0
    for region, (cid, node) in sorted(loops.items()):
        if region in copied:
            continue
        found = _pops(view, node, forwards)
        segments = found and _segmenting(view, found[0], node)
        if not segments:
            continue
        forward, pops = found
        forward.stored, forward.recomputed = sorted(forward.pushed), {}  # a segment's residuals, all stacked
        walked = _reverse_body(view, node, pops, forward, as_written=True)  # as _segment_body's, for the same reason
        rerun = _segment_body(view, forward, segments, stacking=True)
        if walked is None or walked.direct or rerun is None:
            continue  # (direct: a per-trip output that is a popped residual, read from the rows: not written yet)
        if forward.rows is None:  # the checkpoints: one forward copy, shared by every reverse loop
            existing = forward_copies.get(forward.node.args[0])
            forward.rows = _checkpoints_of(loops[existing][0], segments) if existing is not None \
                else _checkpointed_forward(view, forward, segments, outputs)
            if forward.rows is None:
                continue
        _segmented_reverse(view, cid, node, pops, forward, segments, outputs, walked, rerun)
        changed += 1
    return changed


@dataclasses.dataclass(frozen=True)
class _Segments:
    """How a forward loop of `trips` trips is cut: `count` segments of `length` trips.
    `kept`: its carried states that are not tapes; `rerun`: those the pushed values
    depend on, checkpointed at each segment's start and carried by its re-run."""

    trips: int
    length: int
    kept: tuple[int, ...]
    rerun: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.trips // self.length


MIN_SEGMENTED_TRIPS = 4  # fewer trips leave no segment length k with 1 < k < T


def _segmenting(view, forward: _Forward, reverse: ENode) -> _Segments | None:
    """The segments of a loop pair this rule splits: a static trip count T with the
    divisor k, 1 < k < T, that holds the fewest bytes, T/k x S + k x R (S: a
    checkpoint row, R: the residuals a trip pushes; k near sqrt(T x S / R)); per-trip
    outputs (ys) of static shapes. None when it does not fit."""
    _, _, hi, inits, results, attrs_class = forward.node.args
    trips = view.attrs(attrs_class).get("trip_dim")
    if not isinstance(trips, int) or int_constant(view, hi) != trips or trips < MIN_SEGMENTED_TRIPS:
        return None
    ys = list(results[len(inits):]) + list(reverse.args[4][len(reverse.args[3]):])
    if view.attrs(reverse.args[5]).get("trip_dim") != trips or any(_row_shape(view, y) is None for y in ys):
        return None
    divisors = [k for k in range(2, trips) if trips % k == 0]
    if not divisors:
        return None
    kept = tuple(k for k in range(len(inits)) if k not in forward.pushed)
    rerun = _states_read(view, forward, kept)
    if not rerun:
        return None
    checkpoint, residuals = _static_bytes(view, [inits[k] for k in rerun]), _static_bytes(view, forward.pushed.values())
    return _Segments(trips, _segment_length(trips, divisors, checkpoint, residuals), kept, rerun)


def _segment_length(trips: int, divisors: list[int], checkpoint: float, residuals: float) -> int:
    """The divisor k holding the fewest bytes, T/k checkpoint rows and k trips of
    residuals; of two that hold as many, the longer (fewer outer trips)."""
    if not (0 < checkpoint < float("inf") and 0 < residuals < float("inf")):
        checkpoint = residuals = 1.0  # sizes unknown: as if equal, k nearest sqrt(T)
    return min(divisors, key=lambda k: (trips // k * checkpoint + k * residuals, -k))


def _states_read(view, forward: _Forward, kept: tuple[int, ...]) -> tuple[int, ...]:
    """The kept states the pushed values read, at any number of trips back (a state
    whose next value reads another reads that one too); () when a walk fails."""
    region, _, _, _, results, _ = forward.node.args
    invariant = view.facts.invariant.get(region, set())
    needed: set[int] = set()
    frontier = [forward.pushed[k] for k in sorted(forward.pushed)]
    while frontier:
        walked = loop_body(view, region, frontier, invariant, as_written=True)
        if walked is None:
            return ()
        new = {index - 1 for index in walked[1] if index - 1 in kept} - needed
        needed |= new
        frontier = [results[k] for k in sorted(new)]
    return tuple(sorted(needed))


def _segment_body(view, forward: _Forward, segments: _Segments, stacking: bool):
    """(starts, body): F's body as a segment's loop computes it: the next values of its
    kept states and its per-trip outputs, or with `stacking` (a re-run) the next values
    of the states it re-runs and every value F pushes (stacked instead); None when it
    cannot be copied (a value that reads a tape other than by its push). Copied as
    written: a rewrite that holds more (the input projection batched over all T trips)
    is made again in the copy, beside the form that holds less, and the extraction
    weighs both."""
    region, _, _, inits, results, _ = forward.node.args
    if stacking:
        starts = [results[k] for k in segments.rerun] + [forward.pushed[k] for k in forward.stored]
    else:
        starts = [results[k] for k in segments.kept] + list(results[len(inits):])
    walked = loop_body(view, region, starts, view.facts.invariant.get(region, set()), as_written=True)
    if walked is None or walked[1] & {1 + k for k in forward.pushed}:
        return None
    return starts, walked[0]


def _checkpoints_of(loop_class: ClassId, segments: _Segments) -> dict[int, ENode]:
    """Re-run state k -> its checkpoint rows, stacked by the forward copy `loop_class`."""
    n_kept = len(segments.kept)
    return {k: ENode("Get", (loop_class, n_kept + t)) for t, k in enumerate(segments.rerun)}


def _row_shape(view, cid: ClassId) -> tuple[int, ...] | None:
    """The static shape of one trip's row of a per-trip output, else None."""
    value_type = view.types.get(cid)
    return value_type.shape if isinstance(value_type, TensorType) and value_type.is_static else None


def _joined_rows(view, rows: ENode, segments: _Segments, row_cid: ClassId) -> ENode:
    """A per-trip output stacked per segment, (T/k, k, *row), as the loop stacks it: (T, *row)."""
    shape = (segments.trips, *_row_shape(view, row_cid))
    return ENode("Op1", ("reshape", attrs_node({"shape": shape}, view.encoding.constants), rows))


def _segment_bounds(view, counter: ENode, segments: _Segments) -> tuple[ENode, ENode]:
    """(s x k, s x k + k) for the segment counter `counter`."""
    no_attrs = attrs_node({}, view.encoding.constants)
    length = ENode("Scalar", ("int64", segments.length))
    start = ENode("Op2", ("mul", no_attrs, counter, length))
    return start, ENode("Op2", ("add", no_attrs, start, length))


def _checkpointed_forward(view, forward: _Forward, segments: _Segments, outputs) -> dict[int, ENode] | None:
    """F_k: an outer loop over the segments whose body runs one segment of F's trips
    (F's body copied without its tapes) and stacks the states a re-run starts from;
    F's other outputs are unioned with F_k's (per-trip outputs stacked per segment,
    joined). Returns re-run state k -> its checkpoint rows, or None when F's body cannot
    be copied."""
    region, _, _, inits, results, attrs_class = forward.node.args
    n_state, n_ys = len(inits), len(results) - len(inits)
    walked = _segment_body(view, forward, segments, stacking=False)
    if walked is None:
        return None
    starts, body = walked
    kept = list(segments.kept)
    record = copy_recorder(view)
    outer = copy_region(view, region, (EVERY_K, region, (segments.length,)))
    inner = copy_region(view, region, (EVERY_K, region, ()), inside=outer)
    start, stop = _segment_bounds(view, ENode("Arg", (outer, 0)), segments)
    renumbered = {0: 0, **{1 + k: 1 + t for t, k in enumerate(kept)}}
    copies = copy_body(body, lambda index: ENode("Arg", (inner, renumbered[index])), record)
    states = tuple(ENode("Arg", (outer, 1 + t)) for t in range(len(kept)))
    segment = record(forward.cid, ENode("For", (inner, start, stop, states, tuple(copies.get(c, c) for c in starts),
                                                loop_attrs(view, attrs_class, segments.length))))
    loop = record(forward.cid, ENode("For", (
        outer, ENode("Scalar", ("int64", 0)), ENode("Scalar", ("int64", segments.count)),
        tuple(inits[k] for k in kept),
        tuple(ENode("Get", (segment, t)) for t in range(len(kept)))
        + tuple(states[kept.index(k)] for k in segments.rerun)  # the states a segment starts from, stacked
        + tuple(ENode("Get", (segment, len(kept) + j)) for j in range(n_ys)),
        loop_attrs(view, attrs_class, segments.count))))
    first_ys = len(kept) + len(segments.rerun)
    for k, get in sorted(outputs.get(forward.cid, {}).items()):
        if k in kept:
            view.union(get, ENode("Get", (loop, kept.index(k))))
        elif k >= n_state:
            view.union(get, _joined_rows(view, ENode("Get", (loop, first_ys + k - n_state)), segments, results[k]))
    return _checkpoints_of(loop, segments)


def _segmented_reverse(view, cid: ClassId, node: ENode, pops, forward: _Forward, segments: _Segments, outputs,
                       walked: _ReverseBody, rerun) -> None:
    """R_k: an outer loop over the segments, last first, whose body re-runs segment s of
    F from its checkpoint row s, stacking every residual F pushed (`rerun`: F's body with
    its pushed values as stacked outputs), then runs R's trips of the segment, reading
    row i - s x k of those where R popped; R's other outputs are unioned with R_k's
    (per-trip outputs stacked per segment, joined)."""
    f_region, _, _, _, _, f_attrs = forward.node.args
    region, _, _, inits, results, attrs_class = node.args
    n_state = len(inits)
    rerun_states, r_kept = list(segments.rerun), walked.kept
    constants = view.encoding.constants
    record = copy_recorder(view)
    outer = copy_region(view, region, (EVERY_K, region, ()))
    segment_counter = ENode("Arg", (outer, 0))
    start, stop = _segment_bounds(view, segment_counter, segments)
    axis = attrs_node({"axis": 0}, constants)

    # segment s of F again, from its checkpoint, stacking what F pushed
    again = copy_region(view, f_region, (EVERY_K, f_region, ()), inside=outer)
    starts, body = rerun
    renumbered = {0: 0, **{1 + k: 1 + t for t, k in enumerate(rerun_states)}}
    copies = copy_body(body, lambda index: ENode("Arg", (again, renumbered[index])), record)
    again_loop = record(forward.cid, ENode("For", (
        again, start, stop,
        tuple(ENode("Op2", ("take", axis, forward.rows[k], segment_counter)) for k in rerun_states),
        tuple(copies.get(c, c) for c in starts), loop_attrs(view, f_attrs, segments.length))))
    rows = {k: ENode("Get", (again_loop, len(rerun_states) + t)) for t, k in enumerate(forward.stored)}

    # R's trips of segment s, reading the rows of the re-run where R popped
    inner = copy_region(view, region, (EVERY_K, region, ()), inside=outer)
    args = {0: ENode("Arg", (inner, 0)), **{1 + k: ENode("Arg", (inner, 1 + j)) for j, k in enumerate(r_kept)}}
    counter = view.snapshot.index.get(ENode("Arg", (region, 0)))
    if counter is not None:  # the counter keeps its name in the seeds (a body may not have read it before)
        record(counter, args[0])
    row = ENode("Op2", ("sub", attrs_node({}, constants), args[0], start))
    seeded = {popped: ENode("Op2", ("take", axis, rows[k], row)) for popped, k in pops.values() if popped is not None}
    copies = copy_body(walked.body, args.__getitem__, record, seeded)
    segment = record(cid, ENode("For", (
        inner, start, stop, tuple(ENode("Arg", (outer, 1 + j)) for j in range(len(r_kept))),
        tuple(copies.get(c, c) for c in walked.starts), loop_attrs(view, attrs_class, segments.length))))
    loop = record(cid, ENode("For", (
        outer, ENode("Scalar", ("int64", 0)), ENode("Scalar", ("int64", segments.count)),
        tuple(inits[k] for k in r_kept), tuple(ENode("Get", (segment, j)) for j in range(len(walked.starts))),
        loop_attrs(view, attrs_class, segments.count))))
    for k, get in sorted(outputs.get(cid, {}).items()):
        if k in r_kept:
            view.union(get, ENode("Get", (loop, r_kept.index(k))))
        elif k >= n_state:
            ys = len(r_kept) + walked.kept_ys.index(k - n_state)
            view.union(get, _joined_rows(view, ENode("Get", (loop, ys)), segments, results[k]))

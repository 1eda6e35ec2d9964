"""unroll: a loop with a known trip count, as its body written out: all n trips of a
short loop, or k trips per trip of a loop with a small body (unroll-by-k).

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

Unroll-by-k (`unroll-by-k`): a for loop of T = hi - lo known trips and a small body
becomes a loop of n = T // k trips whose body is k copies of the original body, the
state of copy j the results of copy j - 1, and a remainder loop (the body as it was,
in a region of its own) for the last T - n k counters. Copy j of trip o runs counter
lo + o k + j (lo + o k + k - 1 - j in a reversed loop, which runs its remainder
first: its counters are the highest). A row read at the counter, `take(X, i, axis=0)`
of an invariant X, becomes one take a trip of a block of k rows (X's rows lo to
lo + n k, reshaped to n blocks before the loop) and, per copy, a slice of it, which
the lowering fuses into the op reading it; any other read of the counter computes it
(an integer multiply and add). Each per-trip output becomes k stacked outputs of n
rows, joined after the loop into counter order. It pays where a trip is a few small
kernels: the loop's control is paid once per k trips, and the Relax lowering fuses
the copies' elementwise chains into one kernel, which the cost model does not count
(it predicts less than is measured: benchmarks/optimizer.py's unroll section).
Assumes what the full unrolling does (tape-free, no control node in the body, static
ys shapes), at least `MIN_BY_K_TRIPS` trips (a short loop is written out instead, and
a loop of a few dozen trips has little control to save) and 2 k, body classes times k
at most `MAX_BY_K_COPIES`, and no value of the body larger than `MAX_BY_K_ELEMENTS` (a
trip over large values is work, not control, and copies of it only grow the e-graph:
GNMT-lite's and the LSTM's loops are left alone); the copies are written from each
class's latest recorded node (rules/loop_body.py).
Loops whose trip count is known only at run time are left alone (their ys could not
be joined with static shapes, and the split needs a run-time division).
"""
from __future__ import annotations

import math

from egad.egraph.attrs import attrs_node
from egad.egraph.enode import ClassId, ENode, children
from egad.egraph.placement import CONTROL_HEADS, is_effect
from egad.ir.types import TensorType

from .loop_body import copy_body, copy_recorder, copy_region, loop_attrs, loop_body
from .patterns import axis_slice_node, concat_node, int_constant
from .registry import family

UNROLL = family("unroll", __doc__)

MAX_TRIPS = 8
MAX_COPIES = 160  # body classes x trips: copies nest step by step, and stable forms nest with them
BY_K = "unroll-by-k"
UNROLL_FACTORS = (2, 4, 8)
# body classes x k of one unroll-by-k alternative: only a small body's control is worth
# saving (a 32-class body's trip has ~10 kernels: the control is under a tenth of it),
# and every alternative grows the e-graph by this much
MAX_BY_K_COPIES = 64
# elements of the largest value of a body unroll-by-k copies: a kernel over more runs
# longer than its dispatch (~3 us on a CPU), so saving control is not worth the copies
MAX_BY_K_ELEMENTS = 4096
# trips of the shortest loop unroll-by-k copies: it saves at most T (1 - 1/k) control
# dispatches, under ~100 us a run below this, which GNMT-lite's 12-step loops (the demo's)
# never repaid for the 350 e-nodes of their copies (saturation then hit its time limit)
MIN_BY_K_TRIPS = 32


@UNROLL.transformer("unroll-short-loop", "a for loop of at most 8 known trips, tape-free and flat, is its body "
                                         "written out: no loop driver, no per-step dispatch of each kernel")
def unroll_short_loops(view) -> int:
    snapshot = view.snapshot
    outputs = view.outputs()  # loop class -> {output index: its Get class}
    by_k = _copies_by_k(view)  # written out, a loop unrolled by k would be a long loop written out
    unrolled = 0
    for cid, members in snapshot.nodes.items():
        for node in members:
            if node.head == "For" and node.args[0] not in by_k and _not_yet_unrolled(view, outputs.get(cid, {})) \
                    and _unroll(view, node, outputs.get(cid, {})):
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
        copies = _copy_trip(body, results, ENode("Scalar", ("int64", counter)), state, record)
        for k, c in enumerate(results[n_state:]):
            steps[k].append((counter, copies.get(c, c)))
        state = [copies.get(c, c) for c in results[:n_state]]
    for k, value in enumerate(state):
        if k in gets:
            view.union(gets[k], value)
    for k, (type_, values) in enumerate(zip(ys_types, steps)):
        if n_state + k not in gets:
            continue
        rows = [_reshaped(view, value, (1, *type_.shape)) for _, value in sorted(values, key=lambda item: item[0])]
        stacked = rows[0] if len(rows) == 1 else concat_node(view, rows, axis=0)
        view.union(gets[n_state + k], stacked)
    return True


@UNROLL.transformer(BY_K, "a for loop with a small body and known trips runs k trips per trip (and a remainder "
                          "loop): its control is paid once per k trips, and the copies' elementwise chains fuse",
                    late=True)
def unroll_loops_by_k(view) -> int:
    regions = view.encoding.regions
    made = {(info.copied_from[1], info.copied_from[2]) for info in regions.values()
            if info.copied_from is not None and info.copied_from[0] == BY_K}
    copies = _copies_by_k(view)
    outputs = view.outputs()
    loops = [(cid, node) for cid, members in view.snapshot.nodes.items() for node in members
             if node.head == "For" and node.args[0] not in copies]
    unrolled = 0
    for cid, node in loops:
        gets = outputs.get(cid, {})
        body = _small_body(view, node) if gets else None
        if body is None:
            continue
        trips = int_constant(view, node.args[2]) - int_constant(view, node.args[1])
        for k in UNROLL_FACTORS:
            if (node.args[0], (k,)) not in made and trips >= 2 * k and len(body) * k <= MAX_BY_K_COPIES:
                _unroll_by(view, cid, node, gets, body, k)
                made.add((node.args[0], (k,)))
                unrolled += 1
    return unrolled


def _copies_by_k(view) -> set[int]:
    """The regions unroll-by-k made."""
    return {region for region, info in view.encoding.regions.items()
            if info.copied_from is not None and info.copied_from[0] == BY_K}


def _small_body(view, loop: ENode) -> dict[ClassId, ENode] | None:
    """The classes of the loop's body (each with the node to copy), where unroll-by-k
    applies to the loop: known trips, a body of pure ops only, static ys; else None."""
    region, lo, hi, inits, results, _ = loop.args
    lo_value, hi_value = int_constant(view, lo), int_constant(view, hi)
    if lo_value is None or hi_value is None or hi_value - lo_value < MIN_BY_K_TRIPS or not UNROLL_FACTORS:
        return None  # (a short loop's alternative is its full unrolling)
    if any(not isinstance(t, TensorType) or not t.is_static for t in map(view.types.get, results[len(inits):])):
        return None
    walked = loop_body(view, region, results, view.facts.invariant.get(region, set()))
    if walked is None or not walked[0] or len(walked[0]) * UNROLL_FACTORS[0] > MAX_BY_K_COPIES:
        return None
    body = walked[0]
    if any(is_effect(node) or node.head in CONTROL_HEADS for node in body.values()):
        return None
    if any(not isinstance(t, TensorType) or not t.is_static or math.prod(t.shape) > MAX_BY_K_ELEMENTS
           for t in map(view.types.get, body)):
        return None  # large values (or sizes known only at run time): the trip is work, not control
    return body


def _unroll_by(view, cid: ClassId, loop: ENode, gets: dict[int, ClassId], body: dict[ClassId, ENode],
               k: int) -> None:
    """Union the loop's outputs with those of its unrolling by k (module docstring)."""
    region, lo, hi, inits, results, attrs_class = loop.args
    lo_value, hi_value = int_constant(view, lo), int_constant(view, hi)
    trips, n_state = hi_value - lo_value, len(inits)
    n, remainder = trips // k, trips % k
    reverse = bool(view.attrs(attrs_class).get("reverse"))
    constants = view.encoding.constants
    record = copy_recorder(view)
    no_attrs = attrs_node({}, constants)

    main = copy_region(view, region, (BY_K, region, (k,)))
    outer_counter = ENode("Arg", (main, 0))
    stride = ENode("Op2", ("mul", no_attrs, outer_counter, ENode("Scalar", ("int64", k))))
    blocks = _row_blocks(view, body, region, lo_value, n, k, outer_counter)
    state = [ENode("Arg", (main, 1 + s)) for s in range(n_state)]  # copy j's: copy j - 1's results
    steps = []  # per copy: its classes' copies
    for j in range(k):
        offset = k - 1 - j if reverse else j
        counter = _plus(stride, lo_value + offset, no_attrs)
        row_reads = {cid: axis_slice_node(view, block, 0, offset * length, (offset + 1) * length, rank)
                     for cid, (block, length, rank) in blocks.items()}
        copies = _copy_trip(body, results, counter, state, record, row_reads)
        steps.append(copies)
        state = [copies.get(c, c) for c in results[:n_state]]
    ys = [steps[j].get(c, c) for c in results[n_state:] for j in range(k)]  # ys y of copy j: at y * k + j

    def main_loop(inputs) -> ENode:
        return record(cid, ENode("For", (main, ENode("Scalar", ("int64", 0)), ENode("Scalar", ("int64", n)),
                                         tuple(inputs), (*state, *ys), loop_attrs(view, attrs_class, n))))

    def rest_loop(inputs) -> ENode:  # the last counters, lo + n k to hi
        rest = copy_region(view, region, (BY_K, region, ()))
        copies = _copy_trip(body, results, ENode("Arg", (rest, 0)),
                            [ENode("Arg", (rest, 1 + s)) for s in range(n_state)], record)
        return record(cid, ENode("For", (rest, ENode("Scalar", ("int64", lo_value + n * k)), hi, tuple(inputs),
                                         tuple(copies.get(c, c) for c in results),
                                         loop_attrs(view, attrs_class, remainder))))

    def carried(loop) -> list[ENode]:
        return [ENode("Get", (loop, s)) for s in range(n_state)]

    rest = None
    if not remainder:
        last = unrolled = main_loop(inits)
    elif reverse:  # the remainder's counters are the highest: a reversed loop runs them first
        rest = rest_loop(inits)
        last = unrolled = main_loop(carried(rest))
    else:
        unrolled = main_loop(inits)
        last = rest = rest_loop(carried(unrolled))

    for index, get in sorted(gets.items()):
        if index < n_state:
            view.union(get, ENode("Get", (last, index)))
            continue
        y = index - n_state
        row_shape = view.types[results[index]].shape
        # copy j's rows are those of counters lo + o k + j (k - 1 - j reversed): in counter order
        order = range(k - 1, -1, -1) if reverse else range(k)
        parts = [_reshaped(view, ENode("Get", (unrolled, n_state + y * k + j)), (n, 1, *row_shape)) for j in order]
        joined = _reshaped(view, concat_node(view, parts, axis=1), (n * k, *row_shape))
        if rest is not None:
            joined = concat_node(view, [joined, ENode("Get", (rest, index))], axis=0)
        view.union(get, joined)


def _copy_trip(body: dict[ClassId, ENode], results, counter: ENode, state: list, record,
               seeded: dict[ClassId, ENode] | None = None) -> dict[ClassId, object]:
    """One trip of the body, copied (`copy_body`, what `results` read): its counter
    `counter`, its state `state` (nodes or classes), and the node `seeded[c]` for a class
    c of `seeded`."""
    return copy_body(body, lambda index: counter if index == 0 else state[index - 1], record, seeded, roots=results)


def _row_blocks(view, body: dict[ClassId, ENode], region: int, lo: int, n: int, k: int, outer_counter: ENode):
    """Body class -> (block, length, rank) for each row read `take(X, i, axis=0)` of an
    invariant X at the counter i, where X holds rows lo to lo + n k: X's rows as n
    blocks of k, `block` the one of the outer trip (one take a trip, of `rank` axes),
    `length` the leading dim of one row in it. Copy j reads its row as a slice of the
    block, which the lowering fuses into the op reading it, instead of computing its
    counter and taking a row."""
    counter = next((cid for cid, node in body.items() if node == ENode("Arg", (region, 0))), None)
    if counter is None or lo < 0:
        return {}
    blocks: dict[ClassId, tuple] = {}
    made: dict[ClassId, ENode] = {}  # X -> its block
    for cid, node in body.items():
        if not (node.head == "Op2" and node.args[0] == "take" and node.args[3] == counter
                and node.args[2] not in body and view.attrs(node.args[1]).get("axis") == 0):
            continue
        table = node.args[2]
        table_type = view.types.get(table)
        if not isinstance(table_type, TensorType) or not table_type.is_static or len(table_type.shape) < 2 \
                or table_type.shape[0] < lo + n * k:
            continue
        rows, rest = table_type.shape[1], table_type.shape[2:]
        if table not in made:
            rows_used = table if lo == 0 and table_type.shape[0] == n * k else \
                axis_slice_node(view, table, 0, lo, lo + n * k, len(table_type.shape))
            made[table] = ENode("Op2", ("take", node.args[1], _reshaped(view, rows_used, (n, k * rows, *rest)),
                                        outer_counter))
        blocks[cid] = (made[table], rows, len(table_type.shape) - 1)
    return blocks


def _plus(node: ENode, offset: int, no_attrs) -> ENode:
    return node if offset == 0 else ENode("Op2", ("add", no_attrs, node, ENode("Scalar", ("int64", offset))))


def _reshaped(view, node: ENode, shape: tuple) -> ENode:
    return ENode("Op1", ("reshape", attrs_node({"shape": shape}, view.encoding.constants), node))

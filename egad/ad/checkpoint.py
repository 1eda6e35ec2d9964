"""GradLoop policies: how the adjoint of a loop gets the forward values it reads.

Store-all (what `egad.grad` does by default) tapes every residual of every trip: a
loop of T trips keeps T x R bytes until its adjoint pops them. Every-k
checkpointing keeps only the loop's *state* at the start of every k-th trip, and
recomputes each segment's residuals just before the adjoint needs them:

    for t in range(T): s = body(t, s)
        ->  for j in range(ceil(T / k)):                       # outer: state taped, ceil(T/k) x S bytes
                s = for t in range(j*k, min(j*k + k, T)): s = body(t, s)   # inner: "checkpoint"

`segment(program, loop, k)` rewrites the primal program that way and marks the inner
loop `checkpoint`; AD (egad/ad/transform.py) then copies a marked loop's forward
without tapes and, in the outer loop's adjoint body, runs it again with tapes
before running its adjoint. Peak tape memory: ceil(T/k) x S + k x R instead of
T x R, for one extra forward pass.

Multi-level checkpointing: `segment(program, loop, k, k1, k2, ...)` splits each
segment again (every k1 trips within it, each of those every k2, ...). A segment's
adjoint then re-runs it taping only its sub-segments' states, and each
sub-segment is re-run in turn: one more forward pass per level, for
ceil(T/k) x S + (k/k1) x S + ... + k_last x R bytes. With levels halving down to
one trip this is the recursive-halving schedule: log2(T) extra forward passes for
about 2 log2(T) states.

Binomial checkpoints (egad/ad/binomial.py, `segment_at(program, loop, cuts)`): the
same nested loops cut at uneven positions, the first segments longest. The
adjoint reaches segment j with only checkpoints 0..j held (compiled tapes give
their memory back as they are popped), so segment j may tape what the later
checkpoints took: the same memory with fewer levels, as Revolve's schedule (one
level: about sqrt(2 T S R) bytes where even segments need 2 sqrt(T S R)). The
segments' lengths vary, so their residuals' shapes are not static.

`plan(program, wrt, budget)` picks one policy per loop under a byte budget
(`egad.optimize(..., memory_budget=...)`), a small knapsack over (time, bytes):
each loop's options (store-all, every-k chains, binomial cuts) cost the forward
passes they add, each the loop's trips times the cost model's time of a trip
(`critical_path.region_seconds`), and the plan takes the options that fit the
budget together with the least such time. For one loop that is the fewest levels
that fit; at a number of levels, even segments where they fit, else binomial
ones, then the fewest segments. With several loops, it recomputes the loops that
are cheap to re-run (`python -m benchmarks.memory loops`: an elementwise loop
instead of a matmul loop that tapes as much, 173 against 203 ms a step).

    plan = checkpoint.plan(program, wrt=(0,), memory_budget=store_all_bytes // 8)
    gradient = egad.value_and_grad(plan.apply(program), wrt=(0,))

`while` loops (`_split_while`): each segment is an inner `while` that also counts
its trips and stops at k, so the split needs no trip count and holds for any T
known only at run time: ceil(T/k) x S + k x R bytes. `plan` picks k for the trip
count the loop runs on the example inputs, and makes the policy online
(egad/ad/online.py): the segments start at k trips and double in length whenever
the checkpoints hold two segments' residual bytes, so a run of more trips than
planned keeps O(sqrt(T)) bytes (within sqrt(3) of the best every-k for its T), not
one more checkpoint per k trips. `segment(program, loop, k)` without `online=`
keeps k fixed.

Scope: top-level `for` loops (over static lengths, or over a range known only at
run time, whose segments are counted then: ceil(T/k)) and top-level `while` loops;
`for` loops with per-trip outputs (`scan` ys) need a static T that k divides, and
each deeper level's k must divide the one above; binomial cuts take `for` loops of
static T without ys only; online segments are for `while` loops (the outermost
level; deeper levels keep their k).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import source
from ..errors import EgadError, message
from ..cost_model import concrete, nbytes
from ..critical_path import region_seconds
from ..frontend import context
from ..frontend import numpy_api as enp
from ..frontend.primitives import record
from ..frontend.tracer import Tracer
from ..ir.program import Program, Region, walk_bindings
from ..ir.types import TapeType, TensorType
from ..ir.verify import verify
from . import binomial
from . import online as online_rule
from .online import Doubling
from .transform import CHECKPOINT_ATTR, clone_region

_COUNTER = TensorType((), "int64", weak=True)
_SCHEDULE = TensorType((), "int64")  # an online segment length or count, carried by the outer while loop
SEGMENT_BOUNDS_BYTES = 16  # AD tapes each segment loop's bounds (two int64) beside its state


@dataclasses.dataclass(frozen=True)
class LoopPolicy:
    """One loop's policy: `every` = k (checkpoint every k trips), None for store-all;
    `nested` = (k1, k2, ...): each segment checkpointed again every k1 trips, ..."""

    loop: int  # index among the program's top-level `for` bindings
    where: str  # the user's source line of the loop
    trips: int
    every: int | None
    residual_bytes: int  # R: bytes taped per trip under store-all
    state_bytes: int  # S: bytes of the carried state (one checkpoint)
    nested: tuple[int, ...] = ()
    kind: str = "for"  # "for", or "while": its trips are those it ran on the example inputs
    cuts: tuple[tuple[int, ...], ...] = ()  # binomial: each level's cut positions (egad/ad/binomial.py)
    online: bool = False  # a `while` loop's outermost segments double as it runs on (egad/ad/online.py)
    observed: bool = False  # a `for` over a range known only at run time: `trips` is its count on the example inputs

    @property
    def chain(self) -> tuple[int, ...]:
        """The segment length of every level, outermost first (empty for store-all and binomial)."""
        return () if self.every is None else (self.every, *self.nested)

    @property
    def checkpoint_bytes(self) -> int:
        """Bytes a segment tapes at its start: the state, and its loop's two int64 bounds."""
        return self.state_bytes + SEGMENT_BOUNDS_BYTES

    @property
    def checkpointed(self) -> bool:
        """Whether the adjoint recomputes the loop (every-k or binomial) instead of storing all."""
        return self.every is not None or bool(self.cuts)

    @property
    def doubling(self) -> Doubling | None:
        """The online rule of this policy's outermost segments, if it has one."""
        return Doubling(self.checkpoint_bytes, self.residual_bytes) if self.online else None

    @property
    def recomputations(self) -> int:
        """Extra forward passes over the loop that the adjoint runs (one per level)."""
        return len(self.cuts) or len(self.chain)

    @property
    def bytes(self) -> int:
        """Tape bytes under this policy (a trip count known only at run time counts as 1)."""
        if self.cuts:
            return binomial.peak_bytes(self.cuts, self.checkpoint_bytes, self.residual_bytes)
        if self.every is None:
            return (1 if self.trips is None else self.trips) * self.residual_bytes
        if self.online:  # the outermost segments as the doubling rule runs them; each level below them even
            return self.doubling.peak_bytes(self.trips, self.every, lambda length: self._even_bytes(length, self.nested))
        return self._even_bytes(self.trips, self.chain)

    def _even_bytes(self, trips: int, chain: tuple[int, ...]) -> int:
        """Tape bytes of `trips` trips cut every chain[0] trips, each segment every chain[1], ..."""
        if not chain:
            return trips * self.residual_bytes
        states = math.ceil(trips / chain[0]) + sum(outer // inner for outer, inner in zip(chain, chain[1:]))
        return states * self.checkpoint_bytes + min(chain[-1], trips) * self.residual_bytes

    def __str__(self) -> str:
        if self.trips is None:
            need = "example inputs to count its trips on"
            return (f"{self.kind} loop at {self.where} (trip count known only at run time): store-all, "
                    f"{readable_bytes(self.residual_bytes)} of tapes per trip (segmenting needs {need})")
        policy = "store-all" if self.every is None else f"every-{self.every} checkpoints"
        if self.online:
            policy = (f"online checkpoints: segments of {self.every} trips, doubling whenever the checkpoints "
                      f"hold {online_rule.GROWTH} segments' residual bytes")
        if self.nested:
            policy += "".join(f", then every {k} within each" for k in self.nested)
            policy += f" ({self.recomputations} extra forward passes)"
        if self.cuts:
            lengths = np.diff(self.cuts[0])
            policy = (f"binomial checkpoints: {len(lengths)} segments of {lengths.max()} down to "
                      f"{lengths.min()} trips" + "".join(f", cut into {len(level) - 1} at level {n + 2}"
                                                          for n, level in enumerate(self.cuts[1:]))
                      + f" ({self.recomputations} extra forward pass{'es' if self.recomputations > 1 else ''})")
        trips = f"{self.trips} trips" if self.kind == "for" and not self.observed \
            else f"{self.trips} trips on the example inputs"
        line = (f"{self.kind} loop at {self.where} ({trips}): {policy}, {readable_bytes(self.bytes)} of tapes "
                f"(store-all {readable_bytes(self.trips * self.residual_bytes)})")
        if self.online:
            line += "; a run of more trips lengthens its segments too (tapes grow as sqrt(trips), not trips)"
        elif (self.kind == "while" or self.observed) and self.every is not None:
            line += f"; a run of more trips keeps one more checkpoint per {self.every}"
        return line


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    budget: int | None
    policies: tuple[LoopPolicy, ...]
    note: str = ""
    # the store-all gradient the plan measured its residuals on (None without a budget):
    # egad.optimize gives it to the e-graph to checkpoint on its own (api._egraph_policies)
    store_all: Program | None = dataclasses.field(default=None, compare=False, repr=False)
    # peak tape bytes of the planned gradient run on the example inputs, measured where
    # the plan's own count is an estimate (`_counted_exactly`); None where it is exact
    measured: int | None = None

    @property
    def store_all_bytes(self) -> int:
        return sum((1 if p.trips is None else p.trips) * p.residual_bytes for p in self.policies)

    @property
    def planned_bytes(self) -> int:
        return sum(p.bytes for p in self.policies)

    @property
    def checkpoints(self) -> bool:
        """Whether the plan checkpoints any loop (store-all did not fit the budget)."""
        return any(p.checkpointed for p in self.policies)

    def apply(self, program: Program) -> Program:
        """`program` with every checkpointed loop segmented (loops from the last, so
        that the indices of the earlier ones stay valid)."""
        for policy in sorted(self.policies, key=lambda p: -p.loop):
            if policy.cuts:
                program = segment_at(program, policy.loop, policy.cuts)
            elif policy.every is not None:
                program = segment(program, policy.loop, *policy.chain, online=policy.doubling)
        return program

    def lines(self) -> list[str]:
        head = (f"memory budget {readable_bytes(self.budget)} for tapes; store-all needs "
                f"{readable_bytes(self.store_all_bytes)}, this plan {readable_bytes(self.planned_bytes)}"
                if self.budget is not None
                else "store-all (every taped residual kept; pass memory_budget= to checkpoint loops)")
        if self.budget is not None and any(p.trips is None and p.residual_bytes for p in self.policies):
            head += (", a loop of trips known only at run time counted as one trip (its tapes grow with its "
                     "trips, whatever the budget)")
        notes = [self.note] if self.note else []
        if self.measured is not None:
            head += f"; measured on the example inputs: {readable_bytes(self.measured)}"
            if self.budget is not None and self.measured > self.budget:
                notes.append(f"the example inputs tape {readable_bytes(self.measured)}, above the budget: only "
                             f"top-level loops of known trips are checkpointed; loops inside branches, loops "
                             f"of trips known only at run time and loops nested in them are counted from "
                             f"estimates")
        return [head, *(str(p) for p in self.policies if p.residual_bytes), *notes]


def top_level_loops(program: Program) -> list:
    """The program's top-level `for` and `while` bindings, in order (what
    `LoopPolicy.loop` indexes)."""
    return [b for b in program.region.bindings if b.op in ("for", "while")]


def segment(program: Program, loop: int, k: int, *deeper: int, online: Doubling | None = None) -> Program:
    """`program` with its `loop`-th top-level loop split into segments of at most k
    trips (ceil(T/k) of them); the inner (segment) loop is marked for recomputation.
    Each of `deeper` (k1 > k2 > ..., each dividing the one before) splits the
    innermost segment loop again, so that re-running a segment tapes only its
    sub-segments' states: one more forward pass per level, far less memory (module
    docstring). A `while` loop is split the same way, its segments counting their
    trips (`_split_while`); with `online`, its outermost segments start at k trips
    and double in length as the loop runs on (egad/ad/online.py)."""
    loops = top_level_loops(program)
    if not 0 <= loop < len(loops):
        raise EgadError(message(f"there is no top-level loop number {loop}",
                                where=f"program {program.name} ({len(loops)} top-level for/while loops)"))
    if loops[loop].attrs.get("max_iters") is not None:
        raise EgadError(message("checkpointing a while loop bounded by max_iters is not supported: its segments "
                                "would each count to the bound", where=f"the loop at {loops[loop].loc.long()}",
                                instead="keep it store-all (plan does), or bound it in its condition instead"))
    if online is not None and loops[loop].op != "while":
        raise EgadError(message("online (doubling) segments are for `while` loops, whose trip count is not known "
                                "before they run", where=f"the loop at {loops[loop].loc.long()}",
                                instead="checkpoint a `for` loop every k trips (segment(program, loop, k)) or at "
                                        "binomial cuts (segment_at)"))
    chain = (k, *deeper)
    for outer_k, inner_k in zip(chain, chain[1:]):
        if not 1 <= inner_k < outer_k or outer_k % inner_k:
            raise EgadError(message(f"cannot checkpoint every {inner_k} trips within segments of {outer_k}",
                                    where=f"the loop at {loops[loop].loc.long()}",
                                    instead="give each deeper level a k that divides the level above and is smaller"))
    region = _split_in_region(program.region, loops[loop], chain, mark_outer=False, online=online)
    return verify(dataclasses.replace(program, region=region))


def segment_at(program: Program, loop: int, levels: tuple[tuple[int, ...], ...]) -> Program:
    """`program` with its `loop`-th top-level loop (a `for` with a static trip count T
    and no per-trip outputs) cut at uneven positions: `levels[0]` are where its
    segments start (0 and T included), each deeper level's cuts refine the one above
    (egad/ad/binomial.py computes binomial ones). Every loop inside the outermost is
    marked for recomputation, as `segment` marks them."""
    loops = top_level_loops(program)
    if not 0 <= loop < len(loops):
        raise EgadError(message(f"there is no top-level loop number {loop}",
                                where=f"program {program.name} ({len(loops)} top-level for/while loops)"))
    binding = loops[loop]
    trips = _trips(binding) if binding.op == "for" else None
    where = f"the loop at {binding.loc.long()}"
    if trips is None:
        raise EgadError(message("cutting a loop at given positions needs a `for` loop with a static trip count",
                                where=where, instead="use segment(program, loop, k) (every-k), which also splits "
                                                     "`while` loops and loops over ranges known only at run time"))
    if len(binding.outputs) > binding.attrs["n_state"]:
        raise EgadError(message("a loop with per-trip outputs cannot be cut into segments of different lengths",
                                where=where, instead="use segment(program, loop, k) with k dividing the trip count"))
    if not levels:
        raise EgadError(message("no cut positions given", where=where,
                                instead="give at least one level: segment_at(program, loop, ((0, 10, 16),))"))
    above: set[int] = {0, trips}
    for level in levels:
        if list(level) != sorted(set(level)) or level[0] != 0 or level[-1] != trips or not above <= set(level):
            raise EgadError(message(f"cut positions {list(level)} are not a refinement of {sorted(above)} "
                                    f"within 0..{trips}", where=where,
                                    instead="give every level's positions sorted, from 0 to the trip count, "
                                            "including the level above's"))
        above = set(level)
    if binding.attrs.get("reverse"):  # a reverse loop runs its last segment first: mirror the cuts
        levels = tuple(tuple(trips - p for p in reversed(level)) for level in levels)
    new_bindings, replacement = _cut_loop(binding, tuple(levels))
    region = _replace_loop(program.region, binding, new_bindings, replacement)
    return verify(dataclasses.replace(program, region=region))


def _cut_loop(binding, levels: tuple[tuple[int, ...], ...]) -> tuple[list, list]:
    """The bindings that replace the `for` `binding` cut at `levels` (`segment_at`),
    and the values that replace its outputs. Level d's loop runs over its segment
    numbers; a segment of level d - 1 holds its segments `firsts[d][j]` up to
    `firsts[d][j + 1]`; the innermost loop runs the trips of one segment of the last
    level, `lo + cuts[i]` up to `lo + cuts[i + 1]`."""
    n_state = binding.attrs["n_state"]
    body = binding.regions[0]
    lo = binding.inputs[0]
    inits, invariants = binding.inputs[2:2 + n_state], binding.inputs[2 + n_state:]
    state_types = [v.type for v in binding.outputs[:n_state]]
    hints = [p.hint for p in body.params[1:1 + n_state]]
    firsts = [None] + [np.searchsorted(np.asarray(inner), np.asarray(outer)) for outer, inner in zip(levels, levels[1:])]
    plain_attrs = {"n_state": n_state, "reverse": binding.attrs.get("reverse", False), "trip_dim": None}
    loop_attrs = {**plain_attrs, CHECKPOINT_ATTR: True}

    def mean(depth: int, inner: int | None) -> int:
        """The trips of the loop inside a segment of level `depth`, on average (the cost
        model's guess; its bounds are read from tables): the segments of level `inner`
        it holds, or (None) the loop's own trips."""
        held = levels[-1][-1] if inner is None else len(levels[inner]) - 1
        return max(1, round(held / (len(levels[depth]) - 1)))

    def segments(depth: int) -> Region:
        """The body of level `depth`'s loop: one segment, run as the loop inside it."""
        with context.open_region("segment", top_level=True) as seg:
            index = Tracer(seg, seg.add_param(_COUNTER, "segment"))
            state = [Tracer(seg, seg.add_param(t, hint)) for t, hint in zip(state_types, hints)]
            invs = [Tracer(seg, seg.add_param(v.type, v.hint)) for v in invariants]
            base = Tracer(seg, seg.add_param(lo.type, "lo"))
            if depth == len(levels) - 1:
                starts = enp.asarray(np.asarray(levels[depth], np.int64))
                inner = record("for", [base + enp.take(starts, index), base + enp.take(starts, index + 1),
                                       *state, *invs], {**binding.attrs, **loop_attrs, "trip_guess": mean(depth, None)},
                               state_types, (clone_region(body),))
            else:
                first = enp.asarray(np.asarray(firsts[depth + 1], np.int64))
                inner = record("for", [enp.take(first, index), enp.take(first, index + 1), *state, *invs, base],
                               {**loop_attrs, "trip_guess": mean(depth, depth + 1)}, state_types,
                               (segments(depth + 1),))
            results = [seg.resolve(x) for x in inner]
        return Region(tuple(seg.params), seg.bindings, tuple(results), "segment")

    with context.open_region("program", top_level=True) as top, source.located_at(binding.loc):
        outer_body = segments(0)
        count = len(levels[0]) - 1
        outer = record("for", [0, count, *(Tracer(top, v) for v in inits), *(Tracer(top, v) for v in invariants),
                               Tracer(top, lo)],
                       {**plain_attrs, "trip_dim": count}, state_types, (outer_body,))
        replacement = [top.resolve(x) for x in outer]
    return top.bindings, replacement


def _split_in_region(region: Region, binding, chain: tuple[int, ...], mark_outer: bool,
                     online: Doubling | None = None) -> Region:
    """`region` with `binding` (a `for` or `while` of it) split every chain[0] trips (a
    `while` with `online`: starting at chain[0] and doubling), and the resulting
    segment loop split again by the rest of `chain`."""
    if binding.op == "for":
        new_bindings, replacement = _split_loop(binding, chain[0], mark_outer)
    else:
        new_bindings, replacement = _split_while(binding, chain[0], mark_outer, online)
    if chain[1:]:
        outer = next(b for b in new_bindings if b.op == binding.op)
        *other_regions, segment_region = outer.regions  # a while's body comes after its cond
        inner = next(b for b in segment_region.bindings if b.op == binding.op and b.attrs.get(CHECKPOINT_ATTR))
        split = dataclasses.replace(
            outer, regions=(*other_regions, _split_in_region(segment_region, inner, chain[1:], True)))
        new_bindings = [split if b is outer else b for b in new_bindings]
    return _replace_loop(region, binding, new_bindings, replacement)


def _replace_loop(region: Region, binding, new_bindings: list, replacement: list) -> Region:
    """`region` with `binding` replaced by `new_bindings`, its outputs by `replacement`."""
    renamed = {old.uid: new for old, new in zip(binding.outputs, replacement)}
    bindings = []
    for b in region.bindings:
        if b is binding:
            bindings += new_bindings
        else:
            bindings.append(dataclasses.replace(b, inputs=tuple(renamed.get(v.uid, v) for v in b.inputs)))
    results = tuple(renamed.get(v.uid, v) for v in region.results)
    return Region(region.params, bindings, results, region.name)


def _split_loop(binding, k: int, mark_outer: bool) -> tuple[list, list]:
    """The bindings that replace the `for` `binding` split every k trips (an outer loop
    over segments around an inner loop marked for recomputation), and the values
    that replace its outputs. `mark_outer` marks the outer loop too: it is itself
    the segment of a level above."""
    trips = binding.attrs.get("trip_dim")
    n_state = binding.attrs["n_state"]
    body = binding.regions[0]
    ys_types = [v.type for v in binding.outputs[n_state:]]
    if not isinstance(trips, int) and ys_types:
        raise EgadError(message("checkpointing a loop with per-trip outputs needs a static trip count (every "
                                "segment stacks k rows)", where=f"the loop at {binding.loc.long()}",
                                instead="loop over a static range, or carry what the loop stacks in its state"))
    if not k >= 1 or (isinstance(trips, int) and (k > max(trips, 1) or (ys_types and trips % k))):
        raise EgadError(message(f"cannot checkpoint every {k} trips of a loop of {trips} trips"
                                + (" with per-trip outputs (k must divide the trip count)" if ys_types else ""),
                                where=f"the loop at {binding.loc.long()}"))
    lo, hi = binding.inputs[:2]
    inits, invariants = binding.inputs[2:2 + n_state], binding.inputs[2 + n_state:]
    state_types = [v.type for v in binding.outputs[:n_state]]

    with context.open_region("program", top_level=True) as top, source.located_at(binding.loc):
        with context.open_region("segment", parent=top) as seg:
            index = seg.add_param(_COUNTER, "segment")
            state = [seg.add_param(t, p.hint) for t, p in zip(state_types, body.params[1:1 + n_state])]
            invs = [seg.add_param(v.type, v.hint) for v in invariants]
            seg_lo_param, hi_param = seg.add_param(lo.type, "lo"), seg.add_param(hi.type, "hi")
            start = Tracer(seg, seg_lo_param) + Tracer(seg, index) * k
            stop = enp.minimum(start + k, Tracer(seg, hi_param))
            inner = record("for", [start, stop, *(Tracer(seg, v) for v in state), *(Tracer(seg, v) for v in invs)],
                           # a static trip_dim only where every segment has k trips (it sizes ys, here and in AD)
                           {**binding.attrs, "trip_dim": k if isinstance(trips, int) and trips % k == 0 else None,
                            "trip_guess": k, CHECKPOINT_ATTR: True},
                           state_types + [TensorType((k,) + t.shape[1:], t.dtype) for t in ys_types],
                           (clone_region(body),))
            results = [seg.resolve(x) for x in inner]
        outer_region = Region(tuple(seg.params), seg.bindings, tuple(results), "segment")
        if isinstance(trips, int):
            segments = math.ceil(trips / k)
        else:  # trips known only at run time (an egad.Spec's "T"): ceil(max(hi - lo, 0) / k) segments
            segments = (enp.maximum(Tracer(top, hi) - Tracer(top, lo), 0) + (k - 1)) // k
        guess = binding.attrs.get("trip_guess")
        outer = record("for", [0, segments, *(Tracer(top, v) for v in inits), *(Tracer(top, v) for v in invariants),
                               Tracer(top, lo), Tracer(top, hi)],
                       {"n_state": n_state, "reverse": binding.attrs.get("reverse", False),
                        "trip_dim": segments if isinstance(segments, int) else None,
                        **({"trip_guess": max(1, math.ceil(guess / k))} if guess else {}),
                        **({CHECKPOINT_ATTR: True} if mark_outer else {})},
                       state_types + [TensorType((segments, k) + t.shape[1:], t.dtype) for t in ys_types],
                       (outer_region,))
        outputs = outer[:n_state] + [enp.reshape(y, t.shape) for y, t in zip(outer[n_state:], ys_types)]
        replacement = [top.resolve(x) for x in outputs]
    return top.bindings, replacement


def _split_while(binding, k: int, mark_outer: bool, online: Doubling | None = None) -> tuple[list, list]:
    """The bindings that replace the `while` `binding` split every k trips, and the
    values that replace its outputs:

        while cond(s): s = body(s)
        ->  while cond(s):                                  # outer: state taped per segment
                (_, s) = while i < k and cond(s): (i, s) = (i + 1, body(s))   # inner: "checkpoint"

    The inner loop counts its trips in one more state value; it starts each segment
    with cond(s) true, so it runs 1..k trips, and the outer loop ceil(T/k) trips for
    any T (known only at run time). With `online`, the outer loop also carries the
    segment length L (first k) and the number of segments run n, and the inner loop
    stops at L: after each segment, L doubles where `online.grows(n, L)`
    (egad/ad/online.py). `mark_outer` marks the outer loop too."""
    if not k >= 1:
        raise EgadError(message(f"cannot checkpoint every {k} trips of a while loop",
                                where=f"the loop at {binding.loc.long()}"))
    n_state = binding.attrs["n_state"]
    cond, body = binding.regions
    inits, invariants = binding.inputs[:n_state], binding.inputs[n_state:]
    state_types = [v.type for v in binding.outputs]
    hints = [p.hint for p in body.params[:n_state]]
    trip, length, segments = ("trip", _COUNTER), ("length", _SCHEDULE), ("segments", _SCHEDULE)
    schedule = [length, segments] if online is not None else []  # what the outer loop carries beside the state
    limit = [length] if online is not None else []  # the inner loop's trip limit, when not the constant k

    def extended(name: str, region: Region, results_of, before=(), after=(), last=()) -> Region:
        """`region` (a cond or body over state and invariants) with more params, each
        (hint, type): `before` the state, `after` it and `last` after the invariants;
        `results_of(extra, results)` makes the new results from those params (by hint)
        and the region's own results."""
        with context.open_region(name, top_level=True) as builder:
            def params(pairs):
                return [builder.add_param(t, hint) for hint, t in pairs]

            leading, state = params(before), params(zip(hints, state_types))
            following, invs, trailing = params(after), params((v.hint, v.type) for v in invariants), params(last)
            copied = clone_region(region, {p.uid: v for p, v in zip(region.params, state + invs)})
            builder.bindings.extend(copied.bindings)
            extra = {v.hint: Tracer(builder, v) for v in leading + following + trailing}
            results = [builder.resolve(x) for x in results_of(extra, [Tracer(builder, v) for v in copied.results])]
        return Region(tuple(builder.params), builder.bindings, tuple(results), name)

    inner_cond = extended("cond", cond, lambda extra, out: [enp.logical_and(extra["trip"] < extra.get("length", k),
                                                                            out[0])], before=[trip], last=limit)
    inner_body = extended("body", body, lambda extra, out: [extra["trip"] + 1, *out], before=[trip], last=limit)
    with context.open_region("program", top_level=True) as top, source.located_at(binding.loc):
        with context.open_region("segment", parent=top) as seg:
            state = [Tracer(seg, seg.add_param(t, hint)) for t, hint in zip(state_types, hints)]
            carried = {hint: Tracer(seg, seg.add_param(t, hint)) for hint, t in schedule}
            invs = [Tracer(seg, seg.add_param(v.type, v.hint)) for v in invariants]
            inner = record("while", [0, *state, *invs, *(carried[hint] for hint, _ in limit)],
                           {**binding.attrs, "n_state": n_state + 1, "trip_guess": k, CHECKPOINT_ATTR: True},
                           [_COUNTER] + state_types, (inner_cond, inner_body))
            next_schedule = []
            if online is not None:
                run, current = carried["segments"] + 1, carried["length"]
                next_schedule = [enp.where(online.grows(run, current), current * 2, current), run]
            results = [seg.resolve(x) for x in inner[1:] + next_schedule]
        outer_body = Region(tuple(seg.params), seg.bindings, tuple(results), "segment")
        outer_cond = extended("cond", cond, lambda extra, out: out, after=schedule)
        starts = [enp.asarray(np.int64(k)), enp.asarray(np.int64(0))] if online is not None else []
        outer = record("while", [*(Tracer(top, v) for v in inits), *starts, *(Tracer(top, v) for v in invariants)],
                       {**{k_: v for k_, v in binding.attrs.items() if k_ != CHECKPOINT_ATTR},
                        "n_state": n_state + len(starts), **({CHECKPOINT_ATTR: True} if mark_outer else {})},
                       state_types + [t for _, t in schedule], (outer_cond, outer_body))
        replacement = [top.resolve(x) for x in outer[:n_state]]
    return top.bindings, replacement


def plan(program: Program, wrt=(0,), memory_budget: int | None = None, has_aux: bool = False,
         example_args=None, target="cpu") -> CheckpointPlan:
    """One policy per top-level loop, together the least recomputation that fits the
    budget: a small knapsack over (time, bytes) (DESIGN §6). Each loop's options are
    store-all, every-k chains and binomial cuts over 1..MAX_LEVELS levels; an option's
    time is the forward passes it adds, each the loop's trips times the cost model's
    time of one trip on `target` (`_Option`). Among equal times, even segments (k
    dividing the trip count first) before binomial ones, then the fewest segments. When
    even the least memory these policies reach is above the budget, that least. A
    `while` loop is planned for the trip count it runs on `example_args` (interpreted
    once); without them it stays store-all."""
    from .api import value_and_grad

    if memory_budget is None:  # store-all: nothing to measure
        return CheckpointPlan(None, ())
    gradient = value_and_grad(program, wrt=wrt, has_aux=has_aux)
    loops = top_level_loops(program)
    trips = _trip_counts(program, loops, example_args)
    policies = [LoopPolicy(n, str(b.loc), trips[n], None, residual, _nbytes_all(b.outputs[:b.attrs["n_state"]]),
                           kind=b.op, observed=b.op == "for" and _trips(b) is None and trips[n] is not None)
                for n, (b, residual) in enumerate(zip(loops, _residual_bytes(program, gradient)))]
    if sum(p.bytes for p in policies) <= memory_budget:
        return _measured(CheckpointPlan(memory_budget, tuple(policies), store_all=gradient), program, wrt, has_aux,
                         example_args)
    options = [_options(policy, binding, memory_budget, target) for policy, binding in zip(policies, loops)]
    chosen = _cheapest_within(options, memory_budget)
    note = ""
    if chosen is None:  # nothing fits: each loop's least memory
        chosen = [min(loop_options, key=lambda o: (o.policy.bytes, o.key)) for loop_options in options]
        note = (f"the budget is below what checkpointing these loops reaches "
                f"({readable_bytes(sum(o.policy.bytes for o in chosen))}): the least-memory plan is used")
    return _measured(CheckpointPlan(memory_budget, tuple(o.policy for o in chosen), note, store_all=gradient),
                     program, wrt, has_aux, example_args)


def _measured(plan: CheckpointPlan, program: Program, wrt, has_aux: bool, example_args) -> CheckpointPlan:
    """`plan` with the tape bytes its gradient holds on `example_args`, interpreted,
    where the plan counts from estimates (`_counted_exactly`)."""
    if example_args is None or _counted_exactly(program, [p.trips for p in plan.policies]):
        return plan
    from ..interp import RunStats, interpret
    from .api import value_and_grad

    stats = RunStats()
    interpret(value_and_grad(plan.apply(program), wrt=wrt, has_aux=has_aux), *example_args, stats=stats)
    return dataclasses.replace(plan, measured=stats.peak_tape_bytes)


def _counted_exactly(program: Program, trips: list) -> bool:
    """Whether the plan's bytes are exact: every loop is a top-level one of known trips
    (static, or a `while` loop's on the example inputs) or nested in one with a static
    trip count. A loop inside a top-level branch is not planned, a loop over a run-time
    range is counted as one trip, and a nested loop of run-time trips by a guess
    (`_trip_estimate`)."""
    loops = iter(trips)
    for binding in program.region.bindings:
        if binding.op in ("for", "while") and next(loops) is None:  # a range known only at run time, unseen
            return False
        inside = [b for region in binding.regions for b in walk_bindings(region) if b.op in ("for", "while")]
        if binding.op in ("if", "switch") and inside:
            return False
        if binding.op in ("for", "while") and any(b.op == "while" or _trips(b) is None for b in inside):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class _Option:
    """One loop's policy and what it costs: `key` = (seconds of the forward passes it
    adds, how uneven its segments are (`_evenness`), its outermost segments), compared
    in that order and summed over loops."""

    policy: LoopPolicy
    key: tuple[float, int, int]


def _options(policy: LoopPolicy, binding, budget: int, target) -> list[_Option]:
    """The policies one loop may take, without those another takes in fewer bytes at
    no more cost: store-all, every-k chains, binomial cuts (a `for` loop without ys)."""
    if not policy.residual_bytes or not isinstance(policy.trips, int) or policy.trips < 2 \
            or binding.attrs.get("max_iters") is not None:  # `segment` refuses a bounded while loop
        return [_Option(policy, (0.0, 0, 0))]
    has_ys = len(binding.outputs) > binding.attrs["n_state"]
    # a `while` loop's trip count is only a sample: its segments double on longer runs (egad/ad/online.py)
    candidates = [policy] + [dataclasses.replace(policy, every=chain[0], nested=chain[1:],
                                                 online=policy.kind == "while")
                             for chain in _chains(policy.trips, has_ys)]
    if policy.observed and has_ys:  # each segment stacks k rows: k must divide a trip count known only at run time
        return [_Option(policy, (0.0, 0, 0))]
    if binding.op == "for" and not has_ys and not policy.observed:  # cuts at static positions
        candidates += _binomial(policy, budget)
    pass_seconds = policy.trips * region_seconds(binding.regions[-1], target)  # a while's body follows its cond
    options = [_Option(c, (c.recomputations * pass_seconds, 2 - _evenness(c) if c.checkpointed else 0,
                           _segments(c))) for c in candidates]
    return _pareto(options)


def _segments(policy: LoopPolicy) -> int:
    """How many segments the outermost level of a checkpointed policy cuts (0: store-all)."""
    if policy.cuts:
        return len(policy.cuts[0]) - 1
    return 0 if policy.every is None else math.ceil(policy.trips / policy.every)


def _pareto(options: list[_Option]) -> list[_Option]:
    """The options no other beats in both bytes and key (fewest bytes first)."""
    kept: list[_Option] = []
    for option in sorted(options, key=lambda o: (o.policy.bytes, o.key)):
        if not kept or option.key < kept[-1].key:
            kept.append(option)
    return kept


def _cheapest_within(options: list[list[_Option]], budget: int) -> list[_Option] | None:
    """One option per loop, within `budget` bytes in all, with the least summed key;
    None when none fits. Loop by loop, the combinations kept are those within the
    budget that no other beats in both bytes and key."""
    front: list[tuple[int, tuple, list[_Option]]] = [(0, (0.0, 0, 0), [])]
    for loop_options in options:
        grown = [(used + o.policy.bytes, tuple(a + b for a, b in zip(key, o.key)), chosen + [o])
                 for used, key, chosen in front for o in loop_options if used + o.policy.bytes <= budget]
        front = []
        for used, key, chosen in sorted(grown, key=lambda g: (g[0], g[1])):
            if not front or key < front[-1][1]:
                front.append((used, key, chosen))
        if not front:
            return None
    return min(front, key=lambda f: f[1])[2]


MAX_LEVELS = 6  # log2 of a million trips is 20; six levels of 1/10 each already reach a million


def _chains(trips: int, has_ys: bool) -> list[tuple[int, ...]]:
    """Every chain of segment lengths a loop of `trips` trips can be checkpointed with:
    one level of any k (k dividing trips when the loop has per-trip outputs), and
    deeper levels under a k that divides trips, each k dividing the one above."""
    singles = [(k,) for k in range(1, trips) if not has_ys or trips % k == 0]
    chains, frontier = list(singles), [(k,) for k in range(2, trips) if trips % k == 0]
    for _ in range(MAX_LEVELS - 1):
        frontier = [chain + (k,) for chain in frontier for k in range(1, chain[-1]) if chain[-1] % k == 0]
        chains += frontier
        frontier = [chain for chain in frontier if chain[-1] > 1]
    return chains


BINOMIAL_ROOM_STEP = 1.5  # binomial options per level: the least memory, then rooms this much larger


def _binomial(policy: LoopPolicy, budget: int) -> list[LoopPolicy]:
    """Per number of levels, binomial cuts with the fewest segments within each of a
    few rooms: the level's least memory, rooms `BINOMIAL_ROOM_STEP` times larger up to
    store-all, and the whole budget (what one loop alone may take)."""
    out = []
    trips, state, residual = policy.trips, policy.checkpoint_bytes, policy.residual_bytes
    for levels in range(1, MAX_LEVELS + 1):
        room = binomial.least_memory(trips, levels, state, residual)
        rooms = {budget} if budget >= room else set()
        while room < trips * residual:
            rooms.add(room)
            room = math.ceil(room * BINOMIAL_ROOM_STEP)
        out += [dataclasses.replace(policy, cuts=binomial.cuts(trips, levels, state, residual, room))
                for room in sorted(rooms)]
    return out


def _evenness(policy: LoopPolicy) -> int:
    """2 for even segments of k dividing the trip count, 1 for even ones with a short
    last segment, 0 for binomial (uneven) cuts: how static the segments' shapes are."""
    if policy.cuts:
        return 0
    return 1 + (policy.trips % policy.every == 0)


def _trip_counts(program: Program, loops: list, example_args) -> list[int | None]:
    """Per top-level loop, its trip count: a `for` loop's static one, else its trips
    on `example_args` (a loop over an `egad.Spec`'s "T"); a `while` loop's on
    `example_args`, or as observed there before (its `trip_guess`,
    egad/trip_counts.py); None without them."""
    counts = [b.attrs.get("trip_guess") if b.op == "while" else _trips(b) for b in loops]
    # a trip_guess is a mean, and at least 1 (the cost model's guess): the example inputs say exactly
    if example_args is not None and any(b.op == "while" or c is None for b, c in zip(loops, counts)):
        from ..interp import RunStats, interpret

        stats = RunStats()
        interpret(program, *example_args, stats=stats)
        seen = {**stats.for_trips, **stats.while_trips}
        counts = [seen.get(id(b), [None])[0] if b.op == "while" or c is None else c for b, c in zip(loops, counts)]
    return counts


def stacked_bytes(program: Program) -> int:
    """Bytes of every loop's stacked per-trip outputs (ys), each loop counted once."""
    return sum(_ys_bytes(b) for b in walk_bindings(program.region) if b.op == "for")


def held_bytes(program: Program) -> int:
    """A conservative size of what a program holds besides its tapes: every value
    computed at its top level (as if all were alive at once) plus the stacked
    per-trip outputs of loops inside. Rewrites add to it: batching the input
    projection out of a loop computes it for every step at once, and batching a
    weight gradient stacks each step's operands."""
    top = sum(_nbytes_all(b.outputs) for b in program.region.bindings)
    nested = sum(_ys_bytes(b) for b in walk_bindings(program.region)
                 if b.op == "for" and b not in program.region.bindings)
    return top + nested


def _trips(binding):
    trips = binding.attrs.get("trip_dim")
    return trips if isinstance(trips, int) else None


def _residual_bytes(program: Program, gradient: Program) -> list[int]:
    """Per top-level primal loop, the bytes its forward copy in `gradient` tapes per
    trip. AD copies loops in order and keeps their source lines, and all forward
    copies come before the adjoint loops: the n-th primal loop of a line is the n-th
    gradient loop of that line."""
    by_line: dict[tuple[str, str], list] = {}
    for b in gradient.region.bindings:
        if b.op in ("for", "while"):
            by_line.setdefault((b.op, str(b.loc)), []).append(b)
    seen: dict[tuple[str, str], int] = {}
    out = []
    for b in top_level_loops(program):
        line = (b.op, str(b.loc))
        n = seen.get(line, 0)
        seen[line] = n + 1
        copies = by_line.get(line, [])
        copy = copies[n] if n < len(copies) else None
        taped = copy is not None and any(isinstance(v.type, TapeType) for v in copy.outputs)
        out.append(_pushed_bytes(copy.regions[-1]) if taped else 0)  # the body: a while's comes after its cond
    return out


def _trip_estimate(loop) -> int:
    """A loop's trips as far as the program says: a `for` loop's static count, else
    its `trip_guess` (a `while` loop's trips on the example inputs,
    egad/trip_counts.py), else 1."""
    trips = _trips(loop) if loop.op == "for" else None
    return trips if trips is not None else loop.attrs.get("trip_guess") or 1


def _pushed_bytes(region: Region) -> int:
    """Bytes pushed onto tapes by one run of `region`, nested loops counted by their
    estimated trips (`_trip_estimate`)."""
    total = 0
    for b in region.bindings:
        if b.op == "tape_push":
            total += _nbytes(b.inputs[1].type)
        elif b.op in ("for", "while"):
            total += _trip_estimate(b) * _pushed_bytes(b.regions[-1])  # the body: a while's comes after its cond
        elif b.op in ("if", "switch"):
            total += max((_pushed_bytes(r) for r in b.regions), default=0)
    return total


def _nbytes(t) -> int:
    """Bytes of a tensor type, a symbolic dim counted as 1 (0 for tapes and the like)."""
    if not isinstance(t, TensorType):
        return 0
    return nbytes(concrete(t, lambda d: d if isinstance(d, int) else 1))


def taped_bytes(program: Program) -> int:
    """Bytes the loops push on tapes: each loop's pushes per trip times its estimated
    trips (`_trip_estimate`: a `while` loop's as observed on the example inputs; a
    nested loop counted once, as `held_bytes` counts its stacked outputs). The other
    half of what a program holds: rules/checkpoint.py turns tapes into stacked outputs
    of the same size, which `held_bytes` counts."""
    total = 0
    for loop in walk_bindings(program.region):
        if loop.op in ("for", "while"):
            pushed = sum(_nbytes(b.inputs[1].type) for b in loop.regions[-1].bindings if b.op == "tape_push")
            total += _trip_estimate(loop) * pushed
    return total


def kept_bytes(program: Program) -> int:
    """What a program keeps until it returns, as a memory budget counts it: `held_bytes`
    + `taped_bytes` (stacked rows and the tapes they replace counted alike)."""
    return held_bytes(program) + taped_bytes(program)


def _ys_bytes(loop) -> int:
    """Bytes of a `for` binding's stacked per-trip outputs."""
    return _nbytes_all(loop.outputs[loop.attrs["n_state"]:])


def _nbytes_all(vars_) -> int:
    return sum(_nbytes(v.type) for v in vars_)


def readable_bytes(n) -> str:
    """Bytes for people: 512 B, 3.04 KiB, 40.0 MiB (three digits)."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:#.3g} {unit}"
    return f"{n} B"


def checkpointed_loops(program: Program) -> int:
    """How many loops of `program` (at any depth) are marked for recomputation."""
    return sum(1 for b in walk_bindings(program.region) if b.attrs.get(CHECKPOINT_ATTR))

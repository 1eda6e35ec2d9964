"""egad's extractor: the cheapest program an e-graph holds, by the cost model (DESIGN §6).

    encoding = encode(program); encoding.egraph.run(rules)
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot, CostModel.for_target("llvm"))
    optimized = decode(encoding, snapshot, extraction)

It reads the e-graph as a `Snapshot` (plain e-nodes per class, egraph/snapshot.py),
not through egglog's cost callbacks (DESIGN §6: ~10 us each, and `set_cost` with a
Python model panics in egglog 13.2). Greedy DAG extraction, iterated to a fixed point (extraction-gym's "greedy-dag"): a
candidate for an e-class is one of its nodes plus the sub-DAG it needs, kept as a
map class -> cost entry, so a class reached twice is paid once (adjoints share
forward values; tree cost would be quadratic). A class takes a node when all the
node's inputs have candidates and the union is cheaper than what it had; a node
whose sub-DAG contains its own class would be a cycle and is skipped. Each improved
class re-evaluates its users until nothing improves.

Scope. A node depends on the `Arg`s of the loops it reads (free regions); it can
only be used where those loops' Args are in scope. So candidates are kept per
*context*: the set of loop regions in scope at the use (a loop's body adds its own
region, branches add nothing). A class has one candidate per context it is used in
(normalized to the regions any of its nodes could read, so almost always just one),
and a node is a candidate in a context only if its inputs have candidates there:
nothing out of scope is ever picked. An extraction holds one node per class; a class
used in several contexts takes the node chosen for their intersection (the
outermost use), which is valid for all of them, and users are re-read until stable.

Tapes. Tapes are threaded linearly: each tape value is read by one op or loop, which
pops what was pushed. A loop transformer can union a whole alternative loop with
an old one that pops the same tapes (rules/batching.py, `batch-weight-gradient`),
and choices are made class by class, so an extraction could take one output from
each loop and pop every tape twice. So a tape read by two chosen nodes is resolved
after extraction: extract again with each of those nodes banned in turn, keep the
cheaper (at most `MAX_TAPE_CONFLICTS` times; no extraction without such a read is an
error). Copies that read stacked rows instead of tapes (rules/checkpoint.py) pop
nothing, so two chosen loops with an output in one class (alternatives of one loop:
both would run) are resolved the same way. Classes are chosen one by one, so a copy's
forward loop, cheaper alone, can bind the reverse loop to its dearer copy: for each
loop transformer whose copies are taken, the extraction without any of its loops is
tried too, and, where three or more transformers made copies, the extraction with
each one's copies alone (`_copied_loops_taken`).

Shared alternatives. Choices are priced class by class, so a value several classes
could share (one fused matmul whose slices would replace four: rules/fusion.py) is
charged in full to each and never wins. After the greedy pass, each group of chosen
classes that slices of one unchosen value could serve is tried as a whole: their
current nodes banned, the extraction redone, kept when the program is cheaper
(`MAX_SHARING_TRIES` groups at most).

Cost. Each entry is an op's `Work` (egad/cost_model.py), how often it runs (the trip
guesses of the loops in its free regions and theirs, times the fraction of runs of an
`if` that reach it), and its dispatches and tape bytes. Inside a loop a candidate
also carries the longest path, in latency, from each carried `Arg` (the counter is
not carried: it is known ahead). A `for`/`while` node absorbs the entries of its
body into one entry, `trips x max(recurrence, work) + trips x (kernels + 1) x
dispatch` (cost_model.loop_time), and a class still inside a loop is compared by
its work plus the part of its path from the loop's Args that exceeds that work, the
same formula applied to it as if it closed the loop.

Trip-count guesses (`trip_count_guesses`): constant bounds; else, from 0, the size its
upper bound reads (`dim` of a value whose shape has a symbolic dim from an
`egad.Spec`, e.g. "T"); else the loop's static `trip_dim`; else its `trip_guess` attr
(checkpoint segments, whose bounds are computed: docs/ir.md); symbols and `while`
loops take `CostModel.trip_guesses` (by symbol or loop region id; `egad.optimize`
gives each symbol its size in the inputs a build is for), else a
`while` loop's `trip_guess` (its trips observed on example inputs,
egad/trip_counts.py), else `default_guess` (capped by `max_iters`).
Shapes of e-classes come from egad/egraph/class_types.py (the op table's shape rules
run over the snapshot), with symbolic dims replaced by the same guesses.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections import defaultdict, deque
from typing import Mapping, NamedTuple

import numpy as np

from .cost_model import TARGETS, Target, Work, concrete, loop_time, nbytes, recurrence_per_trip, target_constants
from .egraph.class_types import ClassTypes, node_inputs
from .egraph.encoding import Encoding
from .egraph.enode import ClassId, ENode
from .egraph.extraction import Extraction
from .egraph.language import TERM_HEADS
from .egraph.placement import LOOP_HEADS, local_inputs
from .egraph.snapshot import Snapshot
from .errors import EgadError
from .ir import ops
from .ir.types import TapeType, TensorType

NO_REGIONS: frozenset = frozenset()  # a context (loop regions whose Args are in scope), or free regions


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Which target's constants, whether loops are priced by their critical path, and
    the guesses for unknown sizes: `CostModel.for_target("cuda", trip_guesses={"T": 1024})`."""

    target: Target = TARGETS["cpu"]
    critical_path: bool = True  # False: the flat model, a trip costs its work alone
    trip_guesses: Mapping = dataclasses.field(default_factory=dict)  # symbol or loop region id -> count
    default_guess: int = 64  # a symbolic dim or a while loop's trips with no guess given
    # price of a byte held until the program returns: a value computed at the top level,
    # a loop's stacked rows (ys), a taped residual (egad/ad/checkpoint.py's held_bytes and
    # taped_bytes). 0 prices time alone; `optimize` under a memory_budget extracts again
    # with bytes priced (the least price that fits: optimizer._within_memory) when the
    # fastest extraction holds more than the budget.
    held_byte_seconds: float = 0.0

    @classmethod
    def for_target(cls, target="llvm", **options) -> "CostModel":
        return cls(target_constants(target), **options)

    def size(self, dim) -> int:
        return dim if isinstance(dim, int) else int(self.trip_guesses.get(dim, self.default_guess))


@dataclasses.dataclass(frozen=True)
class PredictedCost:
    seconds: float  # time, dispatch included
    tape_bytes: float  # bytes pushed on tapes over the run
    total: float  # seconds + tape_bytes x the target's tape_byte_seconds: what extraction minimizes


class ExtractionTimeLimit(Exception):
    """Extraction (or pricing) ran past its time limit before it had a result to give."""


# When the extraction under way must stop (time.perf_counter()), or None: per thread.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("egad_extraction_deadline", default=None)


def _past_deadline() -> bool:
    deadline = _DEADLINE.get()
    return deadline is not None and time.perf_counter() > deadline


def extract(encoding: Encoding, snapshot: Snapshot, model: CostModel | None = None,
            seconds: float | None = None) -> Extraction:
    """The cheapest scope-correct extraction of the program's results under `model`
    (default: CPU constants, critical path on). `seconds`: a time limit; past it the
    alternatives not yet tried are left out (the best extraction so far is returned),
    and an extraction that has none yet raises ExtractionTimeLimit.

        extraction = extract(encoding, Snapshot.of(encoding.egraph), CostModel.for_target("cuda"))
    """
    with time_limit(seconds):
        return _extract(encoding, snapshot, model or CostModel())


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Extractions and pricings inside stop `seconds` from now (ExtractionTimeLimit,
    or the best extraction so far: `extract`); None keeps any limit set outside."""
    token = _DEADLINE.set(time.perf_counter() + seconds) if seconds is not None else None
    try:
        yield
    finally:
        if token is not None:
            _DEADLINE.reset(token)


def _extract(encoding: Encoding, snapshot: Snapshot, model: CostModel) -> Extraction:
    extractor, extraction, banned = _linear_in_tapes(_Extractor(encoding, snapshot, model), frozenset())
    best = (extractor.program_cost(extraction.roots).total, extractor, extraction, banned)

    def cheaper_without(group: frozenset, best: tuple) -> tuple:
        """`best`, or the extraction with `group` banned too where that is cheaper."""
        _, extractor, _, banned = best
        try:
            option, chosen, option_banned = _linear_in_tapes(extractor.without(banned | group), banned | group)
        except EgadError:
            return best
        return min(best, (option.program_cost(chosen.roots).total, option, chosen, option_banned), key=lambda c: c[0])

    try:
        for group in _copied_loops_taken(encoding, snapshot, extraction):
            best = cheaper_without(group, best)
        for group in _shared_alternatives(best[1], best[2])[:MAX_SHARING_TRIES]:
            best = cheaper_without(group, best)
    except ExtractionTimeLimit:
        pass  # the alternatives not tried are left out: the best extraction so far
    return best[2]


# Greedy extraction prices each class alone, so a value that several classes could share
# (one fused matmul whose slices would replace four matmuls: rules/fusion.py) is charged
# in full to each of them and never wins. Each such group is tried once as a whole: the
# classes are made to read their slices of the shared value (every other node of theirs
# banned), the extraction redone, kept when the program is cheaper. Banning only the
# nodes chosen is not enough: each class then takes its next-best node alone (four
# in-loop matmuls rather than four slices of one batched matmul before the loop).
# Only slices are followed: that is how a transformer splits one computation over
# classes, and trying every shared alternative re-extracted GNMT-lite small 8 times
# (+11 s) for nothing.
MAX_SHARING_TRIES = 8


def _shared_alternatives(extractor, extraction: Extraction) -> list[frozenset]:
    """Groups of nodes to ban together: for each class that no chosen node reads but
    slices in two or more chosen classes do, every node of those classes except
    their slices of it, or of another such class sliced in the same classes (largest
    groups first)."""
    chosen_classes = set(extraction.choice)
    readers: dict[ClassId, set] = defaultdict(set)
    for cid, node in extraction.choice.items():
        for alternative in extractor.nodes.get(cid, ()):
            if alternative == node or not _is_slice(alternative):
                continue
            (child,) = node_inputs(alternative)
            if child not in chosen_classes:
                readers[child].add(cid)
    # the values that slices in the same classes could serve (one per alternative of a
    # loop that computes them) are tried together: each class reads whichever is cheapest
    shared_by: dict[frozenset, set] = defaultdict(set)
    for child, classes in readers.items():
        if len(classes) > 1:
            shared_by[frozenset(classes)].add(child)
    groups = {frozenset(node for cid in classes for node in extractor.nodes[cid]
                        if not (_is_slice(node) and node_inputs(node)[0] in children))
              for classes, children in shared_by.items()}
    return sorted(groups, key=lambda group: (-len(group), sorted(map(str, group))))


def _copied_loops_taken(encoding: Encoding, snapshot: Snapshot, extraction: Extraction) -> list[frozenset]:
    """For each loop transformer whose copies the extraction takes (a region's
    `copied_from`, rules/checkpoint.py), every loop node that transformer made: banned
    as a group, the extraction without them is tried too. Classes are chosen one by
    one, so a copy's forward loop, cheaper alone (it stacks fewer rows), can be taken
    and bind the reverse loop to its copy, dearer than the pair it displaced. Where
    three or more transformers copied loops, banning one's copies can let another's
    in, so the extraction with each one's copies alone is tried too (GNMT-lite: with
    recompute-taped-residuals' banned, checkpoint-carried-states' came in; with
    stack-taped-residuals' alone it was 5% cheaper). A copy of a copy (rules/fusion.py's
    `stack-concatenated-rows` of a checkpoint rule's reverse loop) is the first copier's:
    it is another form of the same pair, banned and kept with it."""
    def rule_of(node: ENode):
        region, rule = node.args[0] if node.head in LOOP_HEADS else None, None
        while region is not None and (info := encoding.regions.get(region)) is not None \
                and info.copied_from is not None:
            rule, region = info.copied_from[0], info.copied_from[1]
        return rule

    made: dict[str, set[ENode]] = defaultdict(set)
    for members in snapshot.nodes.values():
        for node in members:
            rule = rule_of(node)
            if rule is not None:
                made[rule].add(node)
    taken = {rule_of(node) for node in extraction.choice.values()} - {None}
    if not taken:
        return []
    groups = [frozenset(made[rule]) for rule in sorted(taken)]
    if len(made) > 2:  # banned alone, one rule's copies can let another's in: each rule's copies alone too
        every = set().union(*made.values())
        groups += [frozenset(every - made[rule]) for rule in sorted(made)]
    return list(dict.fromkeys(groups))


def _is_slice(node: ENode) -> bool:
    return node.head == "Op1" and node.args[0] == "slice"


def _linear_in_tapes(extractor, banned: frozenset):
    """(extractor, extraction, banned) with no tape read twice and no two alternative
    loops both taken: re-extracted with one of the conflicting nodes banned in turn,
    the cheapest kept."""
    extraction = extractor.extraction()
    encoding, snapshot, model = extractor.encoding, extractor.snapshot, extractor.model
    for _ in range(MAX_TAPE_CONFLICTS):
        readers = _tape_read_twice(extractor.types, extraction) or _alternative_loops_taken(snapshot, extraction)
        if readers is None:
            return extractor, extraction, banned
        options = []
        for node in readers:  # keep all but one of the conflicting nodes
            try:
                option = extractor.without(banned | {node})
                chosen = option.extraction()
            except EgadError:
                continue
            options.append((option.program_cost(chosen.roots).total, len(options), option, chosen, banned | {node}))
        if not options:
            break
        _, _, extractor, extraction, banned = min(options)
    raise EgadError("extraction reads one tape twice (two alternative loops that pop it), or takes outputs from "
                    "two alternative loops, and no extraction without that was found")


MAX_TAPE_CONFLICTS = 16  # re-extractions to keep tapes linear (and alternative loops apart) before giving up


def _alternative_loops_taken(snapshot: Snapshot, extraction: Extraction) -> list[ENode] | None:
    """Two chosen loops that are alternatives of one loop (an output of one is in a class
    with an output of the other: rules/checkpoint.py's and rules/batching.py's copies),
    else None. Classes are chosen one by one, so an extraction can take one output from
    each and run both loops; with tapes, the tape conflict above catches it, but a copy
    that reads stacked rows instead pops nothing."""
    owner: dict[ClassId, ENode] = {}
    for cid, node in extraction.choice.items():
        if node.head != "For":
            continue
        for k in range(len(node.args[4])):
            get = snapshot.index.get(ENode("Get", (cid, k)))
            if get is None:
                continue
            other = owner.setdefault(get, node)
            if other is not node:
                return [other, node]
    return None


def _tape_read_twice(types: ClassTypes, extraction: Extraction) -> list[ENode] | None:
    """The chosen nodes that read one tape value, where more than one does (tapes are
    threaded linearly: a second reader would pop what the first popped); else None."""
    readers: dict[ClassId, list[ENode]] = defaultdict(list)
    for node in extraction.choice.values():
        for child in local_inputs(node):
            if isinstance(types.types.get(child), TapeType) and node not in readers[child]:
                readers[child].append(node)
    return next((nodes for nodes in readers.values() if len(nodes) > 1), None)


def predicted_cost(encoding: Encoding, snapshot: Snapshot, extraction: Extraction,
                   model: CostModel | None = None) -> PredictedCost:
    """The model's cost of one given extraction (the same pricing extraction uses).

        predicted_cost(encoding, snapshot, extract(encoding, snapshot)).seconds  # e.g. 8.8e-05
    """
    extractor = _Extractor(encoding, snapshot, model or CostModel(), fixed=extraction.choice)
    return extractor.program_cost(extraction.roots)


def trip_count_guesses(encoding: Encoding, snapshot: Snapshot, model: CostModel | None = None) -> dict[int, int]:
    """The trip-count guess of every loop region in the e-graph: `{1: 64}` for one loop
    over a Spec's "T" with no guess given, `{1: 1024}` with `CostModel(trip_guesses={"T": 1024})`."""
    return dict(_Extractor(encoding, snapshot, model or CostModel()).trips)


class _Entry(NamedTuple):
    """One class of a candidate's sub-DAG, priced per run of its free regions."""

    free: frozenset  # loop regions it runs inside (whose Args it reads)
    share: float  # fraction of runs of its scope that reach it (branches)
    seconds: float  # compute time (for a loop: all its trips)
    kernels: float  # dispatches
    tape_bytes: float
    flat: float  # share x runs x (seconds + dispatches + tape price): its part of the program's cost


class _SubDag:
    """The classes a candidate needs, each once, with running sums kept as entries are
    added (so a union costs a dict copy plus the classes it adds, not a re-sum)."""

    __slots__ = ("entries", "flat", "loop_work", "partial")

    def __init__(self, entries=None, flat=0.0, loop_work=None, partial=False):
        self.entries: dict = entries if entries is not None else {}  # class number -> _Entry
        self.flat = flat
        self.loop_work: dict = loop_work if loop_work is not None else {}  # open loop -> work per trip
        self.partial = partial  # some entry has share < 1: unions must compare shares

    def copy(self) -> "_SubDag":
        return _SubDag(dict(self.entries), self.flat, dict(self.loop_work), self.partial)

    def add(self, cid: int, entry: _Entry, innermost) -> None:
        old = self.entries.get(cid)
        if old is not None:
            self._account(old, innermost, -1.0)
        self.entries[cid] = entry
        self._account(entry, innermost, 1.0)
        self.partial = self.partial or entry.share < 1.0

    def _account(self, entry: _Entry, innermost, sign: float) -> None:
        self.flat += sign * entry.flat
        if entry.free and entry.seconds:
            loop = innermost(entry.free)
            self.loop_work[loop] = self.loop_work.get(loop, 0.0) + sign * entry.share * entry.seconds


@dataclasses.dataclass
class _Candidate:
    node: ENode
    dag: _SubDag  # the node's class and everything it needs
    free: frozenset
    depth: dict  # (region, index) of a carried Arg -> longest latency path from it
    total: float


class _Shared:
    """What extractors of one snapshot derive that no price changes, computed once and
    kept on the snapshot (`Snapshot.derived`; a snapshot never changes): class types,
    class numbers, each node's reads, each op's work (per trip-count guesses), and per set of banned
    nodes the classes' nodes, readable regions and loop nesting. An extraction tries
    several bans (tapes, copied loops, shared values), and `optimize` under a
    memory_budget extracts one snapshot at several prices (optimizer._within_memory):
    rebuilding these each time was a third of that (LSTM T=1024)."""

    def __init__(self, encoding: Encoding, snapshot: Snapshot):
        self.encoding = encoding
        self.types = ClassTypes(encoding, snapshot)
        # sub-DAGs are keyed by small ints: ClassId hashes in Python, which dominated unions
        self.number = {cid: k for k, cid in enumerate(snapshot.nodes)}
        self.reads: dict[ENode, list[ClassId]] = {}  # node_inputs, memoized
        self.work: dict[tuple, dict[ENode, Work]] = {}  # trip-count guesses -> node -> its op's Work
        self.scopes: dict[frozenset, tuple] = {}  # banned -> (nodes, readable, parent, nest_depth)

    @classmethod
    def of(cls, encoding: Encoding, snapshot: Snapshot) -> "_Shared":
        shared = snapshot.derived.get(cls)
        if shared is None or shared.encoding is not encoding:
            shared = snapshot.derived[cls] = cls(encoding, snapshot)
        return shared


class _Extractor:
    def __init__(self, encoding: Encoding, snapshot: Snapshot, model: CostModel, fixed=None,
                 banned: frozenset = frozenset()):
        self.encoding = encoding
        self.snapshot = snapshot
        self.model = model
        self.target = model.target
        shared = _Shared.of(encoding, snapshot)
        self.types = shared.types
        self._reads = shared.reads
        sizes = (tuple(sorted(model.trip_guesses.items(), key=repr)), model.default_guess)  # what op_work reads
        self._work: dict[ENode, Work] = shared.work.setdefault(sizes, {})
        self.number = shared.number
        self.loop_heads = {r: n.head for r, n in self.types.control.items() if n.head in LOOP_HEADS}
        scope = shared.scopes.get(banned) if fixed is None else None
        if scope is None:
            if fixed is not None:  # price one given extraction
                self.nodes = {cid: [node] for cid, node in fixed.items()}
            else:
                self.nodes = {cid: [n for n in members if n.head in TERM_HEADS and n in self.types.typed_nodes
                                    and n not in banned]
                              for cid, members in snapshot.nodes.items() if cid.sort == "Term"}
            self.readable = self._readable_regions()
            self.parent = self._loop_parents()
            scope = (self.nodes, self.readable, self.parent, self.nest_depth)
            if fixed is None:
                shared.scopes[banned] = scope
        self.nodes, self.readable, self.parent, self.nest_depth = scope
        self.trips = {r: self._trip_guess(r) for r in self.loop_heads}
        self._weights: dict[frozenset, float] = {}
        self._innermost: dict[frozenset, int | None] = {}
        self.states: dict[tuple[ClassId, frozenset], _Candidate | None] = {}
        self.users: dict[tuple, set] = defaultdict(set)
        self.queue: deque = deque()
        self.queued: set = set()

    def without(self, banned: frozenset) -> _Extractor:
        """A fresh extractor of the same e-graph and model with the `banned` nodes left out
        (what no ban changes is shared: `_Shared`)."""
        return _Extractor(self.encoding, self.snapshot, self.model, banned=banned)

    def node_reads(self, node: ENode) -> list[ClassId]:
        reads = self._reads.get(node)
        if reads is None:
            reads = self._reads[node] = node_inputs(node)
        return reads

    # --- analyses ---------------------------------------------------------------------

    def _readable_regions(self) -> dict[ClassId, frozenset]:
        """For each class, every loop region whose Args some extraction of it could read
        (an over-approximation: the union over all its nodes)."""
        readers = defaultdict(list)
        for cid, members in self.nodes.items():
            for node in members:
                for read in self.node_reads(node):
                    readers[read].append(cid)
        readable = {cid: NO_REGIONS for cid in self.nodes}
        pending = deque(self.nodes)
        while pending:
            cid = pending.popleft()
            regions = set(readable[cid])
            for node in self.nodes[cid]:
                if node.head == "Arg":
                    if node.args[0] in self.loop_heads:
                        regions.add(node.args[0])
                    continue
                reads = set().union(*(readable.get(read, NO_REGIONS) for read in self.node_reads(node)))
                if node.head in LOOP_HEADS:
                    reads.discard(node.args[0])
                regions |= reads
            if len(regions) > len(readable[cid]):
                readable[cid] = frozenset(regions)
                pending.extend(readers[cid])
        return readable

    def _loop_parents(self) -> dict[int, int | None]:
        """The loop each loop region runs inside (the innermost it could read), for
        pricing entries whose free regions are inner loops only."""
        depth: dict[int, int] = {}
        parent: dict[int, int | None] = {}

        def nest(region, visiting=()):
            if region not in depth:
                outer = [r for r in self.readable.get(self._loop_class(region), NO_REGIONS)
                         if r != region and r not in visiting]
                depths = {r: nest(r, visiting + (region,)) for r in outer}
                parent[region] = max(depths, key=depths.get) if depths else None
                depth[region] = 1 + max(depths.values(), default=0)
            return depth[region]

        for region in self.loop_heads:
            nest(region)
        self.nest_depth = depth
        return parent

    def _loop_class(self, region: int) -> ClassId | None:
        return self.snapshot.index.get(self.types.control[region])

    def _trip_guess(self, region: int) -> int:
        model = self.model
        if region in model.trip_guesses:
            return int(model.trip_guesses[region])
        loop = self.types.control[region]
        if loop.head == "While":
            attrs = self.types.attrs(loop.args[4])
            guess, limit = attrs.get("trip_guess") or model.default_guess, attrs.get("max_iters")
            return min(guess, limit) if limit is not None else guess
        _, lo, hi, _, _, attrs_class = loop.args
        low, high = self._static_int(lo), self._static_int(hi)
        if isinstance(low, int) and isinstance(high, int):
            return max(high - low, 0)
        if low == 0 and high is not None:  # a size read off a type: static, or a Spec's symbol
            return model.size(high)
        attrs = self.types.attrs(attrs_class)
        trip_dim = attrs.get("trip_dim")
        if not isinstance(trip_dim, int) and attrs.get("trip_guess") is not None:  # a checkpoint segment's
            return int(attrs["trip_guess"])
        return model.size(trip_dim) if trip_dim is not None else model.default_guess  # AD's symbols: the default

    def _static_int(self, cid: ClassId):
        """An int constant, a symbolic dim a `dim` node reads off a type, or None."""
        for node in self.snapshot.nodes.get(cid, ()):
            if node.head == "Scalar" and np.dtype(node.args[0]).kind in "iu":
                return int(node.args[1])
            if node.head == "Op1" and node.args[0] == "dim":
                source = self.types.types.get(node.args[2])
                if isinstance(source, TensorType):
                    return source.shape[self.types.attrs(node.args[1])["axis"]]
        return None

    # --- pricing ------------------------------------------------------------------------

    def weight(self, free: frozenset) -> float:
        """How many times something inside loops `free` runs per run of the program."""
        if free not in self._weights:
            regions, weight = set(), 1.0
            for region in free:
                while region is not None and region not in regions:
                    regions.add(region)
                    weight *= self.trips.get(region, 1)
                    region = self.parent.get(region)
            self._weights[free] = weight
        return self._weights[free]

    def innermost(self, free: frozenset):
        if free not in self._innermost:
            self._innermost[free] = max(free, key=lambda r: self.nest_depth.get(r, 0)) if free else None
        return self._innermost[free]

    def entry(self, free: frozenset, seconds=0.0, kernels=0.0, tape_bytes=0.0, share=1.0) -> _Entry:
        target = self.target
        per_run = seconds + kernels * target.dispatch_seconds \
            + tape_bytes * (target.tape_byte_seconds + self.model.held_byte_seconds)
        return _Entry(free, share, seconds, kernels, tape_bytes, share * self.weight(free) * per_run)

    def total(self, dag: _SubDag, depth: dict) -> float:
        """Flat cost of the sub-DAG, plus, for each loop still open, how far the path
        from its carried Args exceeds its work (trips x max(path, work) - trips x work)."""
        total = dag.flat
        if self.model.critical_path and depth:
            longest: dict[int, float] = {}
            for (region, _), length in depth.items():
                longest[region] = max(longest.get(region, 0.0), length)
            for region, length in longest.items():
                total += self.weight(frozenset({region})) * max(0.0, length - dag.loop_work.get(region, 0.0))
        return total

    def union(self, dags) -> _SubDag:
        """The union of sub-DAGs, each class once (the largest share where two disagree)."""
        dags = sorted(dags, key=lambda dag: len(dag.entries), reverse=True)
        if not dags:
            return _SubDag()
        merged = dags[0].copy()
        for other in dags[1:]:
            for cid in other.entries.keys() - merged.entries.keys():
                merged.add(cid, other.entries[cid], self.innermost)
            if other.partial or merged.partial:
                for cid in other.entries.keys() & merged.entries.keys():
                    if other.entries[cid].share > merged.entries[cid].share:
                        merged.add(cid, other.entries[cid], self.innermost)
        return merged

    def op_work(self, node: ENode) -> Work:
        if node not in self._work:
            if node.head == "NewTape":
                name, attrs, inputs = "tape_alloc", self.types.attrs(node.args[1]), []
            else:
                name, attrs, inputs = node.args[0], self.types.attrs(node.args[1]), local_inputs(node)
            outputs = self.types.types[self.snapshot.index[node]]
            outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
            sized = [concrete(self.types.of(c), self.model.size) for c in inputs]
            self._work[node] = ops.OPS[name].cost(sized, [concrete(t, self.model.size) for t in outputs], attrs)
        return self._work[node]

    def output_bytes(self, node: ENode) -> int:
        outputs = self.types.types[self.snapshot.index[node]]
        outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
        return sum(nbytes(concrete(t, self.model.size)) for t in outputs if isinstance(t, TensorType))

    def latency(self, work: Work) -> float:
        seconds = work.seconds(self.target)
        return max(seconds, self.target.latency_seconds) if work.kernels else seconds

    # --- search -----------------------------------------------------------------------

    def state(self, cid: ClassId, context: frozenset) -> tuple:
        return cid, context & self.readable.get(cid, NO_REGIONS)

    def demand(self, key: tuple) -> None:
        if key not in self.states:
            self.states[key] = None
            self._enqueue(key)

    def _enqueue(self, key: tuple) -> None:
        if key not in self.queued:
            self.queued.add(key)
            self.queue.append(key)

    def solve(self) -> None:
        budget = 200 * max(len(self.nodes), 1) + 10 * len(self.states)
        for step in range(budget):
            if not self.queue:
                break
            if step % 1024 == 0 and _past_deadline():  # the clock read at the first step, then every 1024
                raise ExtractionTimeLimit(f"extraction stopped by its time limit with {len(self.queue)} classes "
                                          "still to price")
            key = self.queue.popleft()
            self.queued.discard(key)
            cid, context = key
            best = self.states[key]
            improved = False
            for node in self.nodes.get(cid, ()):
                candidate = self.evaluate(key, node)
                if candidate is not None and (best is None or candidate.total < best.total * (1 - 1e-9)):
                    best, improved = candidate, True
            if improved:
                self.states[key] = best
                for user in self.users[key]:
                    self._enqueue(user)

    def _inputs(self, node: ENode, context: frozenset) -> list[tuple[str, ClassId, frozenset]]:
        """(role, class, context) of each input: role "local", "body" (a loop's results
        and condition) or "branch{k}"."""
        head = node.head
        if head in LOOP_HEADS:
            inner = context | {node.args[0]}
            body = node.args[4] if head == "For" else [node.args[2], *node.args[3]]
            return [("local", c, context) for c in local_inputs(node)] + [("body", c, inner) for c in body]
        if head in ("If", "Switch"):
            branches = [node.args[2], node.args[3]] if head == "If" else list(node.args[2])
            return [("local", node.args[1], context)] + [
                (f"branch{k}", c, context) for k, results in enumerate(branches) for c in results]
        return [("local", c, context) for c in self.node_reads(node)]

    def evaluate(self, key: tuple, node: ENode) -> _Candidate | None:
        cid, context = key
        head = node.head
        if head == "Arg":
            return self._arg(cid, node, context)
        if head in LOOP_HEADS and node.args[0] in context:
            return None  # a loop used inside itself
        inputs = []
        for role, child, child_context in self._inputs(node, context):
            child_key = self.state(child, child_context)
            self.users[child_key].add(key)
            self.demand(child_key)
            inputs.append((role, child, self.states[child_key]))
        if any(candidate is None for _, _, candidate in inputs):
            return None
        if head in LOOP_HEADS:
            return self._loop(cid, node, inputs)
        if head in ("If", "Switch"):
            return self._branch(cid, node, inputs)
        dag = self.union(candidate.dag for _, _, candidate in inputs)
        number = self.number[cid]
        if number in dag.entries:
            return None  # a cycle
        free = frozenset().union(*(candidate.free for _, _, candidate in inputs))
        depth = _longest(candidate.depth for _, _, candidate in inputs)
        if head in ("Get", "Scalar", "Splat", "Array"):
            dag.add(number, self.entry(free), self.innermost)
        else:
            work = self.op_work(node)
            latency = self.latency(work)
            depth = {arg: length + latency for arg, length in depth.items()}
            seconds = work.seconds(self.target)
            if not free and self.model.held_byte_seconds:  # a top-level value is held until the end
                seconds += self.output_bytes(node) * self.model.held_byte_seconds
            dag.add(number, self.entry(free, seconds, work.kernels, work.tape_bytes), self.innermost)
        return _Candidate(node, dag, free, depth, self.total(dag, depth))

    def _arg(self, cid: ClassId, node: ENode, context: frozenset) -> _Candidate | None:
        region, index = node.args
        if region not in self.loop_heads:  # a program parameter
            return _Candidate(node, _SubDag({self.number[cid]: self.entry(NO_REGIONS)}), NO_REGIONS, {}, 0.0)
        if region not in context:
            return None  # out of scope here: what makes the extractor scope-aware
        carried = not (self.loop_heads[region] == "For" and index == 0)  # a counter is known ahead
        free = frozenset({region})
        dag = _SubDag({self.number[cid]: self.entry(free)})
        return _Candidate(node, dag, free, {node.args: 0.0} if carried else {}, 0.0)

    def _loop(self, cid: ClassId, node: ENode, inputs) -> _Candidate | None:
        """A for/while: its body's entries are absorbed into one entry, priced by
        cost_model.loop_time; what its body reads from outside stays outside."""
        region = node.args[0]
        dag = self.union(candidate.dag for _, _, candidate in inputs)
        number = self.number[cid]
        if number in dag.entries:
            return None
        free = frozenset().union(*(candidate.free for _, _, candidate in inputs)) - {region}
        work = kernels = tape_bytes = 0.0
        absorbed = self.entry(free)
        for child, entry in list(dag.entries.items()):
            if region in entry.free:  # runs every trip
                work += entry.share * entry.seconds
                kernels += entry.share * entry.kernels
                tape_bytes += entry.share * entry.tape_bytes
                dag.add(child, absorbed, self.innermost)
        dag.loop_work.pop(region, None)
        trips = self.trips[region]
        compute, dispatches = loop_time(trips, self._recurrence(node, inputs), work, kernels,
                                        self.model.critical_path)
        if node.head == "For":  # the driver copies each trip's ys into the stacked result
            for ys in node.args[4][len(node.args[3]):]:
                row = concrete(self.types.of(ys), self.model.size)
                compute += trips * Work(0.0, 2.0 * nbytes(row)).seconds(self.target) \
                    + self.target.stacked_output_seconds
                if self.model.held_byte_seconds:
                    # the stacked rows are held once, however often the loops around this one make them
                    # again (a checkpointed segment's rows: k x R, not T x R): their price is divided by
                    # the runs the entry's weight multiplies it by (none: a loop of no trips around it)
                    compute += trips * nbytes(row) * self.model.held_byte_seconds / max(self.weight(free), 1.0)
                dispatches += trips
        dag.add(number, self.entry(free, compute, dispatches, trips * tape_bytes), self.innermost)
        depth: dict = {}
        for role, _, candidate in inputs:  # the whole loop waits for any outer carried value it reads
            for arg, length in candidate.depth.items():
                if arg[0] != region:
                    depth[arg] = max(depth.get(arg, 0.0), length if role == "local" else 0.0)
        depth = {arg: length + compute for arg, length in depth.items()}
        return _Candidate(node, dag, free, depth, self.total(dag, depth))

    def _recurrence(self, node: ENode, inputs) -> float:
        """The loop's critical path per trip: max mean cycle over its carried state,
        plus, for a while loop, the path to its condition (every trip waits for it)."""
        region = node.args[0]
        body = [candidate for role, _, candidate in inputs if role == "body"]
        if node.head == "For":
            n_state, offset, condition = len(node.args[3]), 1, 0.0
            results = body[:n_state]
        else:
            n_state, offset = len(node.args[1]), 0
            condition = max([length for (r, _), length in body[0].depth.items() if r == region], default=0.0)
            results = body[1:1 + n_state]
        edges = {}
        for k, candidate in enumerate(results):
            for (arg_region, index), length in candidate.depth.items():
                if arg_region == region:
                    edges[(index - offset, k)] = length
        return recurrence_per_trip(edges, n_state) + condition

    def _branch(self, cid: ClassId, node: ENode, inputs) -> _Candidate | None:
        """An if/switch: what only some branches need runs in that fraction of runs
        (each branch taken equally often, for want of observed frequencies); what all
        branches or the selector need runs every time (placement computes it before)."""
        n_branches = len(node.args[2]) if node.head == "Switch" else 2
        selector = self.union(candidate.dag for role, _, candidate in inputs if role == "local")
        branches = defaultdict(list)
        for role, _, candidate in inputs:
            if role != "local":
                branches[role].append(candidate.dag)
        branch_dags = [self.union(dags) for dags in branches.values()]
        dag = self.union([selector, *branch_dags])
        number = self.number[cid]
        if number in dag.entries:
            return None
        keys = [branch.entries.keys() for branch in branch_dags]
        everywhere = set(selector.entries).union(set.intersection(*map(set, keys))) if keys else set()
        for child in dag.entries.keys() - everywhere:
            reached = sum(child in k for k in keys)
            entry = dag.entries[child]
            dag.add(child, self.entry(entry.free, entry.seconds, entry.kernels, entry.tape_bytes,
                                      share=entry.share * reached / n_branches), self.innermost)
        free = frozenset().union(*(candidate.free for _, _, candidate in inputs))
        depth = _longest(candidate.depth for _, _, candidate in inputs)
        dag.add(number, self.entry(free, kernels=1.0), self.innermost)  # the branch itself: one VM jump
        return _Candidate(node, dag, free, depth, self.total(dag, depth))

    # --- results ----------------------------------------------------------------------

    def extraction(self) -> Extraction:
        roots = tuple(self.snapshot.class_of(root) for root in self.encoding.roots)
        contexts: dict[ClassId, frozenset] = {}
        for _ in range(100):
            choice, uses = self._choose(roots, contexts)
            narrowed = {cid: frozenset.intersection(*uses[cid]) & contexts.get(cid, uses[cid][0])
                        for cid in uses}
            if all(contexts.get(cid) == context for cid, context in narrowed.items()):
                return Extraction(roots, choice)
            contexts.update(narrowed)
        raise EgadError("extraction did not settle on one node per e-class (scopes kept changing)")

    def _choose(self, roots, contexts):
        """One pass from the roots: each class's node for its current context, and the
        contexts of every use of each class it reaches."""
        choice: dict[ClassId, ENode] = {}
        uses: dict[ClassId, list[frozenset]] = defaultdict(list)
        for root in roots:
            uses[root].append(NO_REGIONS)
        stack = list(roots)
        while stack:
            cid = stack.pop()
            if cid in choice:
                continue
            context = contexts.get(cid, uses[cid][0])
            candidate = self._best(cid, context)
            choice[cid] = candidate.node
            for _, child, child_context in self._inputs(candidate.node, context):
                uses[child].append(child_context & self.readable.get(child, NO_REGIONS))
                if child not in choice:
                    stack.append(child)
        return choice, uses

    def _best(self, cid: ClassId, context: frozenset) -> _Candidate:
        key = self.state(cid, context)
        if self.states.get(key) is None:
            self.demand(key)
            self.solve()
        candidate = self.states.get(key)
        if candidate is None:
            nodes = [n.args[0] if n.head.startswith("Op") else n.head for n in self.snapshot.nodes.get(cid, ())]
            raise EgadError(f"an e-class of {', '.join(map(str, nodes)) or 'no nodes'} has no node that can be "
                            f"extracted where it is used (loops in scope: {len(context)})")
        return candidate

    def program_cost(self, roots) -> PredictedCost:
        dag = self.union(self._best(root, NO_REGIONS).dag for root in roots)
        dispatch = self.target.dispatch_seconds
        seconds = sum(e.share * self.weight(e.free) * (e.seconds + e.kernels * dispatch) for e in dag.entries.values())
        tape_bytes = sum(e.share * self.weight(e.free) * e.tape_bytes for e in dag.entries.values())
        return PredictedCost(seconds, tape_bytes, dag.flat)


def _longest(depths) -> dict:
    """Per carried Arg, the longest of several paths from it."""
    longest: dict = {}
    for depth in depths:
        for arg, length in depth.items():
            if length >= longest.get(arg, -1.0):
                longest[arg] = length
    return longest

"""The schedule: the one place where rule order lives (DESIGN §5, CONVENTIONS 6).

    report = saturate(encoding)                          # every family, default limits
    report = saturate(encoding, families=["algebra"], limits=Limits(nodes=5_000))
    print(report)                                        # rules fired, e-graph size, time, limit hit

Each round:

1. analyses: types and loop invariance of the current snapshot are written as facts
   (egad/egraph/analysis.py), then the egglog analysis ruleset runs to saturation;
2. structural rewrites: one iteration of each selected family's egglog rules, in
   family order, under one egglog `back_off` scheduler (a rule matching more than
   `match_limit` times in an iteration, or more than the e-graph has e-nodes, is
   banned for `ban_length` iterations, with both doubling on each ban, so an explosive
   rule cannot starve the rest, while a rule that matches once per node of a large
   program still fires: with a fixed limit of 1,000, algebra's neg-neg never fired on
   a program with 1,100 double negations, as each round's ban outlasted the round);
3. loop transformers: the families' Python transformers, on a fresh snapshot; a
   late one (`Rule.late`: rules/checkpoint.py's `recompute-taped-residuals`, which
   copies whole loop pairs again) only in a round where nothing else changed the
   e-graph, so that it copies bodies the other rules are done with; then rounds go on
   (its copies are rewritten like any loop) until it too adds nothing. A transformer
   whose alternatives only save memory (`Rule.memory`: `checkpoint-every-k-trips`)
   runs only when `saturate` is told the extraction will price bytes held
   (`memory_limited`);
4. provenance: the marks the rules left are read back, so every new e-node records
   the rule that made it (egad/egraph/marks.py).

Rounds stop when a round changes nothing (saturated), or at the first limit: the
number of rounds, the number of e-nodes, the wall-clock time. Limits are checked
between rounds, so a round in flight finishes (the e-graph may exceed the node limit
by one round's growth). Hitting a limit never fails: every union made so far is
sound, so the e-graph still holds the program and whatever was found; the report
says which limit stopped it. Back-off bans last within one round's egglog run; the
rounds themselves are the outer bound.
"""
from __future__ import annotations

import dataclasses
import numbers
import time
from collections import Counter

from egglog import back_off, run, seq

from ..errors import EgadError, RuleError, message
from .analysis import ANALYSES, ANALYSIS_FUNCTIONS, Facts, analyse, update
from .attrs import attrs_value
from .edit import Editor
from .encoding import Encoding
from .enode import ClassId, ENode
from .marks import MARK_TABLES, record_marks
from .marks import made_op0, made_op1, made_op2, made_op3, made_opn, made_scalar, made_splat
from .provenance import RuleSite
from .snapshot import Snapshot

_MARK_RELATIONS = (made_op0, made_op1, made_op2, made_op3, made_opn, made_scalar, made_splat)
assert len(_MARK_RELATIONS) == len(MARK_TABLES)


@dataclasses.dataclass(frozen=True)
class Limits:
    rounds: int = 12  # rounds of (analyses, rewrites, transformers); late transformers need a few at the end
    nodes: int = 50_000  # e-nodes of the language (terms and attributes)
    seconds: float = 10.0  # wall-clock time of the whole saturation
    match_limit: int = 1_000  # back_off: matches of one rule in one iteration before it is banned (or e-nodes, if more)
    ban_length: int = 2  # back_off: iterations of the first ban


@dataclasses.dataclass
class SaturationReport:
    families: tuple[str, ...]
    rounds: int  # rounds run
    stopped_by: str  # "saturated", or the limit that stopped it: "rounds", "nodes", "seconds"
    matches: Counter  # rule name -> egglog matches (a transformer: the alternatives it added)
    new_nodes: Counter  # rule name -> e-nodes it introduced (first made by it)
    nodes: int  # e-nodes of the language at the end
    classes: int  # Term e-classes at the end
    seconds: float
    facts: int  # analysis facts written
    # rule name -> seconds spent on it: egglog's search and apply time of its rewrites,
    # the wall-clock time of a transformer's calls
    rule_seconds: Counter = dataclasses.field(default_factory=Counter)

    @property
    def limit_hit(self) -> str | None:
        """The limit that stopped saturation, or None when it saturated."""
        return None if self.stopped_by == "saturated" else self.stopped_by

    def fired(self) -> dict[str, int]:
        """Rules that matched at least once, with their match counts."""
        return {name: count for name, count in sorted(self.matches.items()) if count}

    def __str__(self) -> str:
        head = (f"saturation of {', '.join(self.families) or 'no families'}: {self.rounds} rounds, "
                f"stopped by {self.stopped_by}, {self.nodes} e-nodes in {self.classes} classes, "
                f"{self.seconds * 1e3:.0f} ms")
        lines = [head] + [f"  {name:32s} {count:6d} matches {self.new_nodes.get(name, 0):5d} new nodes"
                          for name, count in self.fired().items()]
        return "\n".join(lines)


class TransformView:
    """What a loop transformer sees: the snapshot, its facts, and an editor to add to it."""

    def __init__(self, encoding: Encoding, snapshot: Snapshot, facts: Facts, editor: Editor):
        self.encoding = encoding
        self.snapshot = snapshot
        self.facts = facts
        self.types = facts.types
        self.editor = editor
        self.site: RuleSite | None = None  # the running transformer's site (set by the schedule)
        self.unions = 0

    def attrs(self, cid: ClassId) -> dict:
        return attrs_value(self.snapshot.node_of, cid, self.encoding.constants)

    def order(self, cid: ClassId) -> int:
        """When the class's earliest node was recorded: program order for inserted classes."""
        origins = self.editor.origins
        return min((origins[n].order for n in self.snapshot.nodes[cid] if n in origins), default=1 << 62)

    def outputs(self) -> dict[ClassId, dict[int, ClassId]]:
        """For every node class with several outputs (a loop, a branch): output index ->
        the class of its `Get`."""
        outputs: dict[ClassId, dict[int, ClassId]] = {}
        for cid, members in self.snapshot.nodes.items():
            for node in members:
                if node.head == "Get":
                    outputs.setdefault(node.args[0], {})[node.args[1]] = cid
        return outputs

    def union(self, cid: ClassId, node: ENode) -> None:
        """The class `cid` also holds `node` (fields: class ids, nested nodes, primitives)."""
        self.editor.union(cid, node, self.site)
        self.unions += 1


def saturate(encoding: Encoding, families=None, limits: Limits = Limits(),
             memory_limited: bool = False) -> SaturationReport:
    """Run the selected rule families (names or `Family` objects; None: the default ones)
    on `encoding`'s e-graph in rounds, within `limits`; returns what happened.
    `memory_limited`: the extraction will price bytes held, so the transformers that
    trade time for memory (Rule.memory) run too."""
    from egad import rules as registry  # rules/ builds on this layer: imported when first needed

    selected = registry.default() if families is None else [
        f if isinstance(f, registry.Family) else registry.family_named(f) for f in families]
    rulesets = [f.ruleset for f in selected if f.ruleset is not None]
    runnable = [r for f in selected for r in f.transformers if memory_limited or not r.memory]
    transformers = [r for r in runnable if not r.late]
    late_transformers = [r for r in runnable if r.late]
    sites = registry.sites()
    names = {r.id: r.name for r in registry.all_rules()}
    egraph = encoding.egraph
    for function in (*ANALYSIS_FUNCTIONS, *_MARK_RELATIONS):
        egraph._callable_to_egg(function)  # declared before facts and marks are written by name

    start = time.perf_counter()
    matches: Counter = Counter()
    new_nodes: Counter = Counter()
    rule_seconds: Counter = Counter()
    facts_written = 0
    snapshot = Snapshot.of(egraph)
    stopped_by, rounds = "rounds", 0
    late_done = False  # the late transformers ran on an e-graph that nothing changed since
    analysed = None  # (snapshot, its facts): the latest analysis

    def facts_of(snapshot: Snapshot) -> Facts:
        """The snapshot's facts, analysed once; the classes the last analysis typed keep their types."""
        nonlocal analysed
        if analysed is None or analysed[0] is not snapshot:
            analysed = (snapshot, analyse(encoding, snapshot, previous=analysed[1] if analysed else None))
        return analysed[1]

    editor = Editor(egraph, snapshot, encoding.provenance, encoding.bound)
    for rounds in range(1, limits.rounds + 1):
        if editor.snapshot is not snapshot:  # else the last round's editor, flushed, still holds
            editor = Editor(egraph, snapshot, encoding.provenance, encoding.bound)
        facts = facts_of(snapshot)
        written = update(editor, encoding, facts)
        facts_written += written

        scheduler = back_off(match_limit=max(limits.match_limit, _size(snapshot)), ban_length=limits.ban_length)
        schedule = ANALYSES.saturate()
        if rulesets:
            schedule = schedule + scheduler.scope(seq(*(run(rs, scheduler=scheduler) for rs in rulesets)))
        report = egraph.run(schedule)
        for decl, count in report.num_matches_per_rule.items():
            name = getattr(decl, "name", None)
            if name and "/" in name:
                matches[name.rsplit("/", 1)[0]] += count
        for decl, spent in report.search_and_apply_time_per_rule.items():
            name = getattr(decl, "name", None)
            if name and "/" in name:
                rule_seconds[name.rsplit("/", 1)[0]] += spent.total_seconds()

        snapshot = Snapshot.of(egraph)
        editor = Editor(egraph, snapshot, encoding.provenance, encoding.bound)
        for site_id, count in record_marks(editor, sites).items():
            new_nodes[names[site_id]] += count
        if editor.flush():  # handles for the new nodes: no node is added, so the snapshot holds
            editor.settle()

        transformed = False
        # late transformers (Rule.late) run in a round where nothing else changes
        # anything (phase two), and again after every change until they add nothing
        quiet = not written and not report.updated
        for phase in (transformers, late_transformers if quiet and not late_done else []):
            if not phase or transformed:
                continue
            view = TransformView(encoding, snapshot, facts_of(snapshot), editor)
            for rule in phase:
                view.site, recorded, started = rule.site, len(encoding.provenance), time.perf_counter()
                matches[rule.name] += _run_transformer(rule, view)
                rule_seconds[rule.name] += time.perf_counter() - started
                new_nodes[rule.name] += len(encoding.provenance) - recorded
            if editor.flush():
                before = _size(snapshot), len(snapshot.nodes)
                snapshot = Snapshot.of(egraph)
                editor = Editor(egraph, snapshot, encoding.provenance, encoding.bound)
                transformed = (_size(snapshot), len(snapshot.nodes)) != before  # a union of equal classes is no change
            if phase is late_transformers:
                late_done = not transformed
        if transformed:
            late_done = False

        if not written and not report.updated and not transformed:
            stopped_by = "saturated"
            break
        if _size(snapshot) > limits.nodes:
            stopped_by = "nodes"
            break
        if time.perf_counter() - start > limits.seconds:
            stopped_by = "seconds"
            break
    return SaturationReport(tuple(f.name for f in selected), rounds, stopped_by, matches, new_nodes,
                            _size(snapshot), sum(1 for cid in snapshot.nodes if cid.sort == "Term"),
                            time.perf_counter() - start, facts_written, rule_seconds)


def _run_transformer(rule, view) -> int:
    """rule.transform(view); an exception it raises (a defect in the rule) becomes a
    RuleError naming the rule and its def, so the optimizer's fallback says which."""
    try:
        added = rule.transform(view)
    except EgadError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever a transformer's Python raises
        raise RuleError(message(f"the transformer {rule.name!r} raised {type(error).__name__}: {error}",
                                where=f"{rule.site.file}:{rule.site.line}",
                                instead="fix the transformer, or leave its family out of rules=")) from error
    if not isinstance(added, numbers.Integral) or isinstance(added, bool):
        raise RuleError(message(f"the transformer {rule.name!r} returned {added!r} ({type(added).__name__})",
                                where=f"{rule.site.file}:{rule.site.line}",
                                instead="return how many alternatives it added (an int, 0 for none)"))
    return int(added)


def _size(snapshot: Snapshot) -> int:
    return sum(len(members) for members in snapshot.nodes.values())

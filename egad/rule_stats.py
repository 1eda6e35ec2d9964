"""`egad rules stats`: what each rule does on a workload, measured by the optimizer itself.

    report = rule_stats(workload_cases("lstm"), families=egad.rules.default(), name="lstm")
    print(report)                  # per rule: programs it fired on, matches, e-nodes added,
                                   # time in saturation, e-nodes of it in the extracted program

Each program goes through `egad.optimizer.optimize_program` (encode, saturate, extract
by the cost model, decode, check against the original on its example arguments), the
pipeline `egad.optimize` runs, with the program `egad.optimize` would give it (the
gradient, where the workload has one: egad/rule_programs.py `optimized_cases`). Per
rule, summed over the programs: matches (egglog matches; for a transformer, the
alternatives it added), e-nodes it introduced, seconds spent in it (egglog's search
and apply time, or the transformer's calls: `SaturationReport.rule_seconds`), and the
e-nodes of it the extractor chose. A program the optimizer fell back on (it predicted
no gain, or the check failed) counts its rules as fired but nothing as extracted, and
is listed.

One difference from `egad.optimize`: saturation runs to the end (up to
`STATS_SECONDS`), not to optimize's compile-time budget (`optimizer.DEFAULT_SECONDS`),
so what a rule does is not cut short on a slower machine; a program a limit still
stopped is listed with the limit.
"""
from __future__ import annotations

import dataclasses
import time

from .text_table import text_table

STATS_SECONDS = 120.0


@dataclasses.dataclass
class RuleStats:
    rule: object  # egad.rules.Rule
    fired_on: int = 0  # programs where it matched at least once
    matches: int = 0
    new_nodes: int = 0
    seconds: float = 0.0
    extracted: int = 0  # its e-nodes in the extracted programs

    @property
    def used(self) -> bool:
        return self.extracted > 0


@dataclasses.dataclass
class StatsReport:
    workload: str
    programs: list[str]
    rows: list[RuleStats]
    seconds: float  # the whole optimization of every program
    saturation_seconds: float
    nodes: int  # e-nodes at the end of saturation, summed over the programs
    fallbacks: list[str]  # "program: why"
    limits_hit: list[str]  # "program: the limit that stopped its saturation"
    predicted: tuple[float, float]  # predicted seconds before and after, summed

    def row(self, name: str) -> RuleStats:
        return next(r for r in self.rows if r.rule.name == name)

    def __str__(self) -> str:
        before, after = self.predicted
        in_rules = sum(r.seconds for r in self.rows)
        head = (f"{self.workload}: {len(self.programs)} program{'s' if len(self.programs) != 1 else ''}, "
                f"optimized in {self.seconds:.1f} s (saturation {self.saturation_seconds:.2f} s, of which "
                f"{in_rules:.2f} s in the rules and the rest in analyses; {self.nodes} e-nodes at the end); "
                f"predicted {before * 1e6:.0f} us -> {after * 1e6:.0f} us")
        rows = [("rule", "family", "fired on", "matches", "new e-nodes", "time ms", "extracted", "used")]
        for r in self.rows:
            rows.append((r.rule.name, r.rule.family, str(r.fired_on), str(r.matches), str(r.new_nodes),
                         f"{r.seconds * 1e3:.2f}", str(r.extracted), "yes" if r.used else "-"))
        lines = [head, *("  " + line for line in text_table(rows, right=(2, 3, 4, 5, 6)))]
        lines += [f"  fallback: {why}" for why in self.fallbacks]
        lines += [f"  saturation stopped by a limit: {why}" for why in self.limits_hit]
        return "\n".join(lines)


def rule_stats(cases, families, name: str = "programs") -> StatsReport:
    """Optimize each ProgramCase with `families` (Family objects, names or family files)
    and gather what each rule did. Every rule of the families gets a row, in family order."""
    from .egraph import Limits
    from .optimizer import optimize_program
    from .rule_files import resolve
    from .rule_programs import optimized_cases

    started = time.perf_counter()
    selected = resolve(families)
    rows = {rule.name: RuleStats(rule) for family in selected for rule in family.rules}
    programs, fallbacks, limits_hit = [], [], []
    saturation_seconds, nodes, before, after = 0.0, 0, 0.0, 0.0
    for case in optimized_cases(list(cases)):
        result = optimize_program(case.program, selected, limits=Limits(seconds=STATS_SECONDS),
                                  check_args=case.make_args(0))
        programs.append(case.name)
        if result.fallback:
            fallbacks.append(f"{case.name}: {result.fallback}")
        saturation = result.saturation
        if saturation is None:
            continue
        if saturation.limit_hit:
            limits_hit.append(f"{case.name}: {saturation.limit_hit}")
        saturation_seconds += saturation.seconds
        nodes += saturation.nodes
        for rule_name, count in saturation.fired().items():
            row = rows.get(rule_name)
            if row is None:  # a rule of a family not selected (cannot happen) or renamed
                continue
            row.fired_on += 1
            row.matches += count
        for rule_name, row in rows.items():
            row.new_nodes += saturation.new_nodes.get(rule_name, 0)
            row.seconds += saturation.rule_seconds.get(rule_name, 0.0)
            if not result.fallback:
                row.extracted += result.chosen.get(rule_name, 0)
        if result.predicted_before is not None and result.predicted_after is not None:
            before += result.predicted_before.seconds
            after += (result.predicted_after if not result.fallback else result.predicted_before).seconds
    return StatsReport(name, programs, list(rows.values()), time.perf_counter() - started, saturation_seconds,
                       nodes, fallbacks, limits_hit, (before, after))

"""`egad rules check`: is each rule sound? The interpreter judges (CONVENTIONS 4).

    report = check(["algebra"])                        # family names, Family objects or .py files
    report = check(["mine.py"], programs=workload_cases("lstm"))
    print(report); report.sound                        # False when some rule has a counterexample

Rewrite rules are checked on instances of their left side. For each rewrite of a rule,
a search collects well-typed assignments (`_InstanceSearch`): a type (shape and dtype)
for every term variable and a value for every attribute variable (a reshape's shape,
an axis, a constant), kept when the op table's shape rules accept every op of the
left side and the conditions the search can read hold (`shape_of`, `rank_of`,
`dtype_of`, comparisons: egad/rule_patterns.py). Hypothesis picks one of them (the
simplest first when it shrinks) and the inputs. The
instance is traced into a program, its e-graph is saturated with that rule alone, and
the program that `extract_latest` decodes (it prefers what the rule made) is
interpreted beside the instance on random inputs. An instance the rule does not
rewrite (a condition the search could not read was false) is discarded. A rule with
`invariant_in` conditions gets its instance inside a two-trip loop: the variables the
conditions name come from outside, the others are loop state.

Rules whose left side cannot stand alone (an `If`, a `Switch`, a loop's output), loop
transformers (those that run only under a memory limit, Rule.memory, included: they
are run as if under one), and rewrites none of whose instances was rewritten are
checked on whole programs (`programs`: egad/rule_programs.py's workloads): on every program where the
rule fires, alone, the program `extract_latest` decodes against the original, on the
arguments of `PROGRAM_SEEDS` (each float result within the tolerance below of its own
largest value, or of ten times what the program as written itself moves when its float
inputs move by one rounding: a gradient that cancels to near zero rounds differently
when a sound rule reassociates its sums, and that conditioning is the program's).

A counterexample names the rule, its file:line, the rewrite, the inputs (shrunk by
Hypothesis: small shapes, simple values) and both results; a rewrite that changes a
type is a counterexample with no inputs needed. Floats agree within 1e-7 (float64) or
1e-3 (float32) of the largest magnitude the left side computes, since sound rules
reassociate and round differently; NaN and inf must sit in the same places; ints and
bools must be equal. An error (an index out of range) that only the rewritten program
raises is a counterexample; one that only the program as written raises is not: a
rewrite may drop a check along with the work that needed it (a scatter of zeros no
longer checks its indices), as compilers may remove a trap.
"""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import os
import random
import time

import numpy as np

from .errors import EgadError
from .ir import ops
from .ir.types import TensorType
from .pytree import flatten, unflatten
from .rule_patterns import (UNKNOWN, ConstantPattern, InstanceEnv, NotGenerable, OpPattern, PatternVar,
                            constant_value, derived_shape, derived_value, evaluate_condition, free_vars,
                            read_rewrite, substitute)
from .source import SourceLoc, located_at
from .text_table import text_table

EXAMPLES_PER_RULE = 24  # Hypothesis examples per rule, spread over its rewrites
MIN_EXAMPLES_PER_REWRITE = 4
PROGRAM_SEEDS = (0, 1)  # argument seeds each program is compared on
LOOP_TRIPS = 2
_SEARCH_BUDGET = 40_000  # candidate values a rewrite's search for instances may try
_ASSIGNMENTS = 48  # distinct instances (types and attribute values) a search collects
_FEW, _LONGER = 4, 4  # a search with fewer than _FEW instances gets _LONGER times the budget
_TRIES = 8  # random candidates a randomized attempt tries at each variable but the last
_STALE_ATTEMPTS = 400  # attempts in a row that find nothing new: the search has found what it will
RTOL = {"float64": 1e-7, "float32": 1e-3, "float16": 1e-2}


# --- the report ------------------------------------------------------------------------------

@dataclasses.dataclass
class Counterexample:
    rule: object  # egad.rules.Rule
    where: str  # which rewrite, or which program and seed
    inputs: list[tuple[str, object]]  # (name, value)
    problem: str  # what differs
    left: object = None  # the program as written (the instance), printed
    right: object = None  # the rewritten program

    def __str__(self) -> str:
        site = _where(self.rule)
        lines = [f"counterexample to {self.rule.name} ({self.rule.family}, {site})", f"  {self.where}"]
        if self.inputs:
            lines.append("  inputs:")
            lines += [f"    {name} = {_show_value(value)}" for name, value in self.inputs]
        lines.append(f"  {self.problem}")
        for title, program in (("as written", self.left), ("rewritten", self.right)):
            if program is not None:
                lines.append(f"  {title}:")
                lines += ["    " + line for line in str(program).splitlines()]
        return "\n".join(lines)


class MalformedRule(Exception):
    """A rewrite no node can match (an attribute its op does not have): not a soundness
    question, a defect in the rule."""


@dataclasses.dataclass
class RuleVerdict:
    rule: object  # egad.rules.Rule
    instances: int = 0  # generated instances the rule rewrote, compared
    programs: list[str] = dataclasses.field(default_factory=list)  # programs where it fired, compared
    notes: list[str] = dataclasses.field(default_factory=list)
    counterexample: Counterexample | None = None
    seconds: float = 0.0
    malformed: str | None = None  # why no node can match the rule (MalformedRule)

    @property
    def status(self) -> str:
        if self.counterexample is not None:
            return "UNSOUND"
        if self.malformed is not None:
            return "MALFORMED"
        return "ok" if self.instances or self.programs else "unchecked"


@dataclasses.dataclass
class CheckReport:
    verdicts: list[RuleVerdict]
    programs: int  # programs region rules and transformers were tried on
    seconds: float

    @property
    def sound(self) -> bool:
        """No counterexample and no malformed rule: what `egad rules check` exits 0 on."""
        return all(v.counterexample is None and v.malformed is None for v in self.verdicts)

    def verdict(self, name: str) -> RuleVerdict:
        return next(v for v in self.verdicts if v.rule.name == name)

    def __str__(self) -> str:
        rows = [("rule", "family", "verdict", "instances", "programs", "time", "where")]
        for v in self.verdicts:
            rows.append((v.rule.name, v.rule.family, v.status, str(v.instances), str(len(v.programs)),
                         f"{v.seconds:.1f} s", _where(v.rule)))
        lines = text_table(rows, right=(3, 4, 5))
        for v in self.verdicts:
            lines += [f"note: {v.rule.name}: {note}" for note in v.notes]
            if v.malformed is not None:
                lines.append(f"MALFORMED: {v.rule.name} ({_where(v.rule)}): {v.malformed}")
        for v in self.verdicts:
            if v.counterexample is not None:
                lines += ["", str(v.counterexample)]
        unsound = [v.rule.name for v in self.verdicts if v.counterexample is not None]
        malformed = [v.rule.name for v in self.verdicts if v.malformed is not None]
        unchecked = sum(1 for v in self.verdicts if v.status == "unchecked")
        lines.append("")
        lines.append(f"{len(self.verdicts)} rule{'s' if len(self.verdicts) != 1 else ''} checked in "
                     f"{self.seconds:.1f} s"
                     + (f" (region rules and transformers on {self.programs} programs)" if self.programs else "")
                     + (f", {unchecked} unchecked" if unchecked else "") + ": "
                     + (f"UNSOUND: {', '.join(unsound)}" if unsound else "no counterexample")
                     + (f"; MALFORMED: {', '.join(malformed)}" if malformed else ""))
        return "\n".join(lines)


def _where(rule) -> str:
    """The rule's file:line, relative to the working directory when it lies below it."""
    path = os.path.abspath(rule.site.file)
    relative = os.path.relpath(path)
    return f"{relative if not relative.startswith('..') else path}:{rule.site.line}"


# --- the check -------------------------------------------------------------------------------

def check(families, programs=None, examples: int = EXAMPLES_PER_RULE, seed: int | None = None,
          progress=None) -> CheckReport:
    """Check every rule of `families` (names, Family objects or paths of family files).
    `programs`: ProgramCases (egad/rule_programs.py) for the rules that need whole
    programs, or a function that returns them (called only if some rule needs them);
    None checks those rules on nothing (they are reported unchecked).
    `seed`: Hypothesis's seed (None: derandomized, the same examples every run).
    `progress(text)` is called as each rule is done."""
    from .rule_files import resolve

    started = time.perf_counter()
    selected = resolve(families)
    for family in selected:
        family.ruleset  # noqa: B018 - a rule egglog refuses raises RuleError here, naming it
    rules_ = [rule for family in selected for rule in family.rules]
    verdicts = {rule.name: RuleVerdict(rule) for rule in rules_}
    on_programs = []
    for rule in rules_:
        verdict = verdicts[rule.name]
        begun = time.perf_counter()
        if rule.transform is not None:
            on_programs.append(rule)
            verdict.notes.append("a loop transformer: checked on programs")
        else:
            generable = _check_rewrites(rule, verdict, examples, seed)
            if not generable:
                on_programs.append(rule)
        verdict.seconds += time.perf_counter() - begun
        if progress is not None and rule not in on_programs:
            progress(f"{rule.name}: {verdict.status}")
    cases = list((programs() if callable(programs) else programs) or []) if on_programs else []
    if on_programs and cases:
        _check_on_programs(on_programs, cases, verdicts, progress)
    elif on_programs:
        for rule in on_programs:
            verdicts[rule.name].notes.append("no programs given to check it on")
    return CheckReport(list(verdicts.values()), len(cases) if on_programs else 0, time.perf_counter() - started)


def _check_rewrites(rule, verdict: RuleVerdict, examples: int, seed) -> bool:
    """Check each rewrite of `rule` on generated instances; False when some rewrite
    cannot be generated or none of its instances was rewritten (the rule then goes
    to the programs too)."""
    items = list(rule.rewrites)
    per_item = max(MIN_EXAMPLES_PER_REWRITE, -(-examples // max(len(items), 1)))
    generable = True
    for k, item in enumerate(items):
        where = f"rewrite {k + 1} of {len(items)}"
        try:
            pattern = read_rewrite(item)
            search = _InstanceSearch(pattern)
        except NotGenerable as reason:
            verdict.notes.append(f"{where}: {reason}; checked on programs")
            generable = False
            continue
        try:
            checked, counterexample, why_none = _check_instances(rule, f"{where}: {pattern}", pattern, search,
                                                                 per_item, seed)
        except MalformedRule as malformed:
            verdict.malformed = str(malformed)
            return True
        verdict.instances += checked
        if counterexample is not None:
            verdict.counterexample = counterexample
            return True
        if why_none:
            verdict.notes.append(f"{where}: {why_none} ({pattern}); checked on programs")
            generable = False
    return generable


# --- instances of a left side -------------------------------------------------------------------

_DTYPES = ("float64", "float32", "int64", "int32", "bool")
# every shape of rank <= 3 with dims 2 and 3 (a wrong axis or transpose shows), and two of rank 4
_SHAPES = tuple(shape for rank in range(4) for shape in itertools.product((2, 3), repeat=rank)) + \
    ((2, 3, 2, 3), (3, 2, 3, 2))
TERM_TYPES = tuple(TensorType(shape, dtype) for shape in _SHAPES for dtype in _DTYPES)
_TARGET_SHAPES = tuple(shape for rank in range(4) for shape in itertools.product((1, 2, 3, 4, 6), repeat=rank))
# Values an attribute variable may take, by the attribute it stands for.
ATTR_DOMAINS = {
    "shape": _TARGET_SHAPES,
    "axis": (0, 1, -1, 2),
    "axes": ((), (0,), (1,), (0, 1), (2,), (0, 2), (1, 2), (0, 1, 2)),
    "perm": tuple(p for rank in range(4) for p in itertools.permutations(range(rank))),
    "keepdims": (False, True),
    "dtype": _DTYPES,
}
_INT_BITS = (0, 1, -1, 2, -2, 3)
_FLOAT_VALUES = (0.0, 1.0, -1.0, 2.0, 0.5, -0.0)


class _InstanceSearch:
    """Finds an assignment of the pattern's variables under which every op of the left
    side is well typed and every condition it can read holds: a depth-first search,
    each variable's candidates tried from a position Hypothesis draws (so shrinking
    moves toward the simplest: low ranks, float64, the first attribute values)."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.order = list(pattern.search_order)
        self.conditions = [(c, _condition_vars(c, self.order)) for c in pattern.conditions]
        self.domains = {var: self._filtered(var, self._domain(var)) for var in self.order}
        self.nodes = list(_post_order(pattern.lhs))
        self.constant_dtypes = {n.dtype for n in self.nodes if isinstance(n, ConstantPattern)}
        self.missing_attributes: set[tuple[str, str]] = set()  # (op, attribute) its shape rule read in vain
        if pattern.in_loop and all(v in pattern.outer_vars for v in pattern.term_vars):
            raise NotGenerable("every variable is asked to be loop-invariant: no loop state to build a loop on")

    def _domain(self, var: PatternVar) -> tuple:
        if var.sort == "Term":
            return TERM_TYPES
        op, key = self.pattern.attr_keys.get(var, ("?", "?"))
        if var.sort == "i64" and (op, key) == ("scalar", "bits"):
            dtype = next((n.dtype for n in _post_order(self.pattern.lhs)
                          if isinstance(n, ConstantPattern) and n.bits == var), "int64")
            if dtype.startswith("float"):
                return tuple(int(np.asarray(v, "float64").view("int64")) for v in _FLOAT_VALUES)
            return _INT_BITS
        if key in ATTR_DOMAINS:
            return ATTR_DOMAINS[key]
        raise NotGenerable(f"the variable {var} stands for the attribute {key!r} of {op}, whose values "
                           "rules check cannot choose")

    def _filtered(self, var: PatternVar, domain: tuple) -> tuple:
        """The domain less the values a condition about `var` alone rules out (a rank, a dtype)."""
        alone = [c for c, variables in self.conditions if variables == {var}]
        if not alone:
            return domain
        kept = tuple(value for value in domain
                     if all(evaluate_condition(c, self._env({var: value})) is not False for c in alone))
        if not kept:
            raise NotGenerable(f"no value of {var} in the search's domain meets its conditions")
        return kept

    def assignments(self, seed: int = 0) -> list[dict]:
        """Up to `_ASSIGNMENTS` distinct well-typed assignments, simplest first (low
        ranks, small sizes, float64 before float32 before ints): a depth-first search
        from the first candidates, then randomized attempts that pick each variable at
        random (a few tries until the ops and conditions it completes hold, no
        backtracking) and try every candidate of the last one; all within
        `_SEARCH_BUDGET` candidate checks (four times that while fewer than `_FEW` are found)."""
        rng = random.Random(seed)
        found: dict = {}
        spent = [0]

        def fits(assignment: dict, var: PatternVar, value) -> bool:
            spent[0] += 1
            assignment[var] = value
            if self._consistent(assignment):
                return True
            del assignment[var]
            return False

        def first(assignment: dict, position: int) -> bool:  # depth-first, candidates in order
            if position == len(self.order):
                return True
            var = self.order[position]
            for value in self._derived(var, assignment) or self.domains[var]:
                if spent[0] > _SEARCH_BUDGET // 4:
                    return False
                if fits(assignment, var, value):
                    if first(assignment, position + 1):
                        return True
                    del assignment[var]
            return False

        def attempt(assignment: dict) -> bool:
            for position, var in enumerate(self.order):
                candidates = self._derived(var, assignment) or self.domains[var]
                if position == len(self.order) - 1:
                    tries = rng.sample(candidates, len(candidates))
                else:
                    # most ops want operands of one dtype: half the time, pick among the dtypes in play
                    in_play = self.constant_dtypes | {v.dtype for v in assignment.values() if isinstance(v, TensorType)}
                    alike = [c for c in candidates if isinstance(c, TensorType) and c.dtype in in_play]
                    pool = alike if alike and rng.random() < 0.5 else candidates
                    tries = [rng.choice(pool) for _ in range(_TRIES)]
                if not any(fits(assignment, var, value) for value in tries):
                    return False
            return True

        def keep(assignment: dict) -> None:
            found.setdefault(tuple((var, assignment[var]) for var in self.order), assignment)

        assignment: dict = {}
        if first(assignment, 0):
            keep(assignment)
        stale = 0

        def budget() -> int:  # a search that finds few instances may look longer
            return _SEARCH_BUDGET * (1 if len(found) >= _FEW else _LONGER)

        while self.order and len(found) < _ASSIGNMENTS and spent[0] < budget() and stale < _STALE_ATTEMPTS:
            known, assignment = len(found), {}
            if attempt(assignment):
                keep(assignment)
            stale = stale + 1 if len(found) == known else 0
        return sorted(found.values(), key=self._simplicity)

    def _simplicity(self, assignment: dict) -> tuple:
        types = [v for v in assignment.values() if isinstance(v, TensorType)]
        return (sum(t.ndim for t in types), sum(t.size() for t in types),
                sum(_DTYPES.index(t.dtype) if t.dtype in _DTYPES else 9 for t in types),
                [repr(assignment[var]) for var in self.order])

    def _derived(self, var: PatternVar, assignment: dict):
        """The values an `eq(...)` condition leaves `var`, once its other side is known:
        an attribute's one value, or a term's types of the one shape it may have."""
        env = self._env(assignment)
        for condition, _ in self.conditions:
            if var.sort == "Term":
                shape = derived_shape(condition, var, env)
                if shape is not UNKNOWN:
                    return tuple(TensorType(shape, dtype) for dtype in _DTYPES)
            else:
                value = derived_value(condition, var, env)
                if value is not UNKNOWN:
                    return (value,)
        return None

    def _env(self, assignment: dict, memo=None) -> InstanceEnv:
        memo = {} if memo is None else memo
        return InstanceEnv(assignment, lambda pattern: _type_of(pattern, assignment, memo), self.pattern.outer_vars)

    def _consistent(self, assignment: dict) -> bool:
        memo: dict = {}
        for node in self.nodes:
            if isinstance(node, (OpPattern, ConstantPattern)) and _assigned(node, assignment):
                if _type_of(node, assignment, memo) is None:
                    self.missing_attributes |= memo.get(_MISSING_ATTRIBUTES, set())
                    return False
        env = self._env(assignment, memo)
        for condition, variables in self.conditions:
            if variables <= assignment.keys() and evaluate_condition(condition, env) is False:
                return False
        return True


def _post_order(pattern):
    if isinstance(pattern, OpPattern):
        for x in pattern.inputs:
            yield from _post_order(x)
    yield pattern


def _assigned(pattern, assignment: dict) -> bool:
    return free_vars(pattern) <= assignment.keys()


def _condition_vars(condition, order) -> set:
    names = set()

    def walk(value):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if type(value).__name__ == "UnboundVarDecl":
                names.add(value.name)
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)

    walk(condition)
    return {var for var in order if var.name in names}


_MISSING_ATTRIBUTES = object()  # a memo key: (op, attribute) pairs a shape rule read and the pattern lacks


def _type_of(pattern, assignment: dict, memo: dict | None = None):
    """The type of a left-side term under `assignment`, None when ill typed (`memo`:
    types already computed under this same assignment)."""
    if isinstance(pattern, PatternVar):
        return assignment[pattern]
    if memo is not None and pattern in memo:
        return memo[pattern]
    memo = {} if memo is None else memo
    memo[pattern] = type_ = _compute_type(pattern, assignment, memo)
    return type_


def _compute_type(pattern, assignment: dict, memo: dict):
    if isinstance(pattern, ConstantPattern):
        if pattern.shape is None:
            return TensorType((), pattern.dtype)
        shape = substitute(pattern.shape, assignment)
        # the encoder writes an array of one repeated value as a Splat only at rank >= 1, size >= 1
        if not isinstance(shape, tuple) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            return None
        return TensorType(shape, pattern.dtype)
    inputs = [_type_of(x, assignment, memo) for x in pattern.inputs]
    if any(t is None for t in inputs):
        return None
    try:
        outputs = ops.OPS[pattern.op].shape_rule(inputs, dict(substitute(pattern.attrs, assignment)))
    except KeyError as missing:  # the op reads an attribute the pattern does not give: a typo in the rule
        memo.setdefault(_MISSING_ATTRIBUTES, set()).add((pattern.op, missing.args[0]))
        return None
    except Exception:  # noqa: BLE001 - an ill-typed candidate: shape rules raise ShapeError, and worse on nonsense
        return None
    return outputs[0] if len(outputs) == 1 and isinstance(outputs[0], TensorType) else None


# Hypothesis's phases but `explain`, which reruns the shrunk example many times to say
# which parts of it matter: every rerun with a new structure costs an e-graph.
_PHASES = ("explicit", "reuse", "generate", "target", "shrink")


@dataclasses.dataclass
class _Instance:
    program: object  # the left side, traced
    params: list[tuple[PatternVar, TensorType]]
    rewritten: object = None  # the decoded program, or None when the rule did not rewrite the instance
    problem: str | None = None  # a type change or a program that does not decode: unsound without inputs


def _check_instances(rule, where: str, pattern, search: _InstanceSearch, examples: int, seed):
    from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    instances: dict = {}
    checked = [0]
    assignments = search.assignments(seed or 0)
    if not assignments and search.missing_attributes:
        op, attribute = sorted(search.missing_attributes)[0]
        raise MalformedRule(f"{where}: {op} reads the attribute {attribute!r}, which the left side does not give: "
                            f"no node can match it (docs/ir.md lists each op's attributes)")
    if not assignments:
        return 0, None, "the search found no well-typed instance"

    class Found(Exception):
        def __init__(self, counterexample):
            self.counterexample = counterexample

    @settings(max_examples=examples, database=None, deadline=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False,
              phases=[getattr(Phase, name) for name in _PHASES])
    @given(st.data())
    def run(data):
        assignment = assignments[data.draw(st.integers(0, len(assignments) - 1), label="instance")]
        key = tuple((var, assignment[var]) for var in search.order)
        if key not in instances:
            instances[key] = _build_instance(rule, pattern, assignment)
        instance = instances[key]
        if instance.problem is not None:
            raise Found(Counterexample(rule, where, [(str(v), t) for v, t in instance.params], instance.problem,
                                       instance.program, instance.rewritten))
        if instance.rewritten is None:
            reject()
        values = [data.draw(_values(type_, rule.finite_only), label=str(var)) for var, type_ in instance.params]
        problem = _compare(instance, pattern, assignment, values)
        if problem is not None:
            raise Found(_counterexample_on(rule, where, instance, values, problem))
        checked[0] += 1

    if seed is not None:
        run = hypothesis_seed(seed)(run)
    try:
        run()
    except Found as found:
        return checked[0], found.counterexample, None
    except Unsatisfiable:
        pass
    if not rule.finite_only:
        for key, instance in itertools.islice(instances.items(), EDGE_SWEPT_INSTANCES):
            tried, counterexample = _sweep_edges(rule, where, pattern, instance, dict(key))
            checked[0] += tried
            if counterexample is not None:
                return checked[0], counterexample, None
    return checked[0], None, None if checked[0] else f"none of {len(assignments)} well-typed instances was rewritten"


# The edge sweep after the random examples: every combination of edge values over the
# first instances' variables (each variable one value throughout), at most
# EDGE_COMBINATIONS of them per instance (a seeded sample beyond). Drawn at random, an
# edge that one variable must hold (NaN for `x != x`) or that three must hold at once
# (max, max, -max for `(a + b) + c`) came up in one run and not the next.
EDGE_SWEPT_INSTANCES = 2
EDGE_COMBINATIONS = 256


def _edges(dtype: str) -> list:
    """The values where rewrites that hold for small numbers break: IEEE's specials and
    overflow (finfo.max doubled is inf), and the integers where arithmetic wraps."""
    if dtype == "bool":
        return [False, True]
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        return [int(info.min), int(info.max), -1, 0, 1]
    largest = float(np.finfo(dtype).max)
    return [np.nan, np.inf, -np.inf, largest, -largest, -0.0, 1.0]


def _sweep_edges(rule, where: str, pattern, instance: _Instance, assignment: dict):
    """(combinations compared, the first Counterexample or None) over edge values."""
    if instance.rewritten is None or instance.problem is not None:
        return 0, None
    per_param = [_edges(type_.dtype) for _, type_ in instance.params]
    combinations = list(itertools.product(*per_param))
    if len(combinations) > EDGE_COMBINATIONS:
        combinations = random.Random(0).sample(combinations, EDGE_COMBINATIONS)
    for combination in combinations:
        values = [np.full(type_.shape, value, type_.dtype) for (_, type_), value in zip(instance.params, combination)]
        problem = _compare(instance, pattern, assignment, values)
        if problem is not None:
            return 0, _counterexample_on(rule, where, instance, values, problem)
    return len(combinations), None


def _counterexample_on(rule, where: str, instance: _Instance, values: list, problem: str) -> Counterexample:
    """The Counterexample of `instance` run on `values` (one per variable)."""
    return Counterexample(rule, where, [(str(v), x) for (v, _), x in zip(instance.params, values)], problem,
                          instance.program, instance.rewritten)


def _values(type_: TensorType, finite_only: bool = False):
    """Values of `type_` to run both sides on: small numbers, and, unless the rule is
    `finite_only` (rules/registry.py Rule), the edges too (`_edges`: inf, NaN, -0.0,
    magnitudes that overflow, integers that wrap), where a rule may change no more than
    rounding."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    if type_.dtype == "bool":
        elements = st.booleans()
    elif type_.dtype.startswith("int"):
        elements = st.integers(-3, 3)
    else:
        width = np.dtype(type_.dtype).itemsize * 8
        elements = st.floats(-3, 3, width=width, allow_subnormal=False)
    if not finite_only and type_.dtype != "bool":
        edges = st.sampled_from(_edges(type_.dtype))
        elements = st.one_of(elements, elements, elements, edges)  # an edge for one element in four
    return hnp.arrays(type_.dtype, tuple(type_.shape), elements=elements)


def _build_instance(rule, pattern, assignment: dict) -> _Instance:
    """Trace the left side under `assignment`, saturate with `rule` alone, decode what
    `extract_latest` picks."""
    import egad

    from .egraph import Limits, Snapshot, decode, encode, extract_inserted, extract_latest, saturate
    from .egraph.analysis import type_conflicts
    from .ir.fingerprint import fingerprint

    outer = [v for v in pattern.term_vars if v in pattern.outer_vars]
    inner = [v for v in pattern.term_vars if v not in pattern.outer_vars]
    params = [(v, assignment[v]) for v in outer + inner]

    def left_side(*values):
        env = dict(zip(outer + inner, values))
        if not pattern.in_loop:
            return _trace_term(pattern.lhs, env, assignment)

        def step(carry, _):
            return carry, _trace_term(pattern.lhs, {**env, **dict(zip(inner, carry))}, assignment)

        return egad.scan(step, tuple(env[v] for v in inner), None, length=LOOP_TRIPS)[1]

    left_side.__signature__ = inspect.Signature(
        [inspect.Parameter(_identifier(v.name, k), inspect.Parameter.POSITIONAL_ONLY) for k, (v, _) in
         enumerate(params)])
    left_side.__name__ = rule.name.replace("-", "_")
    with located_at(SourceLoc(rule.site.file, rule.site.line, rule.name)):  # the rule's line, not Hypothesis's
        program = egad.trace(left_side, *(np.zeros(t.shape, t.dtype) for _, t in params))
    instance = _Instance(program, params)
    encoding = encode(program)
    before = Snapshot.of(encoding.egraph)  # the program as encoded and decoded, to see whether the rule changed it
    unchanged = decode(encoding, before, extract_inserted(before, encoding.provenance.resolve(before), encoding.roots))
    try:
        report = saturate(encoding, [_alone(rule)], Limits(rounds=3, seconds=5.0))
    except Exception as error:  # noqa: BLE001 - egglog raises plain exceptions for a rule it cannot run
        instance.problem = f"saturating with the rule raised {type(error).__name__}: {_first_line(error)}"
        return instance
    if not report.fired():
        return instance
    snapshot = Snapshot.of(encoding.egraph)
    conflicts = type_conflicts(encoding, snapshot)
    if conflicts:
        instance.problem = f"the rewrite changes a type: {conflicts[0]}"
        return instance
    origins = encoding.provenance.resolve(snapshot)
    try:
        rewritten = decode(encoding, snapshot, extract_latest(snapshot, origins, encoding.roots), origins)
    except Exception as error:  # noqa: BLE001 - verify errors and worse: the rule built something unreadable
        instance.problem = f"the rewritten program does not decode: {type(error).__name__}: {_first_line(error)}"
        return instance
    if fingerprint(rewritten) != fingerprint(unchanged):
        instance.rewritten = rewritten
    return instance


def _identifier(name: str, k: int) -> str:
    return name if name.isidentifier() else f"v{k}"


_ALONE: dict = {}


def _alone(rule):
    """A family of `rule` alone (not registered: the registry keeps the rule's own family)."""
    from .rules import Family

    if rule.name not in _ALONE:
        _ALONE[rule.name] = Family(f"{rule.name} alone", "", [rule])
    return _ALONE[rule.name]


def _trace_term(pattern, env: dict, assignment: dict):
    from .frontend import primitives

    if isinstance(pattern, PatternVar):
        return env[pattern]
    if isinstance(pattern, ConstantPattern):
        bits = substitute(pattern.bits, assignment)
        value = np.asarray(constant_value(pattern.dtype, bits), pattern.dtype)
        if pattern.shape is not None:
            value = np.full(substitute(pattern.shape, assignment), value, pattern.dtype)
        return primitives.constant(value, pattern.dtype)
    inputs = [_trace_term(x, env, assignment) for x in pattern.inputs]
    return primitives.apply1(pattern.op, inputs, dict(substitute(pattern.attrs, assignment)))


def _evaluate_term(pattern, env: dict, assignment: dict, magnitudes: list):
    """The left side's value computed op by op with numpy (the op table's impls), each
    intermediate's largest finite magnitude appended to `magnitudes`."""
    if isinstance(pattern, PatternVar):
        value = env[pattern]
    elif isinstance(pattern, ConstantPattern):
        value = np.asarray(constant_value(pattern.dtype, substitute(pattern.bits, assignment)), pattern.dtype)
        if pattern.shape is not None:
            value = np.full(substitute(pattern.shape, assignment), value, pattern.dtype)
    else:
        inputs = [_evaluate_term(x, env, assignment, magnitudes) for x in pattern.inputs]
        (value,) = ops.OPS[pattern.op].impl(inputs, dict(substitute(pattern.attrs, assignment)))
    magnitudes.append(_magnitude(value))
    return np.asarray(value)


def _magnitude(value) -> float:
    value = np.asarray(value)
    if value.dtype.kind not in "fiu" or not value.size:
        return 0.0
    finite = value[np.isfinite(value)] if value.dtype.kind == "f" else value
    return float(np.max(np.abs(finite.astype(np.float64)), initial=0.0))


def _compare(instance: _Instance, pattern, assignment: dict, values: list) -> str | None:
    from .interp import interpret

    magnitudes: list[float] = []
    try:
        with np.errstate(all="ignore"):
            _evaluate_term(pattern.lhs, {v: x for (v, _), x in zip(instance.params, values)}, assignment,
                           magnitudes)
    except Exception:  # noqa: BLE001 - the scale is a courtesy; the interpreter below is the judge
        pass
    return _differences(interpret, instance.program, instance.rewritten, values, max(magnitudes, default=0.0))


def _differences(interpret, original, rewritten, args, scale: float, noise: list | None = None) -> str | None:
    """What differs between the two programs' results on `args`, or None. An error
    raised by both is agreement, and so is an error the rewritten program no longer
    raises; an error only the rewritten program raises is a difference. `noise`, per
    result, widens the bound to NOISE_FACTOR times it (`_rounding_noise`)."""
    outcomes = []
    for program in (original, rewritten):
        try:
            outcomes.append(flatten(interpret(program, *args))[0])
        except EgadError as error:
            outcomes.append(error)
    want, got = outcomes
    if isinstance(got, Exception):
        if isinstance(want, Exception):
            return None
        return f"the rewritten program raises, the program as written does not: {str(got).splitlines()[0]}"
    if isinstance(want, Exception):
        return None  # a rewrite may drop a check (a scatter of zeros no longer checks its index): a refinement
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        label = f"result {k}" if len(want) > 1 else "result"
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{label}: {w.dtype}{list(w.shape)} as written, {g.dtype}{list(g.shape)} rewritten"
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return f"{label}: {_show_value(w)} as written, {_show_value(g)} rewritten"
            continue
        same_specials = np.array_equal(np.isnan(g), np.isnan(w)) and \
            np.array_equal(np.where(np.isinf(w), w, 0), np.where(np.isinf(g), g, 0))
        if not same_specials:
            return f"{label}: NaN or inf in other places: {_show_value(w)} as written, {_show_value(g)} rewritten"
        finite = np.isfinite(w)
        bound = RTOL.get(w.dtype.name, 1e-7) * max(scale, _magnitude(w), np.finfo(w.dtype).tiny)
        if noise is not None and k < len(noise):
            bound = max(bound, NOISE_FACTOR * noise[k])
        error = float(np.max(np.abs(g[finite].astype(np.float64) - w[finite]), initial=0.0))
        if error > bound:
            return (f"{label}: {_show_value(w)} as written, {_show_value(g)} rewritten (differ by {error:.3g}; "
                    f"allowed {bound:.3g})")
    return None


NOISE_FACTOR = 10.0


def _rounding_noise(interpret, program, args, seed: int) -> list | None:
    """Per result, the largest change of the program's float results when each float
    input element moves by one rounding (times 1 +- eps, signs drawn from `seed`): how
    much this program amplifies rounding, which a sound reassociation also shows. None
    when the program raises."""
    rng = np.random.default_rng(seed)

    def nudged(arg):
        leaves, tree = flatten(arg)
        out = []
        for leaf in leaves:
            value = np.asarray(leaf)
            if value.dtype.kind == "f":
                signs = rng.choice(np.array([-1.0, 1.0]), size=value.shape)
                value = (value * (1 + np.finfo(value.dtype).eps * signs)).astype(value.dtype)
            out.append(value)
        return unflatten(tree, out)

    try:
        base = flatten(interpret(program, *args))[0]
        moved = flatten(interpret(program, *[nudged(a) for a in args]))[0]
    except EgadError:
        return None
    noise = []
    for a, b in zip(base, moved):
        a, b = np.asarray(a), np.asarray(b)
        finite = np.isfinite(a) & np.isfinite(b)
        noise.append(float(np.max(np.abs(a[finite].astype(np.float64) - b[finite]), initial=0.0))
                     if a.dtype.kind == "f" else 0.0)
    return noise


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


def _show_value(value) -> str:
    if isinstance(value, TensorType):
        return str(value)
    array = np.asarray(value)
    text = np.array2string(array, precision=6, threshold=12, separator=", ").replace("\n", "")
    return f"{text} ({array.dtype}{list(array.shape)})"


# --- rules checked on whole programs --------------------------------------------------------------

def _check_on_programs(rules_, cases, verdicts: dict, progress) -> None:
    """Each rule alone on every program where it fires (found by one saturation with
    all of them): the decoded program against the original on `PROGRAM_SEEDS`."""
    from .egraph import Limits, encode, saturate
    from .rules import Family, all_rules

    together = Family("checked on programs", "", list(rules_))
    by_name = {rule.name: rule for rule in all_rules()}
    for case in cases:
        begun = time.perf_counter()
        fired = {rule.name: 1 for rule in rules_}  # one rule, or a failure below: try each alone
        if len(rules_) > 1:
            try:
                fired = saturate(encode(case.program), [together], Limits(), memory_limited=True).fired()
            except Exception:  # noqa: BLE001 - a rule that raises is found when each runs alone
                pass
        share = (time.perf_counter() - begun) / len(rules_)
        for rule in rules_:
            verdict = verdicts[rule.name]
            verdict.seconds += share
            if verdict.counterexample is not None or (rule.name not in fired and not rule.reads):
                continue
            begun = time.perf_counter()
            fired_alone = rule.name in fired and _check_program(rule, case, verdict)
            if not fired_alone and rule.reads and verdict.counterexample is None:
                # it builds on other rules' rewrites (Rule.reads): checked alone on the program
                # they rewrite this one into
                prepared = _prepared(case, [by_name[name] for name in rule.reads if name in by_name])
                if prepared is not None:
                    _check_program(rule, prepared, verdict)
            verdict.seconds += time.perf_counter() - begun
    for rule in rules_:
        verdict = verdicts[rule.name]
        if not verdict.programs and verdict.counterexample is None:
            verdict.notes.append(f"fired on none of the {len(cases)} programs")
        if progress is not None:
            progress(f"{rule.name}: {verdict.status} ({len(verdict.programs)} programs)")


def _prepared(case, others):
    """`case` with its program rewritten by the rules `others` (their latest terms), or
    None when that fails or changes nothing: the program a rule that builds on theirs
    is checked on. The rewritten program is the one compared, before and after."""
    from .egraph import Limits, Snapshot, decode, encode, extract_latest, saturate
    from .rules import Family

    encoding = encode(case.program)
    try:
        if not saturate(encoding, [Family("prepared by", "", others)], Limits(), memory_limited=True).fired():
            return None
        snapshot = Snapshot.of(encoding.egraph)
        origins = encoding.provenance.resolve(snapshot)
        program = decode(encoding, snapshot, extract_latest(snapshot, origins, encoding.roots), origins)
    except Exception:  # noqa: BLE001 - the other rules' own failures are found when each is checked alone
        return None
    names = ", ".join(sorted(rule.name for rule in others))
    return dataclasses.replace(case, name=f"{case.name} after {names}", program=program)


def _check_program(rule, case, verdict: RuleVerdict) -> bool:
    """Whether `rule` alone fired on `case`'s program (a counterexample, or the program
    added to `verdict.programs`)."""
    from .egraph import Limits, Snapshot, decode, encode, extract_latest, saturate
    from .egraph.analysis import type_conflicts
    from .interp import interpret

    encoding = encode(case.program)
    try:
        report = saturate(encoding, [_alone(rule)], Limits(), memory_limited=True)
    except Exception as error:  # noqa: BLE001 - a transformer that raises is reported, not propagated
        error = error.__cause__ or error  # the transformer's own error, not the RuleError naming it
        verdict.counterexample = Counterexample(rule, f"program {case.name}", [],
                                                f"the rule raised {type(error).__name__}: {_first_line(error)}")
        return True
    if not report.fired():
        return False
    snapshot = Snapshot.of(encoding.egraph)
    conflicts = type_conflicts(encoding, snapshot)
    where = f"program {case.name}"
    if conflicts:
        verdict.counterexample = Counterexample(rule, where, [], f"the rule changes a type: {conflicts[0]}",
                                                case.program)
        return True
    origins = encoding.provenance.resolve(snapshot)
    try:
        rewritten = decode(encoding, snapshot, extract_latest(snapshot, origins, encoding.roots), origins)
    except Exception as error:  # noqa: BLE001 - verify errors and worse: the rule built something unreadable
        verdict.counterexample = Counterexample(
            rule, where, [], f"the rewritten program does not decode: {type(error).__name__}: {_first_line(error)}",
            case.program)
        return True
    for seed in PROGRAM_SEEDS:
        args = case.make_args(seed)
        problem = _differences(interpret, case.program, rewritten, args, 0.0)
        if problem is not None:
            noise = _rounding_noise(interpret, case.program, args, seed)
            problem = _differences(interpret, case.program, rewritten, args, 0.0, noise)
        if problem is not None:
            verdict.counterexample = Counterexample(rule, f"{where}, on the arguments its make_args(seed={seed}) "
                                                    "gives", [], problem, case.program, rewritten)
            return True
    verdict.programs.append(case.name)
    return True

"""Rules as data (CONVENTIONS 5): every rule has a stable kebab-case name, a family,
the file:line where it is written, a one-line why, and what it does.

A rule is either egglog rewrites or a Python *transformer*:

    ALGEBRA = family("algebra", __doc__)
    ALGEBRA.rewrites("mul-one", "x * 1 = x for every value, NaN, inf and -0.0 included",
                     rewrite(op.mul(x, one)).to(x),
                     rewrite(op.mul(one, x)).to(x))

    @FUSION.transformer("fuse-shared-operand-matmuls", "k matmuls of one x: one kernel instead of k")
    def fuse(view) -> int: ...          # adds nodes and unions; returns how many alternatives

`rewrite(lhs).to(rhs, *conditions)`, `rule(*facts).then(union(a).with_(b), ...)`
read like egglog's own builders; the registry compiles them into egglog rules that
also leave a *mark* for each node they build (egad/egraph/marks.py), which is how
every e-node knows the rule that introduced it. A transformer gets a view of the
e-graph (egad/egraph/schedule.py: `TransformView`) and records its nodes itself.

`families()` lists the families in schedule order, `rules_of(name)` a family's rules.
The schedule (egad/egraph/schedule.py) is the only place that runs them.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import egglog
from egglog import eq, var

from egad.egraph.language import Term
from egad.errors import RuleError, message
from egad.egraph.marks import marks
from egad.egraph.provenance import RuleSite

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_FAMILY_NAME = re.compile(r"^[a-z0-9]+([-_][a-z0-9]+)*$")  # the default families' are snake_case


# --- builders that read like egglog's ----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Rewrite:
    lhs: object
    rhs: object
    conditions: tuple


@dataclasses.dataclass(frozen=True)
class Derivation:
    """A rule with several patterns (`facts`) whose actions are unions `(old, new)`."""

    facts: tuple
    unions: tuple[tuple[object, object], ...]


class _RewriteBuilder:
    def __init__(self, lhs):
        self.lhs = lhs

    def to(self, rhs, *conditions) -> Rewrite:
        return Rewrite(self.lhs, rhs, conditions)


class _RuleBuilder:
    def __init__(self, facts):
        self.facts = facts

    def then(self, *unions: tuple[object, object]) -> Derivation:
        return Derivation(self.facts, unions)


class _UnionBuilder:
    def __init__(self, old):
        self.old = old

    def with_(self, new) -> tuple[object, object]:
        return (self.old, new)


def rewrite(lhs) -> _RewriteBuilder:
    """`rewrite(lhs).to(rhs, *conditions)`: where lhs matches and the conditions hold, rhs joins lhs's class."""
    return _RewriteBuilder(lhs)


def rule(*facts) -> _RuleBuilder:
    """`rule(*facts).then(union(a).with_(b), ...)`: a rule with several patterns."""
    return _RuleBuilder(facts)


def union(old) -> _UnionBuilder:
    return _UnionBuilder(old)


# --- rules and families --------------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class Rule:
    name: str  # stable kebab-case name, unique across families
    family: str
    why: str  # one line: why it is sound and what it buys
    site: RuleSite  # where it is written
    id: int  # its number in the marks it leaves
    rewrites: tuple = ()  # Rewrite / Derivation items
    transform: Callable | None = None  # a Python transformer instead
    # a transformer that runs only once nothing else changes the e-graph (the schedule's
    # second phase): one that copies whole loops for an alternative that costs more
    # e-graph than it is likely to save waits until the other rules have settled
    late: bool = False
    # a transformer whose alternatives only a memory limit makes worth their cost (they
    # save bytes held, for time): run only when the saturation is told memory is limited
    memory: bool = False
    # names of rules whose rewrites this transformer matches, so that it fires only after
    # them (scatters-into-concat reads the chains scatter-into-sum makes): `egad rules
    # check` checks it on the programs they rewrite (egad/rule_check.py)
    reads: tuple = ()
    # a rule exact only where no value is inf or NaN and nothing overflows (a
    # reassociation: (h * 2) * 0.5 is inf for h = 3e38, h * (2 * 0.5) is h): `egad rules
    # check` draws finite values for it, not IEEE's edges (docs/optimizer.md lists them)
    finite_only: bool = False

    @property
    def egglog_rules(self) -> tuple:
        """The egglog rules, marks included; named `<name>/<k>` so run reports map back."""
        if not hasattr(self, "_compiled"):
            self._compiled = tuple(_compile(self, k, item) for k, item in enumerate(self.rewrites))
        return self._compiled

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.family}, {self.site})"


_ROOT = var("rewritten", Term)


def _compile(rule_: Rule, k: int, item):
    name = f"{rule_.name}/{k}"
    if isinstance(item, Rewrite):
        return egglog.rule(eq(_ROOT).to(item.lhs), *item.conditions, name=name).then(
            egglog.union(_ROOT).with_(item.rhs), *marks(rule_.id, item.rhs))
    actions = []
    for old, new in item.unions:
        actions.extend([egglog.union(old).with_(new), *marks(rule_.id, new)])
    return egglog.rule(*item.facts, name=name).then(*actions)


@dataclasses.dataclass(eq=False)
class Family:
    name: str
    doc: str  # the family module's docstring: what its rules assume
    rules: list[Rule] = dataclasses.field(default_factory=list)
    todo: str | None = None  # set for a family that is planned but has no rules yet

    def rewrites(self, name: str, why: str, *items, finite_only: bool = False) -> Rule:
        """Register a rule made of `rewrite(...)`/`rule(...)` items, sited at the caller;
        `finite_only`: exact only away from inf, NaN and overflow (Rule.finite_only)."""
        site = RuleSite.here(name, depth=2)
        for k, item in enumerate(items):
            _check_item(name, site, k, len(items), item)
        return self._add(Rule(name, self.name, why, site, len(_RULES), tuple(items), finite_only=finite_only))

    def transformer(self, name: str, why: str, late: bool = False, memory: bool = False, reads: tuple = (),
                    finite_only: bool = False):
        """Decorator: register a Python transformer `fn(view) -> alternatives added`, sited
        at its def; `late`: run in the schedule's second phase only (Rule.late); `memory`:
        only under a memory limit (Rule.memory); `reads`: the rules it builds on (Rule.reads);
        `finite_only`: exact only away from inf, NaN and overflow (Rule.finite_only)."""
        def register(fn):
            code = fn.__code__
            self._add(Rule(name, self.name, why, RuleSite(name, code.co_filename, code.co_firstlineno),
                           len(_RULES), (), fn, late, memory, tuple(reads), finite_only))
            return fn

        return register

    @property
    def ruleset(self) -> egglog.Ruleset | None:
        """All the family's egglog rules as one ruleset (None when it has none); a rule
        egglog refuses (a variable only the right side or a condition binds, a left side
        that is a bare variable) raises RuleError naming it."""
        if not hasattr(self, "_ruleset"):
            compiled = [r for rule_ in self.rules for r in rule_.egglog_rules]
            ruleset = egglog.ruleset(*compiled, name=f"egad-{self.name}") if compiled else None
            if ruleset is not None:
                try:
                    egglog.EGraph().register(*compiled)  # egglog checks a rule where it is first registered
                except Exception:  # noqa: BLE001 - egglog's own error types
                    for rule_ in self.rules:
                        _check_with_egglog(rule_)
                    raise
            self._ruleset = ruleset
        return self._ruleset

    @property
    def transformers(self) -> list[Rule]:
        return [r for r in self.rules if r.transform is not None]

    def _add(self, rule_: Rule) -> Rule:
        where = f"{rule_.site.file}:{rule_.site.line}"
        if not _KEBAB.match(rule_.name):
            raise RuleError(message(f"rule name {rule_.name!r} is not kebab-case", where=where,
                                    instead="name it like 'fold-double-negation'"))
        other = next((r for r in _RULES if r.name == rule_.name), None)
        if other is not None:
            raise RuleError(message(f"rule {rule_.name!r} is defined twice, first at {other.site.file}:"
                                    f"{other.site.line} (family {other.family!r})", where=where,
                                    instead="give each rule a name of its own"))
        if not isinstance(rule_.why, str) or not rule_.why.strip():
            raise RuleError(message(f"rule {rule_.name!r} says no why ({rule_.why!r})", where=where,
                                    instead="give it one line on why it is sound and what it buys"))
        _RULES.append(rule_)
        self.rules.append(rule_)
        return rule_


def _check_item(name: str, site: RuleSite, k: int, count: int, item) -> None:
    """RuleError where item k of rule `name` is not a well-formed rewrite or derivation."""
    def fail(what: str, instead: str):
        raise RuleError(message(f"rule {name!r}, item {k + 1} of {count}: {what}", where=f"{site.file}:{site.line}",
                                instead=instead))

    if isinstance(item, Derivation):
        for old, new in item.unions:
            if not (_is_term(old) and _is_term(new)):
                fail("a union of something other than two terms", "write union(term).with_(term)")
        return
    if not isinstance(item, Rewrite):
        fail(f"a {type(item).__name__}, not rewrite(lhs).to(rhs) or rule(...).then(...)",
             "wrap the pattern: rewrite(op.neg(op.neg(x))).to(x)")
    if not _is_term(item.lhs):
        fail(f"the left side is a {type(item.lhs).__name__}, not a term", "write the left side with op.<name>(...)")
    if _is_variable(item.lhs):
        fail("the left side is a bare variable, which matches every term and grounds nothing",
             "match an op: rewrite(op.neg(op.neg(x))).to(x)")
    if not _is_term(item.rhs):
        fail(f"the right side is a {type(item.rhs).__name__}, not a term",
             "build it with op.<name>(...), a variable of the left side, or literal(value, dtype)")
    for condition in item.conditions:
        if not isinstance(condition, (egglog.Fact, egglog.Unit)):
            fail(f"a condition is a {type(condition).__name__}, not a fact",
                 "write conditions as eq(a).to(b) or a helper of egad.rules.patterns such as has_dtype(x, 'float64')")


def _is_term(value) -> bool:
    typed = getattr(value, "__egg_typed_expr__", None)
    return typed is not None and typed.tp.ident.name == "Term"


def _is_variable(value) -> bool:
    return type(value.__egg_typed_expr__.expr).__name__ == "UnboundVarDecl"


def _check_with_egglog(rule_: Rule) -> None:
    """RuleError where egglog refuses one of `rule_`'s compiled rules."""
    for k, compiled in enumerate(rule_.egglog_rules):
        try:
            egglog.EGraph().register(compiled)
        except Exception as error:  # noqa: BLE001 - egglog's own error types
            lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith("At ")]
            reason = lines[0] if lines else type(error).__name__
            raise RuleError(message(
                f"rule {rule_.name!r}, item {k + 1} of {len(rule_.rewrites)}: egglog refuses it: {reason}",
                where=f"{rule_.site.file}:{rule_.site.line}",
                instead="every variable of the right side and the conditions must appear on the left side "
                        "(egad's variables print with a leading _)")) from None


_FAMILIES: dict[str, Family] = {}
_RULES: list[Rule] = []


def family(name: str, doc: str, todo: str | None = None) -> Family:
    """Declare a family (once, at the top of its module)."""
    if not isinstance(name, str) or not _FAMILY_NAME.match(name):
        raise RuleError(message(f"family name {name!r} is not a name of lower-case words",
                                instead='name it like "my_rules" or "my-rules": egad.rules.family("my_rules", __doc__)'))
    if not isinstance(doc, str) or not doc.strip():
        raise RuleError(message(f"family {name!r} has no doc ({doc!r})",
                                instead="say what its rules do, e.g. in the module's docstring, and pass __doc__"))
    if name in _FAMILIES:
        raise ValueError(f"family {name!r} is declared twice")
    _FAMILIES[name] = Family(name, doc, todo=todo)
    return _FAMILIES[name]


def families() -> list[Family]:
    """Every family, in the order the schedule runs them."""
    return list(_FAMILIES.values())


def family_named(name: str) -> Family:
    try:
        return _FAMILIES[name]
    except KeyError:
        raise KeyError(f"no rule family {name!r}; the families are {', '.join(_FAMILIES)}") from None


def rules_of(family_name: str) -> list[Rule]:
    """The rules of one family, in the order they are written."""
    return list(family_named(family_name).rules)


def all_rules() -> list[Rule]:
    return list(_RULES)


def sites() -> dict[int, RuleSite]:
    """Rule id -> site, for reading marks back."""
    return {r.id: r.site for r in _RULES}

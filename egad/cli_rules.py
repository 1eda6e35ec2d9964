"""`egad rules ...`: the rule-authoring commands (issue 7; docs/rules.md walks through them).

    egad rules list                            families, rule names, where each is written, and why
    egad rules check [FAMILY|FILE.py ...]      is each rule sound? exit 1 with a counterexample if not
    egad rules stats [WORKLOAD ...]            per rule: matches, e-nodes added, time, extracted or not
        [--rules FAMILY|FILE.py ...]

`check` with no argument checks every default family; a FILE.py is a family file of
your own (egad/rule_files.py). Region rules and loop transformers are checked on the
programs of `--programs` (default: lstm, gnmt-tiny, the corpus and the branch probes,
egad/rule_programs.py; `--programs none` skips them). `stats` runs the workloads lstm, gnmt-tiny (default) and corpus through
the optimizer; `--rules` names the families to run (default: the default ones) and
adds those of family files to them.
"""
from __future__ import annotations

import os
import pathlib
import sys
import time

from .cli import positive_int
from .errors import EgadError, message


def register(commands) -> None:
    rules = commands.add_parser("rules", help="the rewrite-rule families")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    listing = rules_commands.add_parser("list", help="families, rule names, where each is written, and why")
    listing.set_defaults(run=lambda args: list_rules())

    check = rules_commands.add_parser("check", help="is each rule sound? (exit 1 on a counterexample)")
    check.add_argument("families", nargs="*", metavar="FAMILY|FILE.py",
                       help="default families by name, or Python files that declare families (default: every "
                            "default family)")
    check.add_argument("--programs", nargs="+", default=None, metavar="WORKLOAD",
                       help="workloads to check region rules and loop transformers on: lstm, gnmt-tiny, corpus, "
                            "branches, or none (default: all four)")
    check.add_argument("--corpus", default=None, metavar="DIR", help="the corpus package (default: tests/programs "
                                                                     "of the repository)")
    check.add_argument("--examples", type=positive_int, default=None, metavar="N",
                       help="Hypothesis examples per rule (default: 24)")
    check.add_argument("--seed", type=int, default=None, help="Hypothesis's seed (default: the same examples "
                                                              "every run)")
    check.set_defaults(run=run_check)

    stats = rules_commands.add_parser("stats", help="per rule: matches, e-nodes added, time, extracted or not")
    stats.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                       help="lstm, gnmt-tiny, corpus, branches (default: lstm gnmt-tiny)")
    stats.add_argument("--rules", nargs="+", default=(), metavar="FAMILY|FILE.py",
                       help="families to run (default: the default families); a family file's families are "
                            "added to them")
    stats.add_argument("--corpus", default=None, metavar="DIR", help="the corpus package (default: tests/programs "
                                                                     "of the repository)")
    stats.set_defaults(run=run_stats)


def list_rules() -> int:
    """Print every default family, then each of its rules: name, file:line, why."""
    from . import rules

    root = os.path.dirname(os.path.dirname(os.path.abspath(rules.__file__)))
    for family in rules.default():
        state = f" (planned: {family.todo})" if family.todo else ""
        print(f"{family.name}{state}")
        for rule in family.rules:
            kind = "transformer" if rule.transform is not None else "rewrite"
            where = f"{os.path.relpath(rule.site.file, root)}:{rule.site.line}"
            print(f"  {rule.name:34s} {kind:11s} {where:28s} {rule.why}")
    return 0


def run_check(args) -> int:
    from . import rule_check, rules
    from .rule_programs import WORKLOADS

    try:
        families = _families(args.families) if args.families else rules.default()
        names = _workload_names(args.programs, WORKLOADS)
        _check_corpus(args.corpus, names)
        started = time.perf_counter()
        report = rule_check.check(families, programs=lambda: _cases(names, args.corpus),
                                  examples=rule_check.EXAMPLES_PER_RULE if args.examples is None else args.examples,
                                  seed=args.seed,
                                  progress=lambda text: print(f"[{time.perf_counter() - started:6.1f} s] {text}",
                                                              file=sys.stderr, flush=True))
    except EgadError as error:
        print(f"egad rules check: {error}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.sound else 1


def run_stats(args) -> int:
    from . import rule_stats
    from .rule_programs import WORKLOADS

    try:
        families = _stats_families(args.rules)
        names = _workload_names(args.workloads or None, ("lstm", "gnmt-tiny"))
        if not names:  # `none`: check's way to skip programs; stats has nothing else to measure
            raise EgadError(message("no workload to measure",
                                    instead=f"name some of {', '.join(WORKLOADS)} (default: lstm gnmt-tiny)"))
        _check_corpus(args.corpus, names)
        for name in names:
            print(rule_stats.rule_stats(_cases([name], args.corpus), families, name))
            print()
    except EgadError as error:
        print(f"egad rules stats: {error}", file=sys.stderr)
        return 2
    return 0


def _families(names) -> list:
    from .rule_files import resolve

    return resolve(names)


def _stats_families(names) -> list:
    """The named families (default: the default ones), then those of family files."""
    from . import rules
    from .rule_files import is_family_file, resolve

    named = [n for n in names if not is_family_file(n)]
    files = [n for n in names if is_family_file(n)]
    return resolve([*(named or rules.default()), *files])


def _workload_names(names, default) -> list[str]:
    from .errors import RuleFileError
    from .rule_programs import WORKLOADS

    if names is None:
        return list(default)
    if list(names) == ["none"]:
        return []
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise RuleFileError(f"no workload named {', '.join(map(repr, unknown))}\n  instead: name some of "
                            f"{', '.join(WORKLOADS)} (or none)")
    return list(names)


def _check_corpus(corpus, names) -> None:
    """--corpus given for nothing, or naming no folder, is an error now, not once (or
    never) a rule needs the programs: the instance checks before that take minutes."""
    if corpus is None:
        return
    if "corpus" not in names:
        raise EgadError(message(f"--corpus {corpus} is given but the corpus is not among the programs "
                                f"({', '.join(names) or 'none'})", instead="add corpus to the programs, or leave "
                                "--corpus out"))
    if not pathlib.Path(corpus).is_dir():
        raise EgadError(message(f"--corpus {corpus} is not a folder", instead="name the corpus package's folder "
                                "(as tests/programs is)"))


def _cases(names, corpus) -> list:
    """The programs of the workloads `names`; one that is not here (no checkout of the
    repository) is skipped with a warning, unless the user named its corpus (--corpus)."""
    from .rule_programs import DEFAULT_CORPUS, workload_cases

    cases = []
    for name in names:
        try:
            cases.extend(workload_cases(name, corpus or DEFAULT_CORPUS))
        except EgadError as error:
            if corpus is not None and name == "corpus":
                raise
            print(f"warning: workload {name} skipped: {str(error).splitlines()[0]}", file=sys.stderr)
    return cases

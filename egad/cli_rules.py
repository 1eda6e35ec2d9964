"""`egad rules ...`: the rule-authoring commands (issue 7).

    egad rules list               families, rule names, where each is written, and why
"""
from __future__ import annotations

import os


def register(commands) -> None:
    rules = commands.add_parser("rules", help="the rewrite-rule families")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    listing = rules_commands.add_parser("list", help="families, rule names, where each is written, and why")
    listing.set_defaults(run=lambda args: list_rules())


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

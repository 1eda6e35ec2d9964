"""The `egad` command line: `egad demo`, `egad rules list` (more subcommands arrive
with later issues: `rules check`, `rules stats`, `viz`, `bench`)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egad", description="differentiate and compile programs with control flow")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="trace an RNN with a data-dependent while_loop, print its IR, interpret it")
    rules = commands.add_parser("rules", help="the rewrite-rule families")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    rules_commands.add_parser("list", help="families, rule names, where each is written, and why")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from . import demo

        return demo.main()
    if args.command == "rules" and args.rules_command == "list":
        return list_rules()
    parser.error(f"unknown command {args.command}")
    return 2


def list_rules() -> int:
    """Print every default family, then each of its rules: name, file:line, why."""
    import os

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


if __name__ == "__main__":
    sys.exit(main())

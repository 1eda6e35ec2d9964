"""The `egad` command line: `egad demo` (more subcommands arrive with later layers)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egad", description="differentiate and compile programs with control flow")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="trace an RNN with a data-dependent while_loop, print its IR, interpret it")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from . import demo

        return demo.main()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

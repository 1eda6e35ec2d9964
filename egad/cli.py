"""The `egad` command line. Each subcommand lives in the module that does its work
and registers itself through a `register(commands)` function, so adding a command
is one line in `_COMMAND_MODULES`:

    egad demo                     the main job (egad/demo.py)
    egad rules list               every default family and rule: file:line, why
    egad rules check [FAMILY|FILE.py ...]   is each rule sound? (egad/cli_rules.py, docs/rules.md)
    egad rules stats [WORKLOAD ...]         per rule: matches, e-nodes added, time, extracted
    egad bench [workload ...]     egad against JAX and PyTorch (egad/cli_bench.py)
    egad viz                      the extraction visualiser: one HTML page (egad/cli_viz.py)
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import EgadError

# Modules with `register(commands) -> None`; each adds subparsers whose
# `set_defaults(run=...)` is called with the parsed arguments and returns the exit code.
_COMMAND_MODULES = ("egad.demo", "egad.cli_rules", "egad.cli_viz", "egad.cli_bench")


def positive_int(text: str, unit: str = "") -> int:
    """An argparse type: an int of at least 1 (`unit` names what it counts, for the error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number" + (f" of {unit}" if unit else ""))
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egad", description="differentiate and compile programs with control flow")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except EgadError as error:  # the user's input: say what and where, not a traceback into egad
        text = str(error)
        # ("egad.viz.render could not ..." names its command already)
        print(text if text.startswith(("egad ", "egad.")) else f"egad {args.command}: {text}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `egad rules list | head -1`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python flushes stdout at exit)
        return 141  # as a shell reports a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())

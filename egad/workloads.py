"""The benchmark workloads (`benchmarks/` in the repository), for the commands that
run them: `egad demo`, `egad viz`, `egad bench`.

`benchmarks/` is not part of the installed package: it sits beside `egad/` in a
checkout (an editable install, as `make setup` makes). `load_benchmark` imports a
module from it whether or not the repository root is on `sys.path`, and says what
to do when there is no checkout.

    gnmt = load_benchmark("gnmt_lite")
    params = gnmt.init_params("tiny")
"""
from __future__ import annotations

import importlib
import pathlib
import sys

from .errors import UnsupportedError, message

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent


def load_benchmark(name: str):
    """The module `benchmarks.<name>` of egad's repository."""
    if not (REPOSITORY / "benchmarks" / f"{name}.py").is_file():
        raise UnsupportedError(message(
            f"no benchmark workload named {name!r}",
            where=f"{REPOSITORY / 'benchmarks'}",
            instead="run this from a checkout of the egad repository (git clone, then `make setup`), where "
                    "benchmarks/ sits beside egad/; workloads: "
                    + ", ".join(sorted(p.stem for p in (REPOSITORY / "benchmarks").glob("*.py")
                                       if not p.stem.startswith("_")) or ["none found"])))
    if str(REPOSITORY) not in sys.path:
        sys.path.insert(0, str(REPOSITORY))
    return importlib.import_module(f"benchmarks.{name}")

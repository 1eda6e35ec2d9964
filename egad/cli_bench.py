"""`egad bench [workload[:case,...] ...]`: the side-by-side suite of issue 6 — egad
against JAX (`lax.scan`, Python-unrolled) and PyTorch (eager, `torch.compile`) on the
workloads of `benchmarks/`, with a line per configuration as it finishes, and
benchmarks/results/suite.json, benchmarks/RESULTS.md, the plots and README's
Performance section written at the end (the same as `python -m benchmarks.suite`).

The benchmarks are part of the source repository, not of the installed package: the
command finds `benchmarks/suite.py` in the current directory or beside an editable
install, and says so when it finds neither.

    egad bench lstm_lm:T16,T64 gnmt_lite:tiny --systems egad jax-scan --cap 120
"""
from __future__ import annotations

import importlib
import pathlib
import sys

SYSTEMS = ("egad", "jax-scan", "jax-unrolled", "torch-eager", "torch-compile")  # benchmarks/suite_systems.py


def add_arguments(parser) -> None:
    """The suite's options, shared by `egad bench` and `python -m benchmarks.suite`."""
    parser.add_argument("workloads", nargs="*", metavar="workload[:case,...]",
                        help="workloads (lstm_lm, gnmt_lite, while_loops, moe_loop, nested), each optionally with "
                             "its cases after a colon; all by default")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), metavar="SYSTEM",
                        help=f"the systems to run: {', '.join(SYSTEMS)} (default all)")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds per configuration before it is "
                                                                 "stopped and recorded as '> cap' (default 300)")
    parser.add_argument("--min-runs", type=int, default=5, help="timed calls at least, after a warm-up (default 5)")
    parser.add_argument("--threads", type=int, default=1,
                        help="thread pool size of every system (default 1; 0: each library's own default)")
    parser.add_argument("--results", type=pathlib.Path, default=None,
                        help="where suite.json and the plots go (default benchmarks/results)")
    parser.add_argument("--markdown", type=pathlib.Path, default=None,
                        help="the results page (default benchmarks/RESULTS.md)")
    parser.add_argument("--no-readme", action="store_true", help="leave README.md's Performance section alone")
    parser.add_argument("--fresh", action="store_true", help="forget the rows of earlier runs in suite.json")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: write RESULTS.md, the plots and README's section from suite.json")


def register(commands) -> None:
    bench = commands.add_parser("bench", help="egad against JAX and PyTorch on the benchmark workloads "
                                              "(run from the repository root)")
    add_arguments(bench)
    bench.set_defaults(run=run)


def find_suite():
    """benchmarks.suite of the source checkout (the current directory, or the one
    egad is installed from in editable mode); None when there is none."""
    import egad

    for root in (pathlib.Path.cwd(), pathlib.Path(egad.__file__).resolve().parent.parent):
        if (root / "benchmarks" / "suite.py").is_file():
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            return importlib.import_module("benchmarks.suite")
    return None


def run(args) -> int:
    suite = find_suite()
    if suite is None:
        print("egad bench: no benchmarks/suite.py here. The benchmarks live in egad's source repository, not in "
              "the installed package: run `egad bench` (or `python -m benchmarks.suite`) from the root of a "
              "checkout, with the peers installed (pip install -e '.[plots,peers]').", file=sys.stderr)
        return 2
    return suite.run_command(args, program="egad bench")

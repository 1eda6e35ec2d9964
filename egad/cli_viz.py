"""`egad viz`: the extraction visualiser's page for a workload or a user's script.

    egad viz -o gnmt.html                         # GNMT-lite `tiny`'s gradient (needs a checkout: benchmarks/)
    egad viz --workload gnmt-lite-small -o s.html # a bigger GNMT-lite
    egad viz my_model.py:optimized -o mine.html   # optimized() returns egad.optimize(...)'s result, called once

A workload's gradient is optimized with the default rule families (and checked on its
example inputs) without building it with TVM; the page is egad.viz.render's.
"""
from __future__ import annotations

import os
import runpy

from .errors import EgadError, message

WORKLOADS = ("gnmt-lite-tiny", "gnmt-lite-small")


def register(commands) -> None:
    viz = commands.add_parser("viz", help="the extraction visualiser: one self-contained HTML page",
                              description="Optimize a workload's gradient (or take a script's egad.optimize "
                                          "result) and write the e-graph, the extracted term and the critical "
                                          "path as one self-contained HTML page.")
    viz.add_argument("script", nargs="?", default=None,
                     help="path/to/script.py:function, a function of no arguments returning what egad.optimize "
                          "returned (called at least once) or an egad.optimizer.Optimization")
    viz.add_argument("--workload", choices=WORKLOADS, default=None,
                     help="a built-in workload (default gnmt-lite-tiny; the GNMT-lite ones need egad's "
                          "repository checkout, whose benchmarks/ holds them)")
    viz.add_argument("-o", "--output", default="egad-viz.html", help="the HTML file to write (default egad-viz.html)")
    viz.set_defaults(run=run)


def run(args) -> int:
    from . import viz

    if args.script is not None and args.workload is not None:
        raise EgadError(message("egad viz: give a script or --workload, not both"))
    target = script_result(args.script) if args.script else workload(args.workload or "gnmt-lite-tiny")
    path = viz.render(target, args.output)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser")
    return 0


def workload(name: str):
    """The Optimization of a built-in workload's gradient (not built: only the e-graph matters here)."""
    import egad
    from .optimizer import optimize_program

    if name.startswith("gnmt-lite-"):
        program, args = _gnmt_lite(name[len("gnmt-lite-"):])
    else:
        raise EgadError(message(f"egad viz: no workload {name!r}", instead=f"one of {', '.join(WORKLOADS)}"))
    gradient = egad.value_and_grad(program, wrt=(0,))
    return optimize_program(gradient, egad.rules.default(), check_args=args)


def _gnmt_lite(config: str):
    import egad
    from .workloads import load_benchmark

    gnmt_lite = load_benchmark("gnmt_lite")  # says what to do when there is no checkout
    params = gnmt_lite.init_params(config, seed=0)
    src, tgt = gnmt_lite.make_batch(config, seed=0)
    return egad.trace(gnmt_lite.loss, params, src, tgt), (params, src, tgt)


def script_result(spec: str):
    """What `path.py:function` returns: the function is called with no arguments."""
    path, _, function = spec.rpartition(":")
    if not path or not function:
        raise EgadError(message(f"egad viz: {spec!r} is not path/to/script.py:function",
                                instead="egad viz my_model.py:optimized (a function of no arguments)"))
    if not os.path.isfile(path):
        raise EgadError(message(f"egad viz: no file {path!r}", where=f"current directory {os.getcwd()}"))
    namespace = runpy.run_path(path, run_name="egad_viz_script")
    if not callable(namespace.get(function)):
        raise EgadError(message(f"egad viz: {path} defines no function {function!r}",
                                instead="name a function of no arguments that returns egad.optimize's result "
                                        "after one call"))
    return namespace[function]()

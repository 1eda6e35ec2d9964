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
import sys

from .errors import EgadError, message
from .source import UNKNOWN, SourceLoc, raised_at

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
    viz.add_argument("--specialization", type=int, default=None, metavar="K",
                     help="which of the script's specializations (its calls' shape signatures) to draw (default 0)")
    viz.set_defaults(run=run)


def run(args) -> int:
    from . import viz

    if args.script is not None and args.workload is not None:
        raise EgadError(message("egad viz: give a script or --workload, not both"))
    _check_writable(args.output)  # before the optimization, which can take a while
    if args.specialization is not None and args.script is None:
        raise EgadError(message("egad viz: --specialization picks one of a script's results; a workload has one",
                                instead="leave --specialization out, or give a script"))
    target = script_result(args.script) if args.script else workload(args.workload or "gnmt-lite-tiny")
    replaced = os.path.isfile(args.output)
    path = viz.render(target, args.output, specialization=args.specialization or 0)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB{', replacing the file there' if replaced else ''}); "
          "open it in a browser")
    count = len(getattr(target, "optimizations", ()))
    if count > 1 and args.specialization is None:
        print(f"{target.traced.name} has {count} specializations (one per shape signature it was called with); "
              "this page draws the first: pass --specialization K for another")
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
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as `python path` runs it: its modules beside it
    try:
        namespace = _users_code(f"running {path}", lambda: runpy.run_path(path, run_name="egad_viz_script"))
    finally:
        sys.path.pop(0)
    if not callable(namespace.get(function)):
        raise EgadError(message(f"egad viz: {path} defines no function {function!r}",
                                instead="name a function of no arguments that returns egad.optimize's result "
                                        "after one call"))
    return _users_code(f"calling {path}:{function}()", namespace[function])


def _users_code(what: str, run):
    """run(): an error in the user's script is reported as theirs, with its line."""
    try:
        return run()
    except EgadError:
        raise
    except SystemExit as stop:
        raise EgadError(message(f"egad viz: {what} exited (sys.exit({stop.code!r}))",
                                instead="guard the script's main work with `if __name__ == \"__main__\":`")) from None
    except Exception as error:  # noqa: BLE001 - the user's code: any error is theirs to see
        where = raised_at(error)
        if isinstance(error, SyntaxError):
            where = SourceLoc(error.filename or "?", error.lineno or 0)
        instead = ("fix the script's syntax at that line" if isinstance(error, SyntaxError) else
                   "name a function of no arguments that returns egad.optimize's result after one call")
        raise EgadError(message(f"egad viz: {what} raised {type(error).__name__}: {error}",
                                where=None if where is UNKNOWN else where.long(), instead=instead)) from error


def _check_writable(output: str) -> None:
    folder = os.path.dirname(os.path.abspath(output)) if output else ""
    if not output or os.path.isdir(output) or not os.path.isdir(folder):
        raise EgadError(message(f"egad viz: cannot write the page to {output!r}",
                                instead="give -o a file path in an existing folder, e.g. -o egad-viz.html"))

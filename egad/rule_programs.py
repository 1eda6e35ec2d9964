"""The programs `egad rules check` and `egad rules stats` run rules on: the benchmark
workloads and a corpus of small control-flow programs.

A `ProgramCase` is a traced program and a way to make its arguments from a seed.
The workloads, by name:

    lstm        benchmarks/lstm_lm.py (gate by gate, T=6, B=4, I=8, H=8), loss and gradients
    gnmt-tiny   benchmarks/gnmt_lite.py, config `tiny`, one training step's loss and gradients
    corpus      every program of a corpus package, as written and its gradient
    branches    small programs with branches a rule can resolve: constant predicates and
                indices (in and out of range), results that every branch computes alike, at
                the top and inside a loop, and their gradients. Real programs get them only
                after other rewrites (unrolling, folding), so the corpus has none.

`benchmarks/` and the corpus (`tests/programs`) sit in a checkout of egad's repository,
beside `egad/`, and are not installed with the package; the library never imports
them by name. A corpus is any package whose `all_programs()` returns objects with
`name`, `fn`, `make_args(rng)`, `static_argnums` and `differentiable_argnums` (the
interface of tests/programs/__init__.py); `corpus_cases(path)` loads one from its
directory, and `DEFAULT_CORPUS` is the repository's.

    cases = workload_cases("lstm")                 # [lstm, lstm (gradient)]
    cases = corpus_cases(DEFAULT_CORPUS)
    case.program, case.make_args(seed=1)
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

import numpy as np

from .errors import UnsupportedError, message
from .ir.program import Program
from .source import raised_at, run_user_module
from .workloads import REPOSITORY, load_benchmark

DEFAULT_CORPUS = REPOSITORY / "tests" / "programs"
WORKLOADS = ("lstm", "gnmt-tiny", "corpus", "branches")


@dataclasses.dataclass(frozen=True)
class ProgramCase:
    name: str
    program: Program
    make_args: Callable[[int], tuple]  # seed -> the program's positional arguments
    kind: str = "forward"  # "forward": as written; "gradient": value_and_grad of a scalar loss


def workload_cases(name: str, corpus=DEFAULT_CORPUS) -> list[ProgramCase]:
    """The programs of workload `name` (one of WORKLOADS)."""
    if name == "lstm":
        return _lstm_cases()
    if name == "gnmt-tiny":
        return _gnmt_cases()
    if name == "corpus":
        return corpus_cases(corpus)
    if name == "branches":
        return branch_cases()
    raise UnsupportedError(message(f"no workload named {name!r}", instead=f"name one of {', '.join(WORKLOADS)}"))


def optimized_cases(cases: list[ProgramCase]) -> list[ProgramCase]:
    """What `egad.optimize` would run the e-graph on: the gradient of each program that
    has one, else the program as written."""
    with_gradient = {c.name.removesuffix(" (gradient)") for c in cases if c.kind == "gradient"}
    return [c for c in cases if c.kind == "gradient" or c.name not in with_gradient]


# --- the benchmark workloads -----------------------------------------------------------------

LSTM_SIZES = dict(T=6, batch=4, inputs=8, hidden=8)


def _lstm_cases() -> list[ProgramCase]:
    import egad

    lstm_lm = load_benchmark("lstm_lm")

    def make_args(seed: int) -> tuple:
        return tuple(lstm_lm.arguments(seed=seed, **LSTM_SIZES))

    program = egad.trace(lstm_lm.loss, *make_args(0))
    gradient = egad.value_and_grad(program, wrt=lstm_lm.WRT)
    return [ProgramCase("lstm", program, make_args), ProgramCase("lstm (gradient)", gradient, make_args, "gradient")]


def _gnmt_cases() -> list[ProgramCase]:
    import egad

    gnmt_lite = load_benchmark("gnmt_lite")

    def make_args(seed: int) -> tuple:
        return (gnmt_lite.init_params("tiny", seed=seed), *gnmt_lite.make_batch("tiny", seed=seed))

    program = egad.trace(gnmt_lite.loss, *make_args(0))
    gradient = egad.value_and_grad(program, wrt=(0,))
    return [ProgramCase("gnmt-tiny", program, make_args),
            ProgramCase("gnmt-tiny (gradient)", gradient, make_args, "gradient")]


# --- branches a rule can resolve -------------------------------------------------------------

def branch_cases() -> list[ProgramCase]:
    """The `branches` workload (see the module docstring), each with its gradient."""
    import egad
    import egad.numpy as enp
    from .frontend.primitives import constant

    def constant_selectors(x):
        a = egad.cond(constant(True, "bool"), lambda x: enp.sin(x), lambda x: enp.cos(x), x)
        b = egad.cond(constant(False, "bool"), lambda x: x * 2.0, lambda x: x + 1.0, x)
        total = a + b
        for index in (-1, 0, 1, 2, 5):  # switch clamps the index
            total = total + egad.switch(constant(index, "int64"), [lambda x: x * 2.0, lambda x: x + 1.0,
                                                                  lambda x: enp.tanh(x)], x)
        return total

    def agreeing_results(x, i):
        a, b = egad.cond(enp.sum(x) > 0.0, lambda x: (x * 2.0, enp.sin(x)), lambda x: (x * 2.0, enp.cos(x)), x)
        c = egad.switch(i, [lambda x: enp.tanh(x), lambda x: enp.tanh(x)], x)
        d = egad.switch(i, [lambda x: x + 1.0, lambda x: x + 1.0, lambda x: x + 1.0], x)
        e = egad.switch(i, [lambda x: x + 1.0, lambda x: x * 3.0, lambda x: x + 1.0], x)
        return a + b + c + d + e

    def in_a_loop(x, i):
        def body(t, h):
            h = egad.cond(constant(True, "bool"), lambda h: enp.sin(h), lambda h: enp.cos(h), h)
            h = egad.switch(constant(1, "int64"), [lambda h: h * 2.0, lambda h: h + 1.0], h)
            return egad.cond(enp.sum(h) > 0.0, lambda h: enp.tanh(h), lambda h: enp.tanh(h), h)

        return egad.fori_loop(0, 3, body, x) + agreeing_results(x, i)

    def make_args(seed: int) -> tuple:
        rng = np.random.default_rng(seed)
        return rng.normal(size=3), np.int64(rng.integers(-1, 4))

    cases = []
    for fn in (constant_selectors, agreeing_results, in_a_loop):
        args = make_args(0)
        program = egad.trace(fn, *args[:fn.__code__.co_argcount])

        def args_of(seed: int, count=fn.__code__.co_argcount) -> tuple:
            return make_args(seed)[:count]

        name = fn.__name__.replace("_", "-")
        loss = egad.trace(lambda *a, fn=fn: enp.sum(fn(*a) ** 2), *args[:fn.__code__.co_argcount])
        cases += [ProgramCase(name, program, args_of),
                  ProgramCase(f"{name} (gradient)", egad.value_and_grad(loss, wrt=(0,)), args_of, "gradient")]
    return cases


# --- a corpus --------------------------------------------------------------------------------

_LOADED: dict[pathlib.Path, object] = {}


def corpus_cases(path=DEFAULT_CORPUS) -> list[ProgramCase]:
    """Every program of the corpus package at `path`, as written and (where it has
    differentiable arguments) the value and gradient of the sum of squares of its
    float outputs."""
    import egad

    cases = []
    for entry in _load_corpus(pathlib.Path(path)).all_programs():
        def make_args(seed: int, entry=entry) -> tuple:
            return tuple(entry.make_args(np.random.default_rng(seed)))

        args = make_args(0)
        program = egad.trace(entry.fn, *args, static_argnums=entry.static_argnums)
        cases.append(ProgramCase(entry.name, program, make_args))
        if entry.differentiable_argnums:
            loss = egad.trace(_sum_of_squares(entry.fn), *args, static_argnums=entry.static_argnums)
            cases.append(ProgramCase(f"{entry.name} (gradient)",
                                     egad.value_and_grad(loss, wrt=tuple(entry.differentiable_argnums)),
                                     make_args, "gradient"))
    return cases


def _sum_of_squares(fn):
    import egad.numpy as enp
    from .pytree import flatten

    def loss(*args):
        leaves = [leaf for leaf in flatten(fn(*args))[0] if np.dtype(leaf.dtype).kind == "f"]
        total = enp.sum(leaves[0] * leaves[0])
        for leaf in leaves[1:]:
            total = total + enp.sum(leaf * leaf).astype(total.dtype)
        return total

    return loss


def _load_corpus(path: pathlib.Path):
    path = path.resolve()
    if path in _LOADED:
        return _LOADED[path]
    init = path / "__init__.py"
    if not init.is_file():
        raise UnsupportedError(message(
            f"{path} is not a corpus package (no __init__.py)",
            instead="pass the directory of a package whose all_programs() lists the programs "
                    f"(egad's is {DEFAULT_CORPUS}, in a checkout of the repository)"))
    try:
        module = run_user_module(f"_egad_corpus_{len(_LOADED)}", init, package_dir=path)
    except Exception as error:  # noqa: BLE001 - the user's package: any error is theirs to see
        raise UnsupportedError(message(f"loading the corpus package {path} failed: {type(error).__name__}: {error}",
                                       where=raised_at(error).long(),
                                       instead="fix the package so that `import` of it works")) from error
    if not callable(getattr(module, "all_programs", None)):
        raise UnsupportedError(message(f"the corpus package {path} has no all_programs() function",
                                       instead="define all_programs() returning the corpus programs"))
    _LOADED[path] = module
    return module

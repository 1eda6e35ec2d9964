"""The corpus in plain Python control flow through `@egad.function` (issue 8).

`plain_python_programs.PLAIN` holds, for every corpus program, the same computation
written with Python `if`/`while`/`for`/`and`/`or`/`not` (as its reference is) on
`egad.numpy` values. For each one:

- traced and interpreted, it equals the corpus program's plain-numpy reference
  (two seeds);
- called on numpy values outside tracing, it runs the Python function eagerly and
  also equals the reference;
- for programs with `differentiable_argnums`, in float64, `egad.grad` of a scalar
  loss of it equals `egad.grad` of the same loss of the combinator version
  (`program.fn`) to rtol 1e-9.
"""
from __future__ import annotations

import numpy as np
import pytest

import egad
from egad.pytree import flatten
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.programs import all_programs
from tests.trees import assert_trees_close

from .plain_python_programs import ORIGINAL, PLAIN

PROGRAMS = all_programs()
BY_NAME = {p.name: p for p in PROGRAMS}
CONVERTED = [p for p in PROGRAMS if p.name in PLAIN]
DIFFERENTIABLE = [p for p in CONVERTED if p.differentiable_argnums]
SEEDS = (0, 1)
GRAD_RTOL = 1e-9


def test_plain_versions_cover_the_corpus():
    unknown = sorted(set(PLAIN) - set(BY_NAME))
    assert not unknown, f"plain versions of programs not in the corpus: {unknown}"
    assert len(CONVERTED) >= 20
    assert len(CONVERTED) == len(PROGRAMS), f"missing: {sorted(set(BY_NAME) - set(PLAIN))}"


def test_plain_versions_are_egad_functions_that_keep_their_names():
    for name, fn in PLAIN.items():
        assert callable(fn)
        assert fn.__name__ == name, f"egad.function should keep the wrapped function's name ({fn.__name__})"


@pytest.mark.parametrize("program", CONVERTED, ids=[p.name for p in CONVERTED])
def test_traced_plain_python_matches_reference(program):
    plain = PLAIN[program.name]
    for seed in SEEDS:
        args = program.make_args(np.random.default_rng(seed))
        traced = egad.verify(egad.trace(plain, *args, static_argnums=program.static_argnums))
        got = egad.interpret(traced, *args)
        want = program.reference(*args)
        assert_trees_close(got, want, program.rtol, f"{program.name} seed {seed}")


@pytest.mark.parametrize("program", CONVERTED, ids=[p.name for p in CONVERTED])
def test_eager_plain_python_matches_reference(program):
    """Outside tracing `egad.function` runs the Python function itself on numpy."""
    plain = PLAIN[program.name]
    args = program.make_args(np.random.default_rng(SEEDS[0]))
    got = plain(*args)
    for leaf in flatten(got)[0]:
        assert not hasattr(leaf, "type") or isinstance(leaf, np.ndarray), \
            f"{program.name}: an eager call returned a {type(leaf).__name__}, not numpy"
    assert_trees_close(got, program.reference(*args), program.rtol, f"{program.name} eager")


@pytest.mark.parametrize("program", DIFFERENTIABLE, ids=[p.name for p in DIFFERENTIABLE])
def test_gradients_match_the_combinator_version(program):
    wrt = tuple(program.differentiable_argnums)
    for seed in SEEDS:
        args = to_float64(program.make_args(np.random.default_rng(seed)))
        grads = []
        for fn in (program.fn, PLAIN[program.name]):
            loss = scalar_loss(fn, seed)
            primal = egad.trace(loss, *args, static_argnums=program.static_argnums)
            grads.append(egad.interpret(egad.grad(primal, wrt=wrt), *args))
        want, got = grads
        # gradient entries can be exactly zero on one side and ~1e-17 on the other
        scale = max((float(np.max(np.abs(leaf))) for leaf in flatten(want)[0] if np.size(leaf)), default=1.0)
        assert_trees_close(got, want, GRAD_RTOL, f"{program.name} seed {seed} gradients",
                           atol=GRAD_RTOL * max(scale, 1e-300))


@pytest.mark.parametrize("name", ["newton_sqrt", "cond_in_fori", "nest3_ragged"])
def test_trace_convert_option_is_the_same_as_the_decorator(name):
    """`egad.trace(fn, *args, convert=True)` converts an undecorated function too."""
    program = BY_NAME[name]
    original = ORIGINAL[name]
    args = program.make_args(np.random.default_rng(0))
    got = egad.interpret(egad.trace(original, *args, convert=True), *args)
    assert_trees_close(got, program.reference(*args), program.rtol, f"{name} convert=True")


# Control ops each plain version must trace to: traced conditions and bounds become one
# combinator each (never unrolled), static ones leave none. A converter that unrolled
# `for x in xs` or pruned a traced `if` would still compute the right values.
EXPECTED_CONTROL_OPS = {
    "fori_static": {"for": 1},
    "fori_mask_bound": {"for": 1},
    "fori_lo_hi": {"for": 1},
    "negative_index": {},
    "fori_divmod": {},
    "newton_sqrt": {"while": 1},
    "while_zero_trip": {"while": 2},
    "weak_init_f32": {"for": 1},
    "dict_state": {"for": 1},
    "bisection": {"while": 1, "if": 1},
    "cond_in_fori": {"for": 1, "if": 1},
    "switch_mod": {"for": 1, "if": 2},  # if / elif / else: two nested ifs
    "loop_in_branch": {"for": 2, "while": 2, "if": 2},
    "cond_pytree": {"if": 2},
    "collatz": {"while": 1, "if": 1},
    "opcode_interpreter": {"while": 1, "if": 3},
    "fori3_static": {"for": 1},
    "nest3_ragged": {"for": 3},
    "while_in_fori": {"for": 1, "while": 1},
    "loop_cond_loop": {"for": 2, "while": 1, "if": 3},  # `... and k < lengths[t] + 2` reads lengths: a cond
    "while_switch_fori": {"while": 1, "if": 2, "for": 1},
    "causal_loop_attention": {"for": 2},
    "while_rnn": {"while": 1},
    "sgd_epochs": {},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_CONTROL_OPS))
def test_traced_control_flow_is_converted_and_static_control_flow_is_unrolled(name):
    from collections import Counter

    from egad.ir import walk_bindings

    program = BY_NAME[name]
    args = program.make_args(np.random.default_rng(0))
    traced = egad.trace(PLAIN[name], *args, static_argnums=program.static_argnums)
    counts = Counter(b.op for b in walk_bindings(traced.region))
    got = {op: counts[op] for op in ("for", "while", "if", "switch") if counts[op]}
    assert got == EXPECTED_CONTROL_OPS[name], f"{name}: control ops {got}\n{traced}"

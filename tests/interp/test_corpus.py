"""Every corpus program interprets to the same values as its plain-Python reference."""
from __future__ import annotations

import numpy as np
import pytest

import egad
from egad.pytree import flatten
from tests.programs import all_programs

PROGRAMS = all_programs()


def assert_trees_close(got, want, rtol: float, context: str = ""):
    got_leaves, got_tree = flatten(got)
    want_leaves, want_tree = flatten(want)
    assert got_tree == want_tree, f"{context}: structure {got_tree} != {want_tree}"
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{context} leaf {k}: shape {g.shape} != {w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{context} leaf {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"{context} leaf {k}")


def test_corpus_is_large_enough():
    assert len(PROGRAMS) >= 25


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_interpreter_matches_reference(program):
    for seed in range(3):
        args = program.make_args(np.random.default_rng(seed))
        # static arguments may differ per seed, so trace each time
        traced = egad.verify(egad.trace(program.fn, *args, static_argnums=program.static_argnums))
        got = egad.interpret(traced, *args)
        want = program.reference(*args)
        assert_trees_close(got, want, program.rtol, f"{program.name} seed {seed}")

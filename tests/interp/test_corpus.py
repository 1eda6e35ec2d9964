"""Every corpus program interprets to the same values as its plain-Python reference."""
from __future__ import annotations

import numpy as np
import pytest

import egad
from tests.programs import all_programs
from tests.trees import assert_trees_close

PROGRAMS = all_programs()


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

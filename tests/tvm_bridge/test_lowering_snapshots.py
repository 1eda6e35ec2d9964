"""Snapshots of the Relax lowering: the TVMScript of three small programs — a
fori_loop, a cond, and a loop gradient with tapes — against stored files in
tests/tvm_bridge/snapshots/ (Before/Expected style, CONVENTIONS "TVM Relax").

A change in the lowering shows up here as a diff to read. When it is intended,
rewrite the files and review them with `git diff`:

    EGAD_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/tvm_bridge/test_lowering_snapshots.py
"""
from __future__ import annotations

import difflib
import os
import pathlib
import re

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge import lower

SNAPSHOTS = pathlib.Path(__file__).parent / "snapshots"
UPDATE_VARIABLE = "EGAD_UPDATE_SNAPSHOTS"
REGENERATE = f"{UPDATE_VARIABLE}=1 .venv/bin/python -m pytest tests/tvm_bridge/test_lowering_snapshots.py"
X = np.zeros((2, 3), np.float32)


def _halving_loop(x, n):
    return egad.fori_loop(0, n, lambda i, h: h * 0.5 + 1.0, x)


def _branch(x, y):
    return egad.cond(enp.sum(x) > 0, lambda a, b: a * b, lambda a, b: a - b, x, y)


def _rnn(W, xs, h0):
    # the adjoint of tanh(h @ W + xs[t]) reads tanh's result and h: two tapes
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(h @ W + xs[t]), h0))


def fori_loop_program():
    return egad.trace(_halving_loop, X, 1)


def cond_program():
    return egad.trace(_branch, X, X)


def taped_gradient_program():
    program = egad.trace(_rnn, np.zeros((3, 3), np.float32), egad.Spec(("T", 2, 3), "float32"), X)
    return egad.value_and_grad(program, wrt=(0,))


def normalise(script: str) -> str:
    """The script without what may differ between runs: object addresses."""
    return re.sub(r"0x[0-9a-fA-F]+", "0x...", script).rstrip() + "\n"


def check_snapshot(name: str, script: str):
    path = SNAPSHOTS / f"{name}.py.txt"
    actual = normalise(script)
    if os.environ.get(UPDATE_VARIABLE) == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(actual)
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}; write it with:\n    {REGENERATE}")
    expected = path.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile=f"{path.name} (stored)", tofile=f"{name} (lowered now)"))
        pytest.fail(f"the TVMScript of {name} differs from {path}:\n{diff}\n"
                    f"If the change is intended, regenerate the snapshots and review them with git diff:\n"
                    f"    {REGENERATE}", pytrace=False)


@pytest.mark.parametrize("name, make_program", [
    ("fori_loop", fori_loop_program),
    ("cond", cond_program),
    ("taped_gradient", taped_gradient_program),
])
def test_lowering_matches_snapshot(name, make_program):
    check_snapshot(name, lower(make_program()).script())

"""The corpus itself is sound: every reference runs, is finite and deterministic per seed.

This checks the plain-numpy references and argument factories only; comparing
egad against them is the job of the interpreter, AD and compiled test suites.
"""
from __future__ import annotations

import numpy as np
import pytest

# The corpus modules import egad at top level to define the traced functions.
pytest.importorskip("egad.numpy")
pytest.importorskip("egad.nn")

from . import CorpusProgram, all_programs  # noqa: E402

PROGRAMS = all_programs()
SEEDS = (0, 1, 2)
ARG_DTYPES = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)}

# Coverage the corpus promises to every configuration that runs it.
REQUIRED_TAGS = {
    "fori", "static-bounds", "traced-bounds", "while", "data-dependent-trips", "zero-trip",
    "scan", "ys", "reverse", "pytree-xs", "no-xs", "zero-length",
    "cond", "switch", "switch-clamp", "cond-in-loop", "switch-in-loop", "loop-in-branch",
    "nest3", "mixed", "ragged", "ragged-data", "ragged-outer-counter", "ragged-state",
    "token-gather", "attention", "int-counter", "rnn", "lstm", "while-rnn", "newton", "euler",
    "pytree-state", "dict", "nested-tuple-list", "closure", "stop-gradient",
    "float32", "weak-type", "static-argnums", "floordiv-mod",
    "reduction", "argmax", "top_k", "one_hot", "einsum", "concatenate", "stack", "where", "clip",
}


def _leaves(tree, path="out"):
    """(path, leaf) pairs of a pytree of tuples/lists/dicts, dicts in sorted key order."""
    if isinstance(tree, (tuple, list)):
        return [pair for i, child in enumerate(tree) for pair in _leaves(child, f"{path}[{i}]")]
    if isinstance(tree, dict):
        return [pair for key in sorted(tree) for pair in _leaves(tree[key], f"{path}[{key!r}]")]
    return [(path, tree)]


def _copy(tree):
    if isinstance(tree, (tuple, list)):
        return type(tree)(_copy(child) for child in tree)
    if isinstance(tree, dict):
        return {key: _copy(value) for key, value in tree.items()}
    return np.array(tree, copy=True) if isinstance(tree, np.ndarray) else tree


def test_corpus_size_and_names():
    assert len(PROGRAMS) >= 25
    assert all(isinstance(p, CorpusProgram) for p in PROGRAMS)
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS)


def test_corpus_covers_required_tags():
    covered = {tag for p in PROGRAMS for tag in p.tags}
    assert REQUIRED_TAGS <= covered, f"missing coverage: {sorted(REQUIRED_TAGS - covered)}"


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_metadata(program):
    assert program.fn.__doc__, f"{program.name}: fn needs a one-line docstring"
    args = program.make_args(np.random.default_rng(0))
    assert isinstance(args, tuple)
    for index in program.static_argnums + program.differentiable_argnums:
        assert 0 <= index < len(args)
    assert not set(program.static_argnums) & set(program.differentiable_argnums)
    for index in program.differentiable_argnums:
        for path, leaf in _leaves(args[index], f"arg{index}"):
            assert np.asarray(leaf).dtype.kind == "f", f"{program.name}: {path} is not float"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_reference_runs_finite(program, seed):
    args = program.make_args(np.random.default_rng(seed))
    again = program.make_args(np.random.default_rng(seed))
    for i, arg in enumerate(args):
        if i in program.static_argnums:
            assert arg == again[i]
            continue
        for (path, leaf), (_, same) in zip(_leaves(arg, f"arg{i}"), _leaves(again[i], f"arg{i}")):
            if not isinstance(leaf, (bool, int, float)):
                assert isinstance(leaf, (np.ndarray, np.generic)), f"{path}: {type(leaf)}"
                assert leaf.dtype in ARG_DTYPES, f"{path}: dtype {leaf.dtype}"
            np.testing.assert_array_equal(leaf, same, err_msg=f"{program.name}: make_args not deterministic")

    before = _copy(args)
    out = program.reference(*args)
    for (path, leaf), (_, original) in zip(_leaves(args, "args"), _leaves(before, "args")):
        np.testing.assert_array_equal(leaf, original, err_msg=f"{program.name}: reference mutated {path}")

    leaves = _leaves(out)
    assert any(np.asarray(leaf).dtype.kind == "f" for _, leaf in leaves), "no float output to form a loss"
    for path, leaf in leaves:
        value = np.asarray(leaf)
        assert value.dtype.kind in "fi", f"{program.name}: {path} has dtype {value.dtype}"
        assert np.all(np.isfinite(value)), f"{program.name}: {path} is not finite"


@pytest.mark.parametrize("program", [p for p in PROGRAMS if "float32" in p.tags], ids=lambda p: p.name)
def test_float32_references_stay_float32(program):
    out = program.reference(*program.make_args(np.random.default_rng(0)))
    for path, leaf in _leaves(out):
        value = np.asarray(leaf)
        if value.dtype.kind == "f":
            assert value.dtype == np.float32, f"{program.name}: {path} promoted to {value.dtype}"

"""Compiled code raises IndexOutOfRangeError on an index out of range exactly where the
interpreter does (tvm_bridge/index_checks.py), and reads proved indices without a
check (egad/ir/index_ranges.py)."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge.build import build
from egad.tvm_bridge.cache import BuildCache

EMBED = np.arange(15.0).reshape(5, 3)


def _both_raise(program, *args, index: int):
    """The interpreter and the compiled program raise the same error, naming the line."""
    with pytest.raises(egad.IndexOutOfRangeError) as interpreted:
        egad.interpret(program, *args)
    with pytest.raises(egad.IndexOutOfRangeError) as compiled:
        build(program)(*args)
    for error in (interpreted.value, compiled.value):
        assert f"index {index} is out of range for an axis of size" in str(error)
        assert "test_index_checks.py" in str(error)
    return compiled.value


def _agree(program, *args):
    np.testing.assert_allclose(build(program)(*args), egad.interpret(program, *args))


def lookup(E, ids):
    return enp.sum(E[ids] ** 2)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_token_ids_out_of_range_raise(dtype):
    ids = np.array([[0, 4], [-5, 2]], dtype)
    program = egad.trace(lookup, EMBED, ids)
    _agree(program, EMBED, ids)
    _both_raise(program, EMBED, np.array([[0, 5], [1, 2]], dtype), index=5)
    _both_raise(program, EMBED, np.array([[0, 1], [-6, 2]], dtype), index=-6)


def test_the_gradient_raises_rather_than_answer_with_a_clamped_row():
    ids = np.array([1, 3])
    gradient = egad.value_and_grad(egad.trace(lookup, EMBED, ids), wrt=(0,))
    value, (grad,) = build(gradient)(EMBED, ids)
    assert grad[1].sum() > 0 and grad[0].sum() == 0
    _both_raise(gradient, EMBED, np.array([1, 7]), index=7)


def embed_loop(E, tokens, n):
    return egad.fori_loop(0, n, lambda i, acc: acc + E[tokens[i]], enp.zeros(3))


def test_a_loop_checks_each_row_it_reads_and_only_those():
    tokens = np.array([0, 2, 9, 1])  # 9 is out of range, read at step 2
    program = egad.trace(embed_loop, EMBED, tokens, 2)
    _agree(program, EMBED, tokens, 2)  # steps 0 and 1 never read the 9
    _agree(program, EMBED, tokens, 0)  # no step at all
    _both_raise(program, EMBED, tokens, 3, index=9)


def walk(x, n):  # a counter carried by hand: loop state, checked at each read
    return enp.sum(egad.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 2, s[1] + x[s[0]]), (0, enp.zeros(3)))[1])


def test_a_while_loop_checks_its_state_as_an_index():
    program = egad.trace(walk, EMBED, 3)
    _agree(program, EMBED, 6)  # reads rows 0, 2, 4
    _both_raise(program, EMBED, 7, index=6)
    optimized = egad.optimize(program, wrt=(0,))
    with pytest.raises(egad.IndexOutOfRangeError, match="index 6 is out of range"):
        optimized(EMBED, 7)


@pytest.mark.parametrize("shape", [(0,), (0, 2)])
def test_no_indices_read_no_rows(shape):
    _agree(egad.trace(lookup, EMBED, np.zeros(shape, np.int64)), EMBED, np.zeros(shape, np.int64))


def embed_scan(E, W, tokens):
    return enp.sum(egad.scan(lambda h, tok: (enp.tanh(E[tok] + h @ W), h), enp.zeros((2, 3)), tokens)[1])


@pytest.mark.parametrize("steps", [4, 40])  # short loops are unrolled by `optimize`
def test_token_rows_read_by_a_scan_are_checked_once_before_it(steps):
    W, tokens = np.eye(3) * 0.5, np.arange(2 * steps).reshape(steps, 2) % 5
    program = egad.trace(embed_scan, EMBED, W, tokens)
    compiled = build(program)
    assert "check_index" not in compiled.relax_text and compiled.relax_text.count("egad.check_indices") == 1
    _agree(program, EMBED, W, tokens)
    bad = tokens.copy()
    bad[steps // 2, 1] = 5
    _both_raise(program, EMBED, W, bad, index=5)
    optimized = egad.optimize(program, wrt=(0, 1))
    with pytest.raises(egad.IndexOutOfRangeError, match=r"index 5 is out of range(.|\n)*test_index_checks.py"):
        optimized(EMBED, W, bad)
    np.testing.assert_allclose(optimized(EMBED, W, tokens)[0], egad.interpret(program, EMBED, W, tokens))
    assert optimized.builds == 1  # a first call that raised still optimized and built once for good
    (summary,) = [line for line in optimized.report().splitlines() if "index reads in compiled code" in line]
    # where the token reads are checked follows the extraction: once before a loop that reads
    # their rows at its counter, where they run once the loop is unrolled (4 steps: written out;
    # 40: the extraction may unroll by k, the rows then sliced from blocks)
    (optimization,) = optimized.optimizations
    unrolled = {"unroll-short-loop", "unroll-by-k"} & set(optimization.chosen)
    assert unrolled or steps == 40
    assert ("checked where they run" if unrolled else "checked once before their loop") in summary


def test_a_branch_not_taken_does_not_check():
    program = egad.trace(lambda E, p, i: egad.cond(p, lambda: E[i], lambda: E[0]), EMBED, True, 1)
    _agree(program, EMBED, False, 11)
    _both_raise(program, EMBED, True, 11, index=11)


def test_row_updates_and_scatters_raise():
    update = egad.trace(lambda x, i: x.at[i].set(enp.ones(3)), EMBED, 1)
    _agree(update, EMBED, -1)
    _both_raise(update, EMBED, 5, index=5)
    scatter = egad.trace(lambda x, i: x.at[i].add(enp.ones(3)), EMBED, 1)
    _both_raise(scatter, EMBED, -7, index=-7)


def test_a_symbolic_axis_is_checked_against_its_size_at_run_time():
    program = egad.trace(lookup, egad.Spec(("V", 3), "float64"), np.array([0, 1]))
    _agree(program, EMBED, np.array([4, -5]))
    _both_raise(program, EMBED, np.array([0, 5]), index=5)
    _both_raise(program, EMBED[:2], np.array([0, 2]), index=2)


def test_proved_indices_are_read_without_a_check():
    xs = np.ones((6, 2, 3))
    scan = egad.value_and_grad(egad.trace(
        lambda W, xs: enp.sum(egad.scan(lambda h, x: (enp.tanh(h @ W + x), h), enp.zeros((2, 3)), xs)[1]),
        np.eye(3), xs), wrt=(0,))
    text = build(scan).relax_text
    assert "check_index" not in text and "R.where" not in text
    assert "check_index" in build(egad.trace(lookup, EMBED, np.array([0]))).relax_text


def test_the_host_check_for_device_targets_raises_too(monkeypatch):
    """GPUs check indices with a host call (their kernels cannot call back); run on
    the CPU here, so this machine tests what a GPU build does."""
    build_module = importlib.import_module("egad.tvm_bridge.build")  # the package exports a `build` function
    lower = build_module.lower
    monkeypatch.setattr(build_module, "lower", lambda program, checks_in_kernels: lower(program, False))
    program = egad.trace(embed_loop, EMBED, np.array([0, 2, 9, 1]), 2)
    compiled = build(program, cache=BuildCache(None))
    assert "egad.check_indices" in compiled.relax_text
    np.testing.assert_allclose(compiled(EMBED, np.array([0, 2, 9, 1]), 2), EMBED[0] + EMBED[2])
    with pytest.raises(egad.IndexOutOfRangeError, match=re.escape("index 9 is out of range")):
        compiled(EMBED, np.array([0, 2, 9, 1]), 3)

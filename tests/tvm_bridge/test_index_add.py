"""Compiled index_add (tvm_bridge/index.py): into a few target rows, a selected sum
per row; into many, a scatter. Both agree with the interpreter, NaN and inf included."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.optimizer import optimize_program
from egad.tvm_bridge import build, index
from egad.tvm_bridge.cache import BuildCache

RNG = np.random.default_rng(0)


def add_rows(x, rows, values):
    return x.at[rows].add(values)


@pytest.mark.parametrize("targets", [4, index.FEW_TARGET_ROWS + 1], ids=["selected-sum", "scatter"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_index_add_matches_the_interpreter(targets, dtype):
    x = RNG.standard_normal((targets, 3, 5)).astype(dtype)
    rows = RNG.integers(-targets, targets, size=(7, 2))  # negative rows wrap, as in numpy
    values = RNG.standard_normal((7, 2, 3, 5)).astype(dtype)
    values[1, 0, 2, 3], values[4, 1, 0, 0] = np.nan, np.inf  # only their own target rows turn non-finite
    program = egad.trace(add_rows, x, rows, values)
    got = build(program, cache=BuildCache(None))(x, rows, values)
    want = egad.interpret(program, x, rows, values)
    scale = np.max(np.abs(want[np.isfinite(want)]))  # sums in another order: rounding, relative to the largest
    np.testing.assert_allclose(got, want, rtol=0, atol=scale * (1e-6 if dtype == "float32" else 1e-14))
    assert np.isnan(got).sum() == np.isnan(want).sum() >= 1


def test_a_scatter_builds_without_warnings_from_the_cpu_code_generator(capfd):
    """TVM's scatter wraps its loops in a `pragma_scope` no CPU code generator knows; LLVM
    printed a warning for it at every build (tvm_bridge/fusion.py `_cpu_scatter`)."""
    targets = index.FEW_TARGET_ROWS + 1
    x, rows = np.zeros((targets, 4), np.float32), np.array([3, -1, 3, 0])
    values = RNG.standard_normal((4, 4)).astype(np.float32)
    program = egad.trace(add_rows, x, rows, values)
    capfd.readouterr()
    compiled = build(program, cache=BuildCache(None))
    got = compiled(x, rows, values)
    assert "scatter_elements" in compiled.relax_text
    assert "pragma" not in capfd.readouterr().err
    expected = x.copy()
    np.add.at(expected, rows, values)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_index_add_over_a_symbolic_row_count_builds_once():
    program = egad.trace(add_rows, egad.Spec((4, 8), "float32"), egad.Spec(("N",), "int64"),
                         egad.Spec(("N", 8), "float32"))
    compiled = build(program, cache=BuildCache(None))
    assert "index_sum" in compiled.relax_text
    for count in (1, 13):
        rows, values = RNG.integers(0, 4, size=count), RNG.standard_normal((count, 8)).astype(np.float32)
        x = np.zeros((4, 8), np.float32)
        expected = x.copy()
        np.add.at(expected, rows, values)
        np.testing.assert_allclose(compiled(x, rows, values), expected, rtol=1e-6, atol=1e-6)


def slice_loss(x):
    return (egad.numpy.sum(x[:, 2:7] * x[:, 2:7]) + egad.numpy.sum(x[::-1, 1:9:3] * 3.0)
            + egad.numpy.sum(x[-3:, -1]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_gradient_of_slices_adds_into_rows_elementwise_not_by_a_scatter(dtype):
    x = RNG.standard_normal((6, 10)).astype(dtype)
    x[0, 0] = -0.0  # outside every slice: its gradient stays exactly what the interpreter says
    program = egad.value_and_grad(egad.trace(slice_loss, x))
    compiled = build(program, cache=BuildCache(None))
    assert "scatter_elements" not in compiled.relax_text
    (value, (grad,)), (want_value, (want_grad,)) = compiled(x), egad.interpret(program, x)
    rtol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(value, want_value, rtol=rtol)
    np.testing.assert_allclose(grad, want_grad, rtol=rtol)


@pytest.mark.parametrize("rows, elementwise", [([1, 2, 3], True), ([-1, -3, -5], True), ([4], True), ([0, 2, 1], False)],
                         ids=["run", "negative-step", "one", "not-a-progression"])
def test_index_add_at_constant_rows_matches_the_interpreter(rows, elementwise):
    x = RNG.standard_normal((7, 3)).astype("float32")
    values = RNG.standard_normal((len(rows), 3)).astype("float32")
    values[0, 0] = np.nan  # only its own target row turns NaN
    constant_rows = np.array(rows)
    program = egad.trace(lambda x, values: x.at[constant_rows].add(values), x, values)
    compiled = build(program, cache=BuildCache(None))
    assert ("add_into_rows" in compiled.relax_text) == elementwise
    np.testing.assert_allclose(compiled(x, values), egad.interpret(program, x, values), rtol=1e-6)


ROWS = np.array([1, 2, 3])


def add_rows_four_times(x, v):
    return egad.fori_loop(0, 4, lambda i, acc: acc.at[ROWS].add(v * 2.0), x)


def test_a_constant_index_hoisted_out_of_the_loop_still_adds_elementwise():
    x, v = RNG.standard_normal((6, 3)).astype("float32"), RNG.standard_normal((3, 3)).astype("float32")
    program = optimize_program(egad.trace(add_rows_four_times, x, v), ["loop_invariant"]).program
    (loop,) = [b for b in program.region.bindings if b.op == "for"]
    assert any(b.op == "const" and b.outputs[0] in loop.inputs for b in program.region.bindings)  # hoisted
    compiled = build(program, cache=BuildCache(None))
    assert "add_into_rows" in compiled.relax_text and "scatter_elements" not in compiled.relax_text
    np.testing.assert_allclose(compiled(x, v), egad.interpret(program, x, v), rtol=1e-6)


def read_cell_by_cell(xs, w):
    def row(t, total):
        return egad.fori_loop(0, xs.shape[1], lambda j, acc: acc + enp.tanh(xs[t, j] * w), total)

    return egad.fori_loop(0, xs.shape[0], row, 0.0)


def test_a_gradient_added_into_rows_of_a_table_with_symbolic_dims_compiles():
    """xs of Spec(("T", "N")) read at xs[t, j]: its gradient adds into a column of a
    (T, N) table, whose other dim is symbolic (it was refused at lowering)."""
    program = egad.trace(read_cell_by_cell, egad.Spec(("T", "N"), "float64"), 0.5)
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    compiled = build(gradient, cache=BuildCache(None))
    for shape in ((3, 4), (1, 2), (0, 3)):
        xs = np.random.default_rng(0).normal(size=shape)
        value, (dxs, dw) = compiled(xs, 0.5)
        want_value, (want_dxs, want_dw) = egad.interpret(gradient, xs, 0.5)
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        np.testing.assert_allclose(dxs, want_dxs, rtol=1e-12)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-12)

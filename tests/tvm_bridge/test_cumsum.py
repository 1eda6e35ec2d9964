"""egad.numpy.cumsum compiled against the interpreter: static and symbolic shapes, axes
of length 0 (TVM's scan writes each row's first element before looping over the rest,
past the end of an empty axis: tvm_bridge/reduction.py), the reversed cumsum of the
gradient, inside a loop body, and through egad.optimize."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.frontend.primitives import apply1
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache

ROOT = pathlib.Path(__file__).resolve().parents[2]


def running_sums(x):
    """cumsum along every axis, flattened, in a wider dtype and from the end (the IR's reverse)."""
    along = tuple(enp.cumsum(x, axis=axis) for axis in range(x.ndim))
    numeric = x.astype("int64") if x.dtype == np.bool_ else x  # the IR's cumsum takes no bools
    backwards = tuple(apply1("cumsum", [numeric], {"axis": axis, "reverse": True}) for axis in range(x.ndim))
    return (*along, enp.cumsum(x), x.cumsum(axis=-1, dtype="float64"), *backwards)


def assert_compiled_matches_the_interpreter(program, *args):
    got, want = build(program, cache=BuildCache(None))(*args), egad.interpret(program, *args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6 if w.dtype == np.float32 else 1e-13)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5), (3, 0), (0, 4)])
def test_static_shapes(dtype, shape):
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(dtype)
    assert_compiled_matches_the_interpreter(egad.trace(running_sums, x), x)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_symbolic_shapes_including_length_0(dtype):
    program = egad.trace(running_sums, egad.Spec(("T", 3), dtype))
    compiled = build(program, cache=BuildCache(None))
    for length in (0, 1, 2, 5):
        x = (np.random.default_rng(length).standard_normal((length, 3)) * 4).astype(dtype)
        for got, want in zip(compiled(x), egad.interpret(program, x)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
            assert got.dtype == want.dtype and got.shape == want.shape


# TVM's plain scan over T = 0 writes a row of 256 float64 past its empty output: the heap
# is corrupt, and a later allocation aborts the process (not always the same call)
EMPTY_AXIS_CALLS = """
import numpy as np, egad, egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.tvm_bridge.test_cumsum import running_sums
compiled = build(egad.trace(running_sums, egad.Spec(("T", 256), "float64")), cache=BuildCache(None))
for _ in range(50):
    assert all(out.shape == (0, 256) for out in compiled(np.zeros((0, 256)))[:2])
    compiled(np.ones((2, 256)))
print("no corruption")
"""


def test_a_symbolic_axis_empty_at_run_time_writes_nothing_past_the_end():
    done = subprocess.run([sys.executable, "-c", EMPTY_AXIS_CALLS], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "MALLOC_CHECK_": "3", "EGAD_DISK_CACHE": "0"})
    assert done.returncode == 0 and "no corruption" in done.stdout, done.stderr[-2000:]


def test_a_static_empty_axis_beside_a_symbolic_one():
    program = egad.trace(running_sums, egad.Spec(("T", 0), "float64"))
    for length in (0, 3):
        assert_compiled_matches_the_interpreter(program, np.zeros((length, 0)))


def test_the_gradient_is_the_running_sum_from_the_end_without_cancellation():
    """dx_i = Σ_{j≥i} g_j exactly: Σg minus prefix sums would give 2, not 1, for the last entry."""
    weights = np.array([1e16, 1.0, 1.0])
    gradient = egad.grad(egad.trace(lambda x: enp.sum(enp.cumsum(x) * weights), np.zeros(3)))
    (dx,) = build(gradient, cache=BuildCache(None))(np.zeros(3))
    np.testing.assert_array_equal(dx, [1e16 + 2, 2.0, 1.0])


def loss_over_a_loop(x, w):
    def step(i, h):
        return enp.tanh(enp.cumsum(h * w, axis=-1) * 0.3 + x[i])

    h = egad.fori_loop(0, x.shape[0], step, enp.zeros_like(x[0]))
    return enp.sum(enp.cumsum(h) ** 2)


@pytest.mark.parametrize("spec", [(4, 6), ("T", 6)])
def test_the_gradient_of_a_loop_body_cumsum_compiled(spec):
    w = np.random.default_rng(1).standard_normal(6)
    program = egad.value_and_grad(egad.trace(loss_over_a_loop, egad.Spec(spec, "float64"), w), wrt=(0, 1))
    compiled = build(program, cache=BuildCache(None))
    for length in ((4,) if spec[0] == 4 else (0, 1, 4)):
        x = np.random.default_rng(length).standard_normal((length, 6))
        (value, grads), (want_value, want_grads) = compiled(x, w), egad.interpret(program, x, w)
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        for got, want in zip(grads, want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_optimized_with_the_default_rules():
    w = np.random.default_rng(2).standard_normal(6)
    x = np.random.default_rng(3).standard_normal((5, 6))
    program = egad.trace(loss_over_a_loop, x, w)
    value, (dx,) = egad.optimize(program, wrt=(0,))(x, w)
    want_value, (want_dx,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)), x, w)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("spec", [(3,), ("T",)])
def test_sums_of_negative_zeros_stay_negative_as_numpy(spec):
    """-0.0 + -0.0 is -0.0: a scan seeded with 0.0 (the symbolic axis's padding) gave 0.0."""
    program = egad.trace(running_sums, egad.Spec(spec, "float64"))
    x = np.array([-0.0, -0.0, -0.0])
    for got in build(program, cache=BuildCache(None))(x):
        np.testing.assert_array_equal(np.signbit(got), [True, True, True])


@pytest.mark.parametrize("spec", [(3, 4), ("T", 4)])
def test_builds_for_cuda(spec):
    """TVM's dispatch picks its GPU scan for R.cumsum there; the padding kernels of a
    symbolic axis are scheduled as any injective kernel (run on no GPU here)."""
    compiled = build(egad.trace(running_sums, egad.Spec(spec, "float32")), target="cuda", cache=BuildCache(None))
    assert "__global__" in compiled.source["cuda"]

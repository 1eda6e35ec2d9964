"""Ops that Relax lacks are lowered without losing accuracy: expm1 and log1p keep
their relative precision near 0 (exp(x) - 1 and log(1 + x) would not)."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.nn
import egad.numpy as enp
from egad.tvm_bridge import build


@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-14), ("float32", 1e-6)])
def test_expm1_and_log1p_are_accurate_near_zero(dtype, tolerance):
    magnitudes = np.logspace(-30, 1, 300)
    x = np.concatenate([-magnitudes[magnitudes < 0.99], [0.0], magnitudes]).astype(dtype)
    expm1, log1p = build(egad.trace(lambda x: (enp.expm1(x), enp.log1p(x)), x))(x)
    for got, expected in ((expm1, np.expm1(x)), (log1p, np.log1p(x))):
        relative = np.abs(got - expected) / np.maximum(np.abs(expected), np.finfo(dtype).tiny)
        assert relative.max() < tolerance, (x[relative.argmax()], got[relative.argmax()])


def test_float32_tanh_and_sigmoid_polynomials_are_accurate_and_keep_nan():
    # float32 tanh and sigmoid are vectorized polynomials (tvm_bridge/elementwise.py), not libm
    x = np.concatenate([np.linspace(-100, 100, 20001), np.logspace(-30, 1, 300), -np.logspace(-30, 1, 300),
                        [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    tanh, sigmoid = build(egad.trace(lambda x: (enp.tanh(x), egad.nn.sigmoid(x)), x))(x)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        expected = {"tanh": np.tanh(wide), "sigmoid": 1 / (1 + np.exp(-wide))}
    for name, got, tolerance in (("tanh", tanh, 1e-6), ("sigmoid", sigmoid, 1e-5)):
        want = expected[name]
        finite = np.isfinite(want)
        relative = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1e-30)
        assert relative.max() < tolerance, (name, x[finite][relative.argmax()])
        assert np.isnan(got[-1]), name
    assert tanh[-5:-1].tolist() == [0.0, -0.0, 1.0, -1.0] and sigmoid[-5:-1].tolist() == [0.5, 0.5, 1.0, 0.0]


def test_float32_exp_polynomial_is_accurate_overflows_to_inf_and_keeps_nan():
    x = np.concatenate([np.linspace(-87, 88.7, 40001), np.logspace(-30, 1, 300), -np.logspace(-30, 1, 300),
                        [0.0, -0.0, 88.8, 1000.0, -1000.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    (got,) = build(egad.trace(lambda x: (enp.exp(x),), x))(x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = np.abs(x) <= 87
    ulp = np.abs(got[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32))
    assert ulp.max() <= 5, x[normal][ulp.argmax()]
    assert got[-8:-1].tolist() == [1.0, 1.0, np.inf, np.inf, 0.0, np.inf, 0.0] and np.isnan(got[-1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_log_softmax_and_logsumexp_match_the_interpreter(dtype):
    x = (np.random.default_rng(0).standard_normal((6, 50)) * 30).astype(dtype)
    x[1, 3], x[2, :] = -np.inf, -np.inf  # a row of -inf: NaN softmax, -inf logsumexp, as in numpy

    def fn(x):
        return (egad.nn.softmax(x, axis=-1), egad.nn.log_softmax(x, axis=0),
                egad.nn.logsumexp(x, axis=1), egad.nn.logsumexp(x, axis=0, keepdims=True))

    program = egad.trace(fn, x)
    with np.errstate(invalid="ignore"):
        want = egad.interpret(program, x)
    for got, expected in zip(build(program)(x), want):
        np.testing.assert_allclose(got, expected, rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-30)

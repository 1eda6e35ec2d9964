"""Ops that Relax lacks are lowered without losing accuracy: expm1 and log1p keep
their relative precision near 0 (exp(x) - 1 and log(1 + x) would not)."""
from __future__ import annotations

import numpy as np
import pytest

import egad
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

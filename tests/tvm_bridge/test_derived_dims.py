"""Symbolic dims defined in the middle of a function: `enp.arange(1, T)` has a length
`d#1` that the program computes (max(T - 1, 0)) and the lowering binds with a
match_cast after the sizes the function's parameters define. Fusion may move
bindings; tvm_bridge/fusion.py's OrderAfterShapeDefinitions puts every use of `d#1`
back after its match_cast, and a match_cast that only re-checks a parameter's dim
(T) must not hold back the bindings that read T (they once formed a cycle, the
block stayed misordered, and TVM's VMShapeLower failed: "8 * d_1 has not been
computed")."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close


def sums_of_aranges(x):
    T = x.shape[0]
    return 0.0 + enp.sum(enp.arange(T)) + enp.sum(enp.arange(1, T)) + enp.sum(x)


def weighted_by_position(x):
    T = x.shape[0]
    return enp.sum(enp.sin(x) * enp.arange(T)) + enp.sum(enp.arange(2, T) * 0.5)


def tail_and_aranged_ramp(x):
    T = x.shape[0]
    return enp.sum(x[1:] * x[:-1]) + enp.sum(enp.cos(enp.arange(1, T) * 1.0)) * enp.sum(x)


@pytest.mark.parametrize("function", [sums_of_aranges, weighted_by_position, tail_and_aranged_ramp])
def test_a_dim_defined_mid_function_compiles_with_its_gradient(function):
    program = egad.trace(function, egad.Spec(("T",), "float64"))
    gradient = egad.value_and_grad(program)
    compiled = build(gradient, cache=BuildCache(None))
    for length in (0, 1, 2, 7):
        x = np.linspace(-1.0, 1.0, length)
        assert_trees_close(compiled(x), egad.interpret(gradient, x), rtol=1e-12, atol=1e-12)


def test_the_optimizer_builds_a_dim_defined_mid_function():
    program = egad.trace(sums_of_aranges, egad.Spec(("T",), "float64"))
    optimized = egad.optimize(program)
    x = np.linspace(-1.0, 1.0, 6)
    assert_trees_close(optimized(x), egad.interpret(egad.value_and_grad(program), x), rtol=1e-12, atol=1e-12)
    (optimization,) = optimized.optimizations
    assert "failed to build" not in (optimization.fallback or "")


def test_a_tvm_failure_is_a_build_error_naming_the_program(monkeypatch):
    """Without the reordering the block stays misordered and TVM's VMShapeLower fails:
    the user gets an egad.BuildError naming the program and TVM's reason, with TVM's
    error chained as its cause."""
    from egad.tvm_bridge import fusion

    keep_order = tvm.transform.module_pass(lambda mod, _context: mod, opt_level=0, name="KeepOrder")
    monkeypatch.setattr(fusion, "order_after_shape_definitions", keep_order)
    program = egad.trace(sums_of_aranges, egad.Spec(("T",), "float64"))
    with pytest.raises(egad.BuildError, match=r"'sums_of_aranges'.*\n?.*has not been computed") as raised:
        build(program, cache=BuildCache(None))
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "defect in egad" in str(raised.value)

"""A program TVM cannot build, or egad cannot lower, is a defect in egad, not in the
user's program: `egad.BuildError` names the program, the step and the reason, with
the original error chained as its cause (never a raw TVM InternalError)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.tvm_bridge.test_derived_dims import sums_of_aranges


def test_a_tvm_failure_is_a_build_error_naming_the_program(monkeypatch):
    """Without fusion.py's OrderAfterShapeDefinitions, sums_of_aranges's block stays
    misordered (tests/tvm_bridge/test_derived_dims.py) and TVM's VMShapeLower fails:
    the user gets an egad.BuildError naming the program and TVM's reason, with TVM's
    error chained as its cause."""
    from egad.tvm_bridge import fusion

    keep_order = tvm.transform.module_pass(lambda mod, _context: mod, opt_level=0, name="KeepOrder")
    monkeypatch.setattr(fusion, "order_after_shape_definitions", keep_order)
    program = egad.trace(sums_of_aranges, egad.Spec(("T",), "float64"))
    with pytest.raises(egad.BuildError, match=r"compile program 'sums_of_aranges'.*has not been computed") as raised:
        build(program, cache=BuildCache(None))
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "defect in egad" in str(raised.value)


def test_a_lowering_failure_is_a_build_error_naming_the_program(monkeypatch):
    """A lowering that hands Relax something it rejects (here sin's, made to reshape
    three elements to two rows) fails in TVM's BlockBuilder, inside egad's lowering."""
    from egad.tvm_bridge.registry import LOWERINGS

    monkeypatch.setitem(LOWERINGS, "sin", lambda bb, args, attrs, binding: relax.op.reshape(args[0], (2, -1)))

    def wavy(x):
        return enp.sin(x) * 2.0

    with pytest.raises(egad.BuildError, match=r"lower program 'wavy' for llvm") as raised:
        build(egad.trace(wavy, np.zeros(3)), cache=BuildCache(None))
    assert raised.value.__cause__ is not None

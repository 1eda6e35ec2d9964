"""tvm_bridge/vm_checks.py: loop bodies, conditions and branches run without the VM's
parameter checks; `main` keeps them, and symbolic dims are still bound."""
from __future__ import annotations

import re

import numpy as np

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache


def rnn_loss(W, xs, h0):
    h = egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] + h @ W), h0)
    return enp.sum(h * h)


def collatz_steps(n):
    def body(state):
        k, m = state
        return k + 1, egad.cond(m % 2 == 0, lambda m: m // 2, lambda m: 3 * m + 1, m)
    return egad.while_loop(lambda state: state[1] != 1, body, (0, n))[0]


def _checks_per_function(compiled) -> dict[str, dict[str, int]]:
    """{function: {builtin: calls}} of the checks the VM's code calls."""
    counts, function = {}, None
    for line in compiled.executable.as_text().splitlines():
        header = re.fullmatch(r"@(\S+):", line.strip())
        if header:
            function = header.group(1)
        called = re.match(r"\s*call\s+vm\.builtin\.(check_tensor_info|check_shape_info|match_shape)\s", line)
        if called:
            counts.setdefault(function, {}).setdefault(called.group(1), 0)
            counts[function][called.group(1)] += 1
    return counts


def test_a_gradient_loop_body_runs_without_parameter_checks_and_main_keeps_its_own():
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((6, 6)) * 0.3, rng.standard_normal((5, 3, 6)), rng.standard_normal((3, 6)))
    program = egad.trace(rnn_loss, *args)
    gradient = egad.grad(program, wrt=(0, 2))
    compiled = build(gradient, cache=BuildCache(None))
    checks = _checks_per_function(compiled)
    assert checks["main"]["check_tensor_info"] == 3, checks  # W, xs, h0
    # no body checks a parameter's rank and dtype (the adjoint body may still match_shape the rows it pops:
    # a driver's results, not its parameters)
    assert all("check_tensor_info" not in calls for function, calls in checks.items() if function != "main"), checks
    assert checks.get("body_1", {}) == {}, checks
    for got, want in zip(compiled(*args), egad.interpret(gradient, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_while_conditions_and_branches_run_without_parameter_checks():
    program = egad.trace(collatz_steps, np.int64(6))
    compiled = build(program, cache=BuildCache(None))
    checks = _checks_per_function(compiled)
    assert set(checks) == {"main"}, checks
    for n in (1, 6, 7, 27):
        assert int(compiled(np.int64(n))) == int(egad.interpret(program, np.int64(n)))


def symbolic_rnn(xs, h0):
    h, ys = egad.scan(lambda h, x: (enp.tanh(h * 0.5 + x), h * x), h0, xs)
    return enp.sum(h) + enp.sum(ys)


def test_bodies_with_symbolic_dims_still_bind_them():
    """A body's match_shape that stores a symbolic dim (its kernels read it) is kept:
    one build runs every batch size, value and gradient."""
    program = egad.trace(symbolic_rnn, egad.Spec(("T", "B"), "float64"), egad.Spec(("B",), "float64"))
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    compiled = build(gradient, cache=BuildCache(None))
    assert any("match_shape" in calls for calls in _checks_per_function(compiled).values())
    for T, B in ((3, 1), (4, 5), (2, 9)):
        rng = np.random.default_rng(T * B)
        xs, h0 = rng.standard_normal((T, B)), rng.standard_normal(B)
        got, want = compiled(xs, h0), egad.interpret(gradient, xs, h0)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        for g, w in zip(got[1], want[1]):
            np.testing.assert_allclose(g, w, rtol=1e-12)


def scan_of_rows(W, xs, h0):
    return egad.scan(lambda h, x: (enp.tanh(h @ W + x),) * 2, h0, xs)


def test_a_body_writing_its_rows_in_place_binds_its_row_offsets_without_checking_them():
    rng = np.random.default_rng(0)
    args = tuple(a.astype(np.float32) for a in (rng.standard_normal((16, 16)) * 0.3,
                                                rng.standard_normal((5, 4, 16)), rng.standard_normal((4, 16))))
    program = egad.trace(scan_of_rows, *args)
    compiled = build(program, cache=BuildCache(None))
    checks = _checks_per_function(compiled)
    assert checks.get("body_1") == {"match_shape": 1}, checks  # the offsets, bound (they are symbolic)
    for got, want in zip(compiled(*args), egad.interpret(program, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

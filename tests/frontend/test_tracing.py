"""The tracing front end's contract (DESIGN §1): arguments, static_argnums, weak
types, pytrees, closures, symbolic dims, numpy interop, eager execution."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.ir import walk_bindings

RNG = np.random.default_rng(0)
X32 = RNG.standard_normal((3, 4)).astype(np.float32)


def run(fn, *args, **kwargs):
    """Trace then interpret: the result the user gets."""
    return egad.interpret(egad.trace(fn, *args, **kwargs), *args)


def test_static_argnums_bake_python_values():
    def f(x, layers, scale):
        for _ in range(layers):  # static: unrolled at trace time, as the user wrote it
            x = enp.tanh(x) * scale
        return x

    program = egad.trace(f, X32, 3, 0.5, static_argnums=(1,))
    assert sum(b.op == "tanh" for b in walk_bindings(program.region)) == 3
    np.testing.assert_allclose(egad.interpret(program, X32, 3, 0.5), f(X32, 3, 0.5), rtol=1e-6)
    negative = egad.trace(f, X32, 2, 0.5, static_argnums=(-2,))
    np.testing.assert_allclose(egad.interpret(negative, X32, 2, 0.25), f(X32, 2, 0.25), rtol=1e-6)


def test_python_scalars_and_counters_are_weak():
    def f(x, a):
        h = egad.fori_loop(0, 4, lambda i, h: h * a + i * 0.5, x)
        return h, h * 2.0, x + 1

    h, doubled, plus = run(f, X32, 0.5)
    assert h.dtype == doubled.dtype == plus.dtype == np.float32
    expected = X32.copy()
    for i in range(4):
        expected = expected * 0.5 + i * 0.5
    np.testing.assert_allclose(h, expected, rtol=1e-6)


def test_numpy_scalars_are_strong_like_numpy():
    out = run(lambda x: x + np.float64(1.0), X32)
    assert out.dtype == (X32 + np.float64(1.0)).dtype == np.float64


def test_weak_initial_state_is_promoted_by_the_body():
    def f(xs):
        return egad.fori_loop(0, xs.shape[0], lambda t, acc: acc + xs[t].sum(), 0.0)

    out = run(f, X32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, X32.sum(), rtol=1e-5)


def test_int64_counter_carried_with_float_state():
    def f(x):
        return egad.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * 1.5), (0, x))

    count, value = run(f, X32)
    assert count.dtype == np.int64 and int(count) == 5 and value.dtype == np.float32
    np.testing.assert_allclose(value, X32 * 1.5 ** 5, rtol=1e-6)


def test_pytrees_as_arguments_state_and_outputs():
    Pair = collections.namedtuple("Pair", "a b")

    def f(params, extra):
        def body(i, state):
            return {"h": state["h"] @ params["W"], "n": [state["n"][0] + 1, None]}

        out = egad.fori_loop(0, 2, body, {"h": extra[0], "n": [0, None]})
        return Pair(out["h"], (out["n"][0], extra[1]))

    W = RNG.standard_normal((4, 4)).astype(np.float32)
    result = run(f, {"W": W}, (X32, 3.0))
    assert isinstance(result, Pair)
    np.testing.assert_allclose(result.a, X32 @ W @ W, rtol=1e-5)
    assert int(result.b[0]) == 2 and float(result.b[1]) == 3.0


def test_closures_become_explicit_region_inputs():
    def f(x, W):
        scale = x.sum()
        return egad.fori_loop(0, 3, lambda i, h: enp.tanh(h @ W) * scale, x)

    W = RNG.standard_normal((4, 4)).astype(np.float32)
    program = egad.trace(f, X32, W)
    (loop,) = [b for b in program.region.bindings if b.op == "for"]
    # lo, hi, state, then the two captured outer values (W and scale)
    assert len(loop.inputs) == 5
    assert len(loop.regions[0].params) == 4  # counter, state, W, scale
    expected = X32
    for _ in range(3):
        expected = np.tanh(expected @ W) * X32.sum()
    np.testing.assert_allclose(egad.interpret(program, X32, W), expected, rtol=1e-5)


def test_closure_through_three_levels_of_nesting():
    def f(x, n):
        bias = x.mean()

        def outer(i, acc):
            def middle(j, acc):
                return egad.cond(j % 2 == 0, lambda a: a + bias, lambda a: a - i, acc)

            return egad.fori_loop(0, i, middle, acc)

        return egad.fori_loop(0, n, outer, x)

    def reference(x, n):
        acc = x.copy()
        for i in range(n):
            for j in range(i):
                acc = acc + x.mean() if j % 2 == 0 else acc - i
        return acc

    program = egad.trace(f, X32, 4)
    egad.verify(program)
    for n in (0, 1, 4):
        np.testing.assert_allclose(egad.interpret(program, X32, n), reference(X32, n), rtol=1e-5)


def test_symbolic_dims_run_at_any_length():
    def f(xs, h0):
        T = xs.shape[0]
        h = egad.fori_loop(0, T, lambda t, h: enp.tanh(xs[t] + h), h0)
        hs = enp.zeros((T, 4), "float32") + xs.mean()
        _, ys = egad.scan(lambda c, x: (c, x * 2), 0.0, xs)
        return h, hs, ys

    program = egad.trace(f, egad.Spec(("T", 4), "float32"), np.zeros(4, np.float32))
    assert program.result_types[1].shape == ("T", 4) and program.result_types[2].shape == ("T", 4)
    for length in (1, 3, 7):
        xs = RNG.standard_normal((length, 4)).astype(np.float32)
        h, hs, ys = egad.interpret(program, xs, np.zeros(4, np.float32))
        expected = np.zeros(4, np.float32)
        for t in range(length):
            expected = np.tanh(xs[t] + expected)
        np.testing.assert_allclose(h, expected, rtol=1e-5)
        assert hs.shape == (length, 4) and ys.shape == (length, 4)
        np.testing.assert_allclose(ys, xs * 2, rtol=1e-6)


def test_numpy_array_operators_with_tracers():
    W = RNG.standard_normal((4, 3)).astype(np.float32)
    out = run(lambda x: (W.T @ x.T, np.float32(2) * x, X32 - x, X32 < x), X32)
    np.testing.assert_allclose(out[0], W.T @ X32.T, rtol=1e-5)
    np.testing.assert_allclose(out[1], 2 * X32)
    assert not out[2].any() and not out[3].any()


def test_enp_on_numpy_runs_eagerly():
    assert isinstance(enp.tanh(X32), np.ndarray)
    np.testing.assert_allclose(enp.tanh(X32), np.tanh(X32))
    np.testing.assert_allclose(enn.softmax(X32), np.exp(X32) / np.exp(X32).sum(-1, keepdims=True), rtol=1e-6)
    assert enp.sum(X32).dtype == np.float32


def test_combinators_run_eagerly_on_numpy():
    total = egad.fori_loop(0, 3, lambda i, s: s + i, 0)
    assert total == 3
    count = egad.while_loop(lambda s: s < 10, lambda s: s * 2, 1)
    assert count == 16
    carry, ys = egad.scan(lambda c, x: (c + x, c), 0.0, np.arange(4.0), reverse=True)
    assert carry == 6.0 and ys.tolist() == [6.0, 5.0, 3.0, 0.0]
    assert egad.cond(True, lambda: 1, lambda: 2) == 1
    assert egad.switch(7, [lambda: "a", lambda: "b"]) == "b"


def test_concrete_predicate_is_pruned_at_trace_time():
    program = egad.trace(lambda x: egad.cond(True, lambda: x * 2, lambda: x.astype("int64")), X32)
    assert not any(b.op == "if" for b in program.region.bindings)


def test_switch_index_is_clamped():
    program = egad.trace(lambda k, x: egad.switch(k, [lambda x: x, lambda x: x * 2, lambda x: x * 3], x), 0, X32)
    for k, factor in [(-5, 1), (0, 1), (1, 2), (2, 3), (99, 3)]:
        np.testing.assert_allclose(egad.interpret(program, k, X32), X32 * factor)


def test_stop_gradient_is_identity_on_values():
    np.testing.assert_allclose(run(lambda x: egad.stop_gradient({"a": x * 2})["a"], X32), X32 * 2)


def test_every_binding_records_the_users_source_line():
    def f(x):
        return egad.fori_loop(0, 2, lambda i, h: enp.sin(h), x)

    program = egad.trace(f, X32)
    for binding in walk_bindings(program.region):
        assert binding.loc.file == __file__, binding
        assert binding.loc.line > 0


def test_at_set_and_add():
    def f(x, i):
        return x.at[i].set(0.0), x.at[i].add(x[0])

    (set_, added) = run(f, X32, 1)
    expected_set, expected_add = X32.copy(), X32.copy()
    expected_set[1] = 0
    expected_add[1] += X32[0]
    np.testing.assert_allclose(set_, expected_set)
    np.testing.assert_allclose(added, expected_add)


def test_zero_length_scan_and_zero_trip_loops():
    def f(xs, n):
        carry, ys = egad.scan(lambda c, x: (c + x, x * c), enp.zeros(4, "float32"), xs)
        zero = egad.fori_loop(0, n, lambda i, c: c + 1.0, carry)
        return carry, ys, zero

    empty = np.zeros((0, 4), np.float32)
    carry, ys, zero = run(f, empty, -3)
    assert ys.shape == (0, 4) and ys.dtype == np.float32
    assert not carry.any() and not zero.any()


def test_trace_rejects_untraceable_arguments():
    with pytest.raises(egad.ArgumentError, match="static_argnums"):
        egad.trace(lambda x, s: x, X32, "text")
    with pytest.raises(egad.ArgumentError):
        egad.trace(lambda x: x, X32, static_argnums=(3,))

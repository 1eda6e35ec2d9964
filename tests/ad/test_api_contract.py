"""The contract of `egad.grad` / `egad.value_and_grad` / `egad.stop_gradient`
(DESIGN §1 "API contract", issue 3): what comes back for each kind of `wrt`, pytree
and float32 arguments, the errors, `has_aux`, symbolic zeros, loops that run zero
times or a traced number of times, and a gradient program whose size does not
depend on trip counts.
"""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ir import walk_bindings
from egad.pytree import flatten

from .gradcheck import assert_gradients_match

RNG = np.random.default_rng(1234)
X = RNG.standard_normal(3)
Y = RNG.standard_normal(3)


def product(x, y):
    return enp.sum(x * y)


def grad_of(fn, args, wrt=(0,), **options):
    return egad.interpret(egad.grad(egad.trace(fn, *args), wrt=wrt, **options), *args)


# --- wrt ----------------------------------------------------------------------------


def test_int_wrt_gives_the_bare_gradient():
    dy = grad_of(product, (X, Y), wrt=1)
    assert isinstance(dy, np.ndarray) and dy.shape == (3,) and dy.dtype == np.float64
    np.testing.assert_allclose(dy, X, rtol=1e-15)


def test_tuple_wrt_gives_a_tuple_in_wrt_order():
    dy, dx = grad_of(product, (X, Y), wrt=(1, 0))
    np.testing.assert_allclose(dx, Y, rtol=1e-15)
    np.testing.assert_allclose(dy, X, rtol=1e-15)
    single = grad_of(product, (X, Y), wrt=(1,))
    assert isinstance(single, tuple) and len(single) == 1
    np.testing.assert_allclose(single[0], X, rtol=1e-15)


def test_default_wrt_is_the_first_argument_as_a_tuple():
    grads = egad.interpret(egad.grad(egad.trace(product, X, Y)), X, Y)
    assert isinstance(grads, tuple) and len(grads) == 1
    np.testing.assert_allclose(grads[0], Y, rtol=1e-15)


def test_wrt_counts_positions_of_the_original_function_with_static_arguments():
    def fn(x, power, y):
        return enp.sum(x**power * y)

    program = egad.trace(fn, X, 2, Y, static_argnums=(1,))
    dx, dy = egad.interpret(egad.grad(program, wrt=(0, 2)), X, 2, Y)
    np.testing.assert_allclose(dx, 2 * X * Y, rtol=1e-14)
    np.testing.assert_allclose(dy, X**2, rtol=1e-14)
    with pytest.raises(egad.EgadError):
        egad.grad(program, wrt=1)  # a static argument has no gradient


def test_wrt_out_of_range_raises():
    program = egad.trace(product, X, Y)
    with pytest.raises(egad.EgadError):
        egad.grad(program, wrt=2)


@pytest.mark.parametrize("wrt", [1.0, None, "0"])
def test_a_wrt_that_is_no_index_raises_an_argument_error(wrt):
    with pytest.raises(egad.ArgumentError, match="wrt="):
        egad.grad(egad.trace(product, X, Y), wrt=wrt)


def test_calling_a_program_as_jax_calls_a_gradient_function_points_to_interpret():
    with pytest.raises(egad.ArgumentError, match=r"(?s)not called directly.*egad\.interpret"):
        egad.grad(egad.trace(product, X, Y))(X, Y)

def test_repeated_wrt_gives_the_same_gradient_twice_or_raises():
    """Never a silent zero: wrt=(0, 0) either repeats the gradient (as JAX does) or is refused."""
    program = egad.trace(product, X, Y)
    try:
        grad_program = egad.grad(program, wrt=(0, 1, 0))
    except egad.EgadError:
        return
    dx, dy, dx_again = egad.interpret(grad_program, X, Y)
    np.testing.assert_allclose(dx, Y, rtol=1e-15)
    np.testing.assert_allclose(dy, X, rtol=1e-15)
    np.testing.assert_allclose(dx_again, Y, rtol=1e-15)


def test_grad_program_takes_the_original_positional_arguments():
    program = egad.grad(egad.trace(product, X, Y), wrt=0)
    assert isinstance(program, egad.Program)
    other = RNG.standard_normal(3)
    np.testing.assert_allclose(egad.interpret(program, X, other), other, rtol=1e-15)


# --- structure and dtypes ------------------------------------------------------------


def test_pytree_argument_gives_a_pytree_gradient():
    params = {"W": RNG.standard_normal((2, 3)), "layers": [RNG.standard_normal(3), np.float64(0.5)],
              "pair": (RNG.standard_normal(()), RNG.standard_normal((1, 2)))}
    x = RNG.standard_normal(2)

    def fn(params, x):
        h = enp.tanh(x @ params["W"] + params["layers"][0]) * params["layers"][1]
        return enp.sum(h * h) + params["pair"][0] * enp.sum(params["pair"][1] * x)

    dparams = grad_of(fn, (params, x), wrt=0)
    got_leaves, got_tree = flatten(dparams)
    want_leaves, want_tree = flatten(params)
    assert got_tree == want_tree
    for g, p in zip(got_leaves, want_leaves):
        assert np.shape(g) == np.shape(p) and np.asarray(g).dtype == np.float64
    assert_gradients_match(fn, (params, x), (0, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_dtype_follows_the_argument(dtype):
    W = RNG.standard_normal((3, 3)).astype(dtype)
    h0 = RNG.standard_normal(3).astype(dtype)

    def fn(W, h0):
        h = egad.fori_loop(0, 4, lambda i, h: enp.tanh(h @ W + 0.5 * i), h0)
        return enp.sum(h * h)

    dW, dh0 = grad_of(fn, (W, h0), wrt=(0, 1))
    assert dW.dtype == dtype and dh0.dtype == dtype and dW.shape == (3, 3) and dh0.shape == (3,)
    want_W, want_h0 = grad_of(fn, (W.astype(np.float64), h0.astype(np.float64)), wrt=(0, 1))
    rtol = 1e-4 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(dW, want_W, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(dh0, want_h0, rtol=rtol, atol=rtol)


def test_float32_loss_value_and_gradient_stay_float32():
    x = RNG.standard_normal(4).astype(np.float32)
    value, dx = egad.interpret(egad.value_and_grad(egad.trace(lambda x: enp.sum(x * x) * 0.5, x), wrt=0), x)
    assert np.asarray(value).dtype == np.float32 and dx.dtype == np.float32
    np.testing.assert_allclose(dx, x, rtol=1e-6)


def test_python_float_argument_gets_a_float64_scalar_gradient():
    def fn(x, scale):
        return enp.sum(enp.tanh(x * scale))

    dscale = grad_of(fn, (X, 0.7), wrt=1)
    assert np.shape(dscale) == () and np.asarray(dscale).dtype == np.float64
    np.testing.assert_allclose(dscale, np.sum(X * (1 - np.tanh(X * 0.7) ** 2)), rtol=1e-13)


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("output", [
    pytest.param(lambda x: x * 2.0, id="vector"),
    pytest.param(lambda x: enp.reshape(enp.sum(x), (1,)), id="shape-(1,)"),
    pytest.param(lambda x: (enp.sum(x), enp.sum(x * x)), id="tuple-without-has_aux"),
    pytest.param(lambda x: enp.sum(x > 0), id="int-scalar"),
    pytest.param(lambda x: enp.any(x > 0), id="bool-scalar"),
    pytest.param(lambda x: enp.argmax(x), id="argmax"),
])
def test_output_that_is_not_a_float_scalar_raises(output):
    program = egad.trace(output, X)
    with pytest.raises(egad.EgadError):
        egad.grad(program)
    with pytest.raises(egad.EgadError):
        egad.value_and_grad(program)


@pytest.mark.parametrize("arg", [np.int64(3), np.arange(3), np.array([True, False, True])],
                         ids=["int-scalar", "int-array", "bool-array"])
def test_differentiating_an_integer_argument_raises(arg):
    def fn(x, n):
        return enp.sum(x * enp.sum(n))

    program = egad.trace(fn, X, arg)
    for wrt in (1, (0, 1)):
        with pytest.raises(egad.EgadError):
            egad.grad(program, wrt=wrt)
        with pytest.raises(egad.EgadError):
            egad.value_and_grad(program, wrt=wrt)


def test_integer_leaf_inside_a_pytree_argument_raises():
    def fn(p):
        return enp.sum(p["w"] * p["n"])

    program = egad.trace(fn, {"w": X, "n": np.int64(2)})
    with pytest.raises(egad.EgadError):
        egad.grad(program)


# --- has_aux, value_and_grad ---------------------------------------------------------


def aux_loss(x, y):
    z = x * y
    return enp.sum(z), {"z": z, "positive": enp.sum(z > 0)}


def test_has_aux_returns_grads_and_aux():
    grads, aux = grad_of(aux_loss, (X, Y), wrt=(0, 1), has_aux=True)
    np.testing.assert_allclose(grads[0], Y, rtol=1e-15)
    np.testing.assert_allclose(grads[1], X, rtol=1e-15)
    np.testing.assert_allclose(aux["z"], X * Y, rtol=1e-15)
    assert int(aux["positive"]) == int(np.sum(X * Y > 0))
    bare, _ = grad_of(aux_loss, (X, Y), wrt=0, has_aux=True)
    np.testing.assert_allclose(bare, Y, rtol=1e-15)


def test_has_aux_needs_a_pair_with_a_float_scalar_first():
    for fn in (lambda x: enp.sum(x), lambda x: (x, enp.sum(x))):
        with pytest.raises(egad.EgadError):
            egad.grad(egad.trace(fn, X), has_aux=True)


def test_value_and_grad_returns_value_and_grads():
    value, grads = egad.interpret(egad.value_and_grad(egad.trace(product, X, Y), wrt=(0, 1)), X, Y)
    np.testing.assert_allclose(value, np.sum(X * Y), rtol=1e-15)
    np.testing.assert_allclose(grads[0], Y, rtol=1e-15)
    np.testing.assert_allclose(grads[1], X, rtol=1e-15)
    value, dx = egad.interpret(egad.value_and_grad(egad.trace(product, X, Y), wrt=0), X, Y)
    np.testing.assert_allclose(dx, Y, rtol=1e-15)


def test_value_and_grad_with_aux_follows_jax():
    (value, aux), grads = egad.interpret(egad.value_and_grad(egad.trace(aux_loss, X, Y), wrt=(0,), has_aux=True),
                                         X, Y)
    np.testing.assert_allclose(value, np.sum(X * Y), rtol=1e-15)
    np.testing.assert_allclose(aux["z"], X * Y, rtol=1e-15)
    np.testing.assert_allclose(grads[0], Y, rtol=1e-15)


# --- stop_gradient and zeros ---------------------------------------------------------


def test_stop_gradient_contributes_exactly_zero():
    dx = grad_of(lambda x: enp.sum(egad.stop_gradient(x) * x), (X,), wrt=0)
    np.testing.assert_array_equal(dx, X)  # not 2x


def test_stop_gradient_on_a_pytree_and_inside_a_loop():
    def fn(x, y):
        frozen = egad.stop_gradient({"x": x, "y": y})

        def body(i, h):
            return h * 0.5 + frozen["x"] * h + egad.stop_gradient(h * y)

        return enp.sum(egad.fori_loop(0, 3, body, y) * frozen["y"])

    dx, dy = grad_of(fn, (X, Y), wrt=(0, 1))
    np.testing.assert_array_equal(dx, np.zeros(3))
    # only the path through the initial state h = y, then h -> h * (0.5 + x) three times
    np.testing.assert_allclose(dy, (0.5 + X) ** 3 * Y, rtol=1e-13)


@pytest.mark.parametrize("loop", ["fori", "while"])
def test_stop_gradient_recycling_loop_only_the_last_pass_gets_gradients(loop):
    """AlphaFold-style recycling: the state is cut from the graph at every pass."""
    W = 0.5 * RNG.standard_normal((3, 3))

    def fn(x, W):
        def recycle(h):
            return enp.tanh(egad.stop_gradient(h) @ W + x)

        if loop == "fori":
            return enp.sum(egad.fori_loop(0, 4, lambda i, h: recycle(h), x))
        h, _ = egad.while_loop(lambda s: s[1] < 4, lambda s: (recycle(s[0]), s[1] + 1), (x, 0))
        return enp.sum(h)

    dx, dW = grad_of(fn, (X, W), wrt=(0, 1))
    h = X
    for _ in range(3):
        h = np.tanh(h @ W + X)
    g = 1 - np.tanh(h @ W + X) ** 2  # only the last pass: d sum(tanh(h @ W + x)) with h constant
    np.testing.assert_allclose(dx, g, rtol=1e-13)
    np.testing.assert_allclose(dW, np.outer(h, g), rtol=1e-13)


def test_argument_the_loss_does_not_depend_on_gets_zeros_of_its_shape():
    Z = RNG.standard_normal((2, 5)).astype(np.float32)

    def fn(x, unused, only_in_predicate):
        return egad.cond(enp.sum(only_in_predicate) > 0, lambda v: enp.sum(v * v), lambda v: enp.sum(v), x)

    dx, du, dp = grad_of(fn, (X, Z, Y), wrt=(0, 1, 2))
    assert du.shape == (2, 5) and du.dtype == np.float32
    assert dp.shape == (3,) and dp.dtype == np.float64
    np.testing.assert_array_equal(du, 0)
    np.testing.assert_array_equal(dp, 0)
    np.testing.assert_allclose(dx, 2 * X if np.sum(Y) > 0 else np.ones(3), rtol=1e-15)


def test_gradient_through_an_integer_path_is_zero():
    def fn(x):
        n = enp.sum(x > 0)  # ints carry no gradient
        return enp.sum(x) * 0.0 + n * 1.0

    np.testing.assert_array_equal(grad_of(fn, (X,), wrt=0), 0)


# --- loops ---------------------------------------------------------------------------------


def test_while_loop_that_runs_zero_times():
    def fn(x, w):
        def body(state):
            v, k = state
            return enp.tanh(v * w), k + 1

        v, _ = egad.while_loop(lambda s: enp.sum(s[0] * s[0]) > 1e6, body, (x * 2.0, 0))
        return enp.sum(v * w)

    dx, dw = grad_of(fn, (X, Y), wrt=(0, 1))
    np.testing.assert_allclose(dx, 2 * Y, rtol=1e-15)
    np.testing.assert_allclose(dw, 2 * X, rtol=1e-15)


def test_while_loop_with_a_data_dependent_trip_count():
    def fn(x, w):
        def body(state):
            v, k = state
            return v * 0.8 + enp.sin(w * v) * 0.1, k + 1

        v, k = egad.while_loop(lambda s: enp.logical_and(enp.sum(s[0] * s[0]) > 0.05, s[1] < 40), body, (x, 0))
        return enp.sum(v * v) + enp.sum(w) * 0.1

    assert_gradients_match(fn, (X, Y), (0, 1))


@pytest.mark.parametrize("lo,hi", [(0, 0), (2, 1), (0, 4), (1, 5)])
def test_fori_loop_with_traced_bounds(lo, hi):
    xs = RNG.standard_normal((6, 3))
    W = 0.5 * RNG.standard_normal((3, 3))

    def fn(W, xs, lo, hi):
        return enp.sum(egad.fori_loop(lo, hi, lambda i, h: enp.tanh(xs[i] + h @ W), xs[0]) ** 2)

    args = (W, xs, np.int64(lo), np.int64(hi))
    assert_gradients_match(fn, args, (0, 1))
    if hi <= lo:  # zero trips: the loss is sum(xs[0] ** 2)
        dW, dxs = grad_of(fn, args, wrt=(0, 1))
        np.testing.assert_array_equal(dW, 0)
        np.testing.assert_allclose(dxs[0], 2 * xs[0], rtol=1e-15)
        np.testing.assert_array_equal(dxs[1:], 0)


def test_scan_reverse():
    xs = RNG.standard_normal((5, 3))

    def fn(xs, w, h0):
        def step(h, x):
            h = enp.tanh(h * w + x)
            return h, enp.sum(h) * x

        h, ys = egad.scan(step, h0, xs, reverse=True)
        return enp.sum(h) + enp.sum(ys * np.arange(5.0)[:, None])

    assert_gradients_match(fn, (xs, X, Y), (0, 1, 2))


def test_scan_reverse_is_not_the_forward_scan():
    xs = RNG.standard_normal((4,))

    def run(reverse):
        def fn(xs, c):
            h, _ = egad.scan(lambda h, x: (h * c + x * x, h), enp.zeros(()), xs, reverse=reverse)
            return h

        return grad_of(fn, (xs, 0.5), wrt=0)

    # h = sum_t c^(steps after t) x_t^2: the forward scan weights the last x most, reverse the first
    np.testing.assert_allclose(run(False), 2 * xs * 0.5 ** np.arange(3, -1, -1), rtol=1e-14)
    np.testing.assert_allclose(run(True), 2 * xs * 0.5 ** np.arange(4), rtol=1e-14)


def test_nested_ragged_loops_with_a_branch():
    lengths = np.array([2, 0, 3, 1])

    def fn(xs, w, lengths):
        def outer(t, h):
            def inner(j, g):
                return egad.cond(j % 2 == 0, lambda g: enp.tanh(g * w + xs[t]), lambda g: enp.sin(g) * w, g)

            return egad.fori_loop(0, lengths[t], inner, h) * 0.9

        return enp.sum(egad.fori_loop(0, lengths.shape[0], outer, w) ** 2)

    assert_gradients_match(fn, (RNG.standard_normal((4, 3)), X, lengths), (0, 1))


# --- size of the gradient program ---------------------------------------------------------


def _rnn(W, U, xs, h0):
    def step(t, h):
        return enp.tanh(xs[t] @ U + h @ W)

    h = egad.fori_loop(0, xs.shape[0], step, h0)
    return enp.sum(h * h)


def _bindings(program) -> int:
    return sum(1 for _ in walk_bindings(program.region))


def test_gradient_program_size_does_not_depend_on_trip_count():
    W, U, h0 = 0.3 * RNG.standard_normal((4, 4)), RNG.standard_normal((2, 4)), RNG.standard_normal(4)
    sizes = {}
    for T in (5, 500):
        xs = 0.1 * RNG.standard_normal((T, 2))
        program = egad.trace(_rnn, W, U, xs, h0)
        for name, transform in (("grad", egad.grad), ("value_and_grad", egad.value_and_grad)):
            sizes[name, T] = _bindings(transform(program, wrt=(0, 1, 2, 3)))
    assert sizes["grad", 5] == sizes["grad", 500], sizes
    assert sizes["value_and_grad", 5] == sizes["value_and_grad", 500], sizes


def test_one_gradient_program_serves_any_while_trip_count():
    def fn(x, n):
        v, _ = egad.while_loop(lambda s: s[1] < n, lambda s: (enp.tanh(s[0] * 1.1), s[1] + 1), (x, 0))
        return enp.sum(v)

    assert_gradients_match(fn, (X, np.int64(3)), (0,))
    program = egad.grad(egad.trace(fn, X, np.int64(3)), wrt=0)
    for n in (0, 1, 300):
        dx = egad.interpret(program, X, np.int64(n))
        assert dx.shape == (3,) and np.all(np.isfinite(dx))
    np.testing.assert_allclose(egad.interpret(program, X, np.int64(0)), np.ones(3), rtol=1e-15)


def test_rnn_gradient_matches_differences_at_5_steps_and_stays_finite_at_500():
    W, U, h0 = 0.3 * RNG.standard_normal((3, 3)), RNG.standard_normal((2, 3)), RNG.standard_normal(3)
    assert_gradients_match(_rnn, (W, U, 0.5 * RNG.standard_normal((5, 2)), h0), (0, 1, 2, 3))
    xs = 0.1 * RNG.standard_normal((500, 2))
    grads = grad_of(_rnn, (W, U, xs, h0), wrt=(0, 1, 2, 3))
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.parametrize("spec, shapes", [
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("i,ij->ij", [(1,), (3, 2)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),
])
def test_the_gradient_of_an_einsum_that_broadcasts_a_size_one_index(spec, shapes):
    """einsum takes an index at size 1 in one operand and n in another, as numpy does;
    its gradient broadcast the size-n cotangent to the size-1 operand and failed
    ("cannot broadcast f64[2,3] to (1, 3)"): it sums there. Found by fuzzing."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape) for shape in shapes]
    assert_gradients_match(lambda a, b: enp.sum(enp.sin(enp.einsum(spec, a, b))), args, wrt=(0, 1))


def test_the_gradient_of_an_einsum_over_a_symbolic_axis():
    """The size-1 check above compared a symbolic dim's run-time size while
    differentiating (a TracerConversionError on einsum("t,t->") of egad.Spec vectors)."""
    V = egad.Spec(("T",), "float64")
    gradient = egad.grad(egad.trace(lambda x, y: enp.einsum("t,t->", x, y), V, V), wrt=(0, 1))
    x, y = np.arange(3.0), np.ones(3)
    dx, dy = egad.interpret(gradient, x, y)
    np.testing.assert_array_equal(dx, y)
    np.testing.assert_array_equal(dy, x)

"""benchmarks/gnmt_lite.py: the egad model against its plain-numpy reference, its
gradient against central differences, its time loops staying loops, and the
compiled build against the interpreter.

Two extra configs beside the module's `tiny`: `deep` (3 + 3 layers, so the residual
connections of layers >= 2 are exercised) and `micro` (the same topology at a size
where every entry of the gradient can be checked one by one).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import egad
from benchmarks import gnmt_lite
from egad.ir.program import count_bindings, walk_bindings
from egad.pytree import flatten
from tests.ad.gradcheck import EPS, ROUNDING_ULPS, assert_gradients_match, central_difference, to_float64

TINY = gnmt_lite.CONFIGS["tiny"]
DEEP = gnmt_lite.Config("deep", vocab=32, hidden=8, encoder_layers=3, decoder_layers=3, length=5, batch=3)
MICRO = gnmt_lite.Config("micro", vocab=6, hidden=3, encoder_layers=3, decoder_layers=3, length=3, batch=2)
# At GNMT's uniform(+-0.1) initialisation the attention is nearly uniform and its
# gradients are 1e-7..1e-11 of the output layer's, below what float64 central
# differences resolve; gradients are checked at the init scaled by this factor,
# where every parameter's gradient is >= 1e-3 of the largest.
GRADIENT_POINT_SCALE = 10.0


def _arguments(config, seed=0, scale=1.0, dtype=np.float32):
    params = {name: (value * scale).astype(dtype) for name, value in gnmt_lite.init_params(config, seed).items()}
    return (params, *gnmt_lite.make_batch(config, seed))


def _loops(program) -> int:
    return sum(1 for binding in walk_bindings(program.region) if binding.op == "for")


# --- the module's own contract ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(gnmt_lite.CONFIGS))
def test_parameters_and_batches_have_the_declared_shapes(name):
    config = gnmt_lite.CONFIGS[name]
    params = gnmt_lite.init_params(config, seed=0)
    assert {k: v.shape for k, v in params.items()} == gnmt_lite.param_shapes(config)
    assert all(v.dtype == np.float32 for v in params.values())
    assert gnmt_lite.layer_counts(params) == (config.encoder_layers, config.decoder_layers)
    src, tgt = gnmt_lite.make_batch(config, seed=1)
    assert src.shape == tgt.shape == (config.batch, config.length) and src.dtype == np.int64
    assert np.array_equal(tgt, src[:, ::-1])
    assert src.min() >= 1 and src.max() < config.vocab


# --- the value -------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [TINY, DEEP], ids=lambda c: c.name)
def test_interpreted_loss_matches_the_numpy_reference(config):
    params, src, tgt = _arguments(config)
    program = egad.trace(gnmt_lite.loss, params, src, tgt)
    value = egad.interpret(program, params, src, tgt)
    want = gnmt_lite.reference_loss(params, src, tgt)
    assert np.asarray(value).dtype == np.float32
    np.testing.assert_allclose(value, want, rtol=1e-4)
    # the same function run eagerly on numpy values (egad ops outside tracing)
    np.testing.assert_allclose(gnmt_lite.loss(params, src, tgt), want, rtol=1e-4)


@pytest.mark.parametrize("config", [TINY, DEEP], ids=lambda c: c.name)
def test_predicted_tokens_match_the_numpy_reference(config):
    params, src, tgt = _arguments(config, scale=GRADIENT_POINT_SCALE)  # confident argmaxes, no near-ties
    predicted = egad.interpret(egad.trace(gnmt_lite.predict_tokens, params, src, tgt), params, src, tgt)
    want = gnmt_lite.reference_predict_tokens(params, src, tgt)
    assert predicted.shape == tgt.shape
    assert gnmt_lite.token_accuracy(predicted, want) == 1.0


# --- the gradient ----------------------------------------------------------------------------


def _along(params, direction, t):
    return {name: value + t * direction[name] if name in direction else value for name, value in params.items()}


def _directional_checks(config, directions):
    """(AD, central-difference) directional derivatives of the float64 loss along
    each direction (a dict of arrays like params), and the rounding noise of one
    difference quotient (16 ulps of |loss| / step, as in gradcheck.py)."""
    params, src, tgt = to_float64(_arguments(config, scale=GRADIENT_POINT_SCALE))
    primal = egad.trace(gnmt_lite.loss, params, src, tgt)
    value, (grads,) = egad.interpret(egad.value_and_grad(primal, wrt=(0,)), params, src, tgt)
    np.testing.assert_allclose(value, egad.interpret(primal, params, src, tgt), rtol=1e-12)
    assert set(grads) == set(params) and all(grads[k].shape == params[k].shape for k in params)
    checks = []
    for direction in directions(params):
        ad = sum(float(np.sum(grads[k] * direction[k])) for k in direction)
        numerical = central_difference(
            lambda t, direction=direction: egad.interpret(primal, _along(params, direction, t), src, tgt), (0.0,), 0)
        checks.append((ad, float(numerical)))
    return checks, ROUNDING_ULPS * np.finfo(np.float64).eps * max(1.0, abs(float(value))) / EPS


@pytest.mark.parametrize("config", [TINY, DEEP], ids=lambda c: c.name)
def test_gradient_matches_central_differences_in_random_directions(config):
    def directions(params):
        rng = np.random.default_rng(1)
        for _ in range(3):
            yield {k: rng.standard_normal(v.shape) for k, v in params.items()}

    checks, _ = _directional_checks(config, directions)
    ad, numerical = np.array(checks).T
    np.testing.assert_allclose(ad, numerical, rtol=1e-6)


@pytest.mark.parametrize("config", [TINY, DEEP], ids=lambda c: c.name)
def test_gradient_of_every_parameter_matches_central_differences(config):
    """One random unit direction inside each parameter array, so that no parameter's
    gradient hides behind the larger ones."""
    names = sorted(gnmt_lite.param_shapes(config))

    def directions(params):
        rng = np.random.default_rng(2)
        for name in names:
            d = rng.standard_normal(params[name].shape)
            yield {name: d / np.linalg.norm(d)}

    checks, noise = _directional_checks(config, directions)
    for name, (ad, numerical) in zip(names, checks):
        # measured: |AD - FD| / |FD| <= 2e-5 (tiny's tgt_embed, whose projection is
        # only ~2e-6), <= 2e-6 for every other array
        assert abs(ad - numerical) <= 1e-5 * abs(numerical) + noise, \
            f"{name}: AD {ad!r}, central differences {numerical!r}"


@pytest.mark.slow
def test_gradient_matches_central_differences_entry_by_entry():
    params, src, tgt = to_float64(_arguments(MICRO, scale=GRADIENT_POINT_SCALE))
    check = assert_gradients_match(gnmt_lite.loss, (params, src, tgt), wrt=(0,), context="gnmt_lite micro")
    assert check.compared == sum(v.size for v in params.values())


# --- loops stay loops --------------------------------------------------------------------------


def test_time_loops_are_egad_loops_whose_size_does_not_grow_with_length():
    sizes = []
    for length in (4, 9):
        config = dataclasses.replace(DEEP, length=length)
        args = _arguments(config)
        primal = egad.trace(gnmt_lite.loss, *args)
        gradient = egad.value_and_grad(primal, wrt=(0,))
        # encoder: forward + backward + one per further layer; decoder: one per layer
        assert _loops(primal) == 2 + (config.encoder_layers - 1) + config.decoder_layers
        assert _loops(gradient) >= 2 * _loops(primal)  # each forward loop has a reversed adjoint loop
        sizes.append((count_bindings(primal.region), count_bindings(gradient.region)))
    assert sizes[0] == sizes[1], f"the IR grows with the sequence length: {sizes}"


# --- compiled ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_compiled_value_and_gradient_match_the_interpreter():
    params, src, tgt = _arguments(dataclasses.replace(TINY, length=6))
    primal = egad.trace(gnmt_lite.loss, params, src, tgt)
    value, (grads,) = egad.optimize(primal, wrt=(0,), target="llvm", rules=())(params, src, tgt)
    want_value, (want_grads,) = egad.interpret(egad.value_and_grad(primal, wrt=(0,)), params, src, tgt)
    np.testing.assert_allclose(value, want_value, rtol=1e-4)
    got, want = flatten(grads)[0], flatten(want_grads)[0]
    total = np.sqrt(sum(np.sum(np.square(w, dtype=np.float64)) for w in want))
    for name, g, w in zip(sorted(want_grads), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32, name
        # Attention gradients at init are ~1e-9 of the total and come out of a
        # cancelling softmax sum: float32 rounding alone moves them by ~1e-3
        # relative (the interpreter's own float32 result differs from float64 by
        # that much), so each array is compared relative to itself plus a floor
        # of 1e-6 of the whole gradient.
        error = np.linalg.norm(g.astype(np.float64) - w)
        assert error <= 1e-4 * np.linalg.norm(w.astype(np.float64)) + 1e-6 * total, \
            f"{name}: |compiled - interpreted| = {error:.3g}, |interpreted| = {np.linalg.norm(w):.3g}"

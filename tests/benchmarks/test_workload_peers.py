"""The workload interface of benchmarks/lstm_lm.py and benchmarks/gnmt_lite.py
(benchmarks/workload.py): each case's arguments, and the JAX (lax.scan and
Python-unrolled) and PyTorch losses computing the same loss and gradients as egad's
interpreter in float64, at toy sizes (the suite checks the real sizes itself).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import egad
from benchmarks import gnmt_lite, gnmt_lite_peers, lstm_lm
from benchmarks.workload import as_float64, wrt_of

MICRO = gnmt_lite.Config("micro", vocab=11, hidden=3, encoder_layers=3, decoder_layers=3, length=4, batch=2)
# float32 peers against the float64 interpreter
RTOL = 1e-4


def _reference(loss, args, wrt):
    wide = as_float64(args)
    return egad.interpret(egad.value_and_grad(egad.trace(loss, *wide), wrt=wrt), *wide)


def _jax(loss, args, wrt):
    jax = pytest.importorskip("jax")
    # not jitted: XLA compiling the micro model takes longer than running it op by op
    value, grads = jax.value_and_grad(loss, argnums=wrt)(*args)
    return float(value), [np.asarray(g) for g in grads]


def _torch(loss, args, wrt):
    torch = pytest.importorskip("torch")
    tensors = [torch.from_numpy(np.array(a)) for a in args]
    for k in wrt:
        tensors[k].requires_grad_(True)
    value = loss(*tensors)
    grads = torch.autograd.grad(value, [tensors[k] for k in wrt])
    return float(value.detach()), [g.numpy() for g in grads]


def _assert_close(got, want):
    value, grads = got
    want_value, want_grads = want
    np.testing.assert_allclose(value, want_value, rtol=RTOL)
    assert len(grads) == len(want_grads)
    for k, (g, w) in enumerate(zip(grads, want_grads)):
        assert g.shape == w.shape, k
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * np.max(np.abs(w)), err_msg=f"gradient {k}")


def test_lstm_lm_cases_and_their_arguments():
    assert list(lstm_lm.CASES) == ["T16", "T64", "T256", "T1024"]
    args = lstm_lm.arguments("T16")
    assert args[9].shape == (16, 32, 128) and args[0].shape == (128, 256) and args[4].shape == (256, 256)
    assert all(a.dtype == np.float32 for a in args)
    for a, b in zip(args, lstm_lm.arguments(16)):  # a case name or a length, the same arrays
        np.testing.assert_array_equal(a, b)
    assert lstm_lm.wrt("T64") == lstm_lm.WRT == tuple(range(9))
    with pytest.raises(ValueError, match="no case 'T17'"):
        lstm_lm.loss("T17")


PEERS = {"jax-scan": ("jax_loss", _jax), "jax-unrolled": ("jax_unrolled_loss", _jax),
         "torch-eager": ("torch_loss", _torch)}


@functools.cache
def _lstm_reference():
    args = lstm_lm.arguments(3, batch=2, inputs=3, hidden=4)
    return args, _reference(lstm_lm.loss("T16"), args, lstm_lm.WRT)


def test_lstm_lm_interpreted_in_float64_matches_numpy():
    args, (value, _) = _lstm_reference()
    np.testing.assert_allclose(value, lstm_lm.reference_loss("T16")(*as_float64(args)), rtol=1e-12)


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_lstm_lm_peers_match_egad(peer):
    pytest.importorskip(peer.split("-")[0])  # before the loss is made: making it imports the peer
    args, want = _lstm_reference()
    name, run = PEERS[peer]
    _assert_close(run(getattr(lstm_lm, name)("T16"), args, lstm_lm.WRT), want)


def test_gnmt_lite_cases_take_flat_arguments():
    args = gnmt_lite.arguments("tiny")
    names = sorted(gnmt_lite.param_shapes("tiny"))
    assert len(args) == len(names) + 2 and gnmt_lite.wrt("tiny") == tuple(range(len(names)))
    params = gnmt_lite.init_params("tiny")
    for name, value in zip(names, args):
        np.testing.assert_array_equal(value, params[name])
    src, tgt = gnmt_lite.make_batch("tiny")
    np.testing.assert_array_equal(args[-2], src)
    np.testing.assert_array_equal(args[-1], tgt)
    assert gnmt_lite.reference_loss("tiny")(*args) == pytest.approx(gnmt_lite.reference_loss(params, src, tgt))
    assert wrt_of(gnmt_lite, "small") == gnmt_lite.wrt("small")


@pytest.mark.parametrize("peer", [pytest.param("jax-scan", marks=pytest.mark.slow),  # ~6-20 s of XLA compiles
                                  pytest.param("jax-unrolled", marks=pytest.mark.slow), "torch-eager"])
def test_gnmt_lite_peers_match_egad(peer):
    """The peers' model (gnmt_lite_peers) on a micro config with every topology feature
    (bidirectional layer, residual layers >= 2 on both sides, attention)."""
    params = {k: v * 10 for k, v in gnmt_lite.init_params(MICRO, seed=1).items()}  # attention far from uniform
    names = sorted(params)
    src, tgt = gnmt_lite.make_batch(MICRO, seed=1)
    args = (*(params[k] for k in names), src, tgt)
    wrt = tuple(range(len(names)))

    def flat(loss):
        return lambda *a: loss(dict(zip(names, a[:len(names)])), *a[len(names):])

    want = _reference(flat(gnmt_lite.loss), args, wrt)
    if peer == "torch-eager":
        ops = (pytest.importorskip("torch"), gnmt_lite_peers.torch_ops())[1]
        got = _torch(flat(lambda p, s, t: gnmt_lite_peers.loss(ops, p, s, t, 3, 3)), args, wrt)
    else:
        pytest.importorskip("jax")
        ops = gnmt_lite_peers.jax_ops(structured=peer == "jax-scan")
        got = _jax(flat(lambda p, s, t: gnmt_lite_peers.loss(ops, p, s, t, 3, 3)), args, wrt)
    _assert_close(got, want)

"""GNMT-lite: a scaled-down GNMT-v2 seq2seq model written with egad, and the same
math in plain numpy as its reference.

Topology (GNMT v2 as in the MLPerf reference, scaled down; time-major inside):

- Embeddings: `src_embed` and `tgt_embed`, (vocab, hidden), looked up with `enp.take`.
- Encoder: layer 0 is bidirectional — a forward LSTM and a backward LSTM (a
  `reverse=True` scan) over the source, their outputs *concatenated*, so layer 1
  reads 2*hidden features; layers 1.. are forward LSTMs of `hidden` units, and from
  layer 2 on a layer's input is added to its output (residual).
- Decoder, teacher-forced: the input at step t is the embedding of target token t-1,
  BOS = 0 first. Layer 0's scan also computes normalized Bahdanau attention from its
  own output h_t at each step:

      score[s] = g * v·tanh(W1 enc[s] + W2 h_t + b) / ||v||,  p = softmax_s(score),
      context_t = sum_s p[s] enc[s]

  (`enc` is the top encoder layer's output; `W1 enc` is computed once, outside the
  loop). Every following layer reads `concat(x_t, context_t)` (2*hidden), and from
  layer 2 on adds its input x_t to its output (residual). As in MLPerf's GNMT the
  attention is not fed back into layer 0 (no input feeding).
- Output: logits = top decoder output @ out_W + out_b, softmax cross-entropy against
  the target tokens, mean over all (batch, time) tokens.

Every recurrence is an `egad.scan` over time (never unrolled); the loops over layers
are Python loops, since the layer counts are static. Each LSTM step is
`benchmarks/lstm.py`'s cell (one fused gate matmul split by static slices).

The synthetic task of `make_batch` is sequence reversal: tgt = src[:, ::-1], tokens
in [1, vocab) (0 is BOS). Measured: `tiny` trained with Adam (lr 3e-3, a fresh batch
of 8 per step, interpreted gradients) falls slowly from log(vocab) = 6.2 to 5.6 over
the first ~1500 steps, while the attention, nearly uniform at this initialisation,
sharpens; then token accuracy (on 64 held-out sequences) climbs to 95.8% at step 2700
and 96.5% at 3000 (~3 minutes on one core).

For `benchmarks/suite.py` the module also has the workload interface of
benchmarks/workload.py: cases are the configs, `arguments(case)` is the parameters
flat in sorted name order (egad's dict order) then src and tgt, `loss(case)` and
`reference_loss(case)` take them flat, and `jax_loss`, `jax_unrolled_loss` and
`torch_loss` run the same math (benchmarks/gnmt_lite_peers.py).

Example:

    config = CONFIGS["tiny"]
    params = init_params(config, seed=0)
    src, tgt = make_batch(config, seed=0)
    program = egad.trace(loss, params, src, tgt)
    value, (grads,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)), params, src, tgt)
"""
from __future__ import annotations

import dataclasses

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp
from benchmarks import gnmt_lite_peers
from benchmarks.lstm import cell
from benchmarks.workload import case_or_call, check_case

BOS = 0
INIT_SCALE = 0.1  # GNMT's uniform(-0.1, 0.1) initialisation


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes of one GNMT-lite instance; `length` is both the source and target length."""

    name: str
    vocab: int
    hidden: int
    encoder_layers: int
    decoder_layers: int
    length: int
    batch: int

    def __post_init__(self):
        if self.encoder_layers < 2 or self.decoder_layers < 2:
            raise ValueError("GNMT-lite needs >= 2 encoder layers (bidirectional + 1) and >= 2 decoder layers "
                             "(attention + 1)")


CONFIGS = {
    "tiny": Config("tiny", vocab=512, hidden=64, encoder_layers=2, decoder_layers=2, length=12, batch=8),
    "small": Config("small", vocab=2048, hidden=128, encoder_layers=2, decoder_layers=2, length=24, batch=32),
    "bench": Config("bench", vocab=4096, hidden=256, encoder_layers=4, decoder_layers=4, length=32, batch=32),
}


def _config(config) -> Config:
    return CONFIGS[config] if isinstance(config, str) else config


# --- parameters and data -----------------------------------------------------------------


def _lstm_shapes(prefix: str, inputs: int, hidden: int) -> dict[str, tuple]:
    return {f"{prefix}.Wx": (inputs, 4 * hidden), f"{prefix}.Wh": (hidden, 4 * hidden), f"{prefix}.b": (4 * hidden,)}


def param_shapes(config) -> dict[str, tuple]:
    """The name and shape of every parameter (the keys of `init_params`' dict)."""
    config = _config(config)
    V, H = config.vocab, config.hidden
    shapes = {"src_embed": (V, H), "tgt_embed": (V, H)}
    shapes.update(_lstm_shapes("encoder.0.forward", H, H))
    shapes.update(_lstm_shapes("encoder.0.backward", H, H))
    shapes.update(_lstm_shapes("encoder.1", 2 * H, H))
    for layer in range(2, config.encoder_layers):
        shapes.update(_lstm_shapes(f"encoder.{layer}", H, H))
    shapes.update(_lstm_shapes("decoder.0", H, H))
    shapes.update({"attention.W1": (H, H), "attention.W2": (H, H), "attention.b": (H,), "attention.v": (H,),
                   "attention.g": ()})
    for layer in range(1, config.decoder_layers):
        shapes.update(_lstm_shapes(f"decoder.{layer}", 2 * H, H))
    shapes.update({"out_W": (H, V), "out_b": (V,)})
    return shapes


def init_params(config, seed: int = 0) -> dict[str, np.ndarray]:
    """A flat dict of float32 arrays: uniform(-0.1, 0.1) as in GNMT, except the
    attention bias (0) and the attention scale g (1/sqrt(hidden), as in TF/MLPerf)."""
    config = _config(config)
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        params[name] = rng.uniform(-INIT_SCALE, INIT_SCALE, shape).astype(np.float32)
    params["attention.b"] = np.zeros(config.hidden, np.float32)
    params["attention.g"] = np.asarray(config.hidden ** -0.5, np.float32)
    return params


def make_batch(config, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(src, tgt), int64 arrays of shape (batch, length) for the reversal task:
    tokens uniform in [1, vocab), tgt = src reversed along time."""
    config = _config(config)
    rng = np.random.default_rng(seed)
    src = rng.integers(1, config.vocab, size=(config.batch, config.length), dtype=np.int64)
    return src, np.ascontiguousarray(src[:, ::-1])


# --- the model, with egad ops ---------------------------------------------------------------


def _lstm_layer(params, prefix: str, xs, reverse: bool = False):
    """The hidden states (T, B, H) of one LSTM over xs (T, B, I), zero initial state."""
    Wx, Wh, b = params[f"{prefix}.Wx"], params[f"{prefix}.Wh"], params[f"{prefix}.b"]
    zeros = enp.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype)

    def step(hc, x):
        h, c = cell(Wx, Wh, b, x, *hc)
        return (h, c), h

    _, hs = egad.scan(step, (zeros, zeros), xs, reverse=reverse)
    return hs


def encode(params, src, encoder_layers: int):
    """The top encoder layer's outputs (S, B, H) for src (B, S)."""
    xs = enp.take(params["src_embed"], enp.transpose(src), axis=0)  # (S, B, H)
    forward = _lstm_layer(params, "encoder.0.forward", xs)
    backward = _lstm_layer(params, "encoder.0.backward", xs, reverse=True)
    xs = _lstm_layer(params, "encoder.1", enp.concatenate([forward, backward], axis=-1))
    for layer in range(2, encoder_layers):
        xs = _lstm_layer(params, f"encoder.{layer}", xs) + xs
    return xs


def _attention_layer(params, xs, encoded):
    """Decoder layer 0 over xs (T, B, H) and the attention its output h_t computes at
    every step: ((T, B, H) outputs, (T, B, H) contexts)."""
    Wx, Wh, b = params["decoder.0.Wx"], params["decoder.0.Wh"], params["decoder.0.b"]
    W2, bias, v = params["attention.W2"], params["attention.b"], params["attention.v"]
    keys = encoded @ params["attention.W1"]  # (S, B, H): loop-invariant, projected once
    v_normed = params["attention.g"] * v / enp.sqrt(enp.sum(v * v))
    zeros = enp.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype)

    def step(hc, x):
        h, c = cell(Wx, Wh, b, x, *hc)
        scores = enp.tanh(keys + (h @ W2 + bias)) @ v_normed  # (S, B)
        weights = enn.softmax(scores, axis=0)
        context = enp.sum(weights[:, :, None] * encoded, axis=0)  # (B, H)
        return (h, c), (h, context)

    _, (hs, contexts) = egad.scan(step, (zeros, zeros), xs)
    return hs, contexts


def layer_counts(params) -> tuple[int, int]:
    """(encoder layers, decoder layers) of a parameter dict (layer 0 of the encoder
    holds two LSTMs, forward and backward)."""
    lstms = [name.split(".")[0] for name in params if name.endswith(".Wx")]
    return lstms.count("encoder") - 1, lstms.count("decoder")


def decoder_inputs(tgt):
    """Teacher forcing: the time-major (T, B) decoder input tokens, BOS then tgt[:, :-1]."""
    tgt_major = enp.transpose(tgt)
    bos = np.full((1, tgt.shape[0]), BOS, np.int64)
    return enp.concatenate([bos, tgt_major[:-1]], axis=0)


def logits(params, src, tgt):
    """Teacher-forced logits, time-major: (T, B, vocab)."""
    encoder_layers, decoder_layers = layer_counts(params)
    encoded = encode(params, src, encoder_layers)
    xs = enp.take(params["tgt_embed"], decoder_inputs(tgt), axis=0)  # (T, B, H)
    xs, contexts = _attention_layer(params, xs, encoded)
    for layer in range(1, decoder_layers):
        out = _lstm_layer(params, f"decoder.{layer}", enp.concatenate([xs, contexts], axis=-1))
        xs = out + xs if layer >= 2 else out
    return xs @ params["out_W"] + params["out_b"]


def _flat_loss_of_case(case: str):
    return _flat(case, loss)


@case_or_call(_flat_loss_of_case)
def loss(params, src, tgt):
    """Mean softmax cross-entropy of the teacher-forced predictions of tgt (B, T).
    `loss(case)` is this loss of the flat `arguments(case)` (the suite's interface)."""
    logp = enn.log_softmax(logits(params, src, tgt), axis=-1)
    picked = enp.sum(enn.one_hot(enp.transpose(tgt), logp.shape[-1], dtype=logp.dtype) * logp, axis=-1)
    return -enp.mean(picked)


def predict_tokens(params, src, tgt):
    """The argmax tokens (B, T) under teacher forcing (egad ops; runs eagerly on numpy)."""
    return enp.transpose(enp.argmax(logits(params, src, tgt), axis=-1))


def token_accuracy(predicted, tgt) -> float:
    """The fraction of target tokens predicted exactly."""
    return float(np.mean(np.asarray(predicted) == np.asarray(tgt)))


# --- the same math in plain numpy -------------------------------------------------------------


def _np_sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1)


def _np_cell(params, prefix, x, h, c):
    H = h.shape[1]
    z = x @ params[f"{prefix}.Wx"] + h @ params[f"{prefix}.Wh"] + params[f"{prefix}.b"]
    i, f, g, o = _np_sigmoid(z[:, :H]), _np_sigmoid(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), _np_sigmoid(z[:, 3 * H:])
    c = f * c + i * g
    return o * np.tanh(c), c


def _np_lstm(params, prefix, xs, reverse=False):
    T, B = xs.shape[:2]
    H = params[f"{prefix}.Wh"].shape[0]
    h = c = np.zeros((B, H), xs.dtype)
    hs = np.zeros((T, B, H), xs.dtype)
    for t in (reversed(range(T)) if reverse else range(T)):
        h, c = _np_cell(params, prefix, xs[t], h, c)
        hs[t] = h
    return hs


def _np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def reference_logits(params, src, tgt):
    """`logits` in plain numpy, one Python loop iteration per time step."""
    params = {k: np.asarray(v) for k, v in params.items()}
    enc_layers, dec_layers = layer_counts(params)
    xs = params["src_embed"][src.T]
    xs = np.concatenate([_np_lstm(params, "encoder.0.forward", xs),
                         _np_lstm(params, "encoder.0.backward", xs, reverse=True)], axis=-1)
    xs = _np_lstm(params, "encoder.1", xs)
    for layer in range(2, enc_layers):
        xs = _np_lstm(params, f"encoder.{layer}", xs) + xs
    encoded = xs

    dec_in = np.concatenate([np.full((1, tgt.shape[0]), BOS, np.int64), tgt.T[:-1]], axis=0)
    xs = params["tgt_embed"][dec_in]
    T, B, H = xs.shape
    keys = encoded @ params["attention.W1"]
    v = params["attention.v"]
    v_normed = params["attention.g"] * v / np.sqrt(np.sum(v * v))
    h = c = np.zeros((B, H), xs.dtype)
    hs, contexts = np.zeros_like(xs), np.zeros_like(xs)
    for t in range(T):
        h, c = _np_cell(params, "decoder.0", xs[t], h, c)
        weights = _np_softmax(np.tanh(keys + h @ params["attention.W2"] + params["attention.b"]) @ v_normed, axis=0)
        hs[t], contexts[t] = h, np.sum(weights[:, :, None] * encoded, axis=0)
    xs = hs
    for layer in range(1, dec_layers):
        out = _np_lstm(params, f"decoder.{layer}", np.concatenate([xs, contexts], axis=-1))
        xs = out + xs if layer >= 2 else out
    return xs @ params["out_W"] + params["out_b"]


def _flat_reference_of_case(case: str):
    return _flat(case, reference_loss)


@case_or_call(_flat_reference_of_case)
def reference_loss(params, src, tgt):
    """`loss` in plain numpy (`reference_loss(case)` takes the flat arguments)."""
    z = reference_logits(params, src, tgt)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, tgt.T[:, :, None], axis=-1)[..., 0]
    return -np.mean(picked)


def reference_predict_tokens(params, src, tgt):
    """`predict_tokens` in plain numpy."""
    return np.argmax(reference_logits(params, src, tgt), axis=-1).T


# --- the workload interface of benchmarks/suite.py ---------------------------------------------

NAME = "gnmt_lite"
CASES = CONFIGS


def arguments(case: str, seed: int = 0) -> tuple:
    """The parameters of `init_params` in sorted name order (as egad flattens the
    dict), then src and tgt of `make_batch`."""
    params = init_params(CONFIGS[check_case(NAME, CASES, case)], seed)
    return (*(params[name] for name in sorted(params)), *make_batch(case, seed))


def wrt(case: str) -> tuple[int, ...]:
    """Every parameter (not the tokens)."""
    return tuple(range(len(param_shapes(CONFIGS[check_case(NAME, CASES, case)]))))


def _flat(case: str, model_loss):
    """`model_loss(params, src, tgt)` as a function of `arguments(case)`."""
    names = sorted(param_shapes(CONFIGS[check_case(NAME, CASES, case)]))

    def flat_loss(*flat):
        return model_loss(dict(zip(names, flat[:len(names)])), *flat[len(names):])

    return flat_loss


def _peer_loss(case: str, ops):
    config = CONFIGS[check_case(NAME, CASES, case)]
    return _flat(case, lambda params, src, tgt: gnmt_lite_peers.loss(
        ops, params, src, tgt, config.encoder_layers, config.decoder_layers))


def jax_loss(case: str):
    """`loss` in JAX, each time loop a `lax.scan`."""
    return _peer_loss(case, gnmt_lite_peers.jax_ops(structured=True))


def jax_unrolled_loss(case: str):
    """`loss` in JAX, each time loop a Python loop."""
    return _peer_loss(case, gnmt_lite_peers.jax_ops(structured=False))


def torch_loss(case: str):
    """`loss` in eager PyTorch, each time loop a Python loop."""
    return _peer_loss(case, gnmt_lite_peers.torch_ops())

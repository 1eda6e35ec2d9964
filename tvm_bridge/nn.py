"""Lowering of softmax, log_softmax, logsumexp, top_k."""
from __future__ import annotations

from tvm import relax

from .registry import lowers

R = relax.op


@lowers("softmax")
def _softmax(bb, args, attrs, binding):
    return R.nn.softmax(args[0], axis=attrs["axis"])


@lowers("log_softmax")
def _log_softmax(bb, args, attrs, binding):
    return R.nn.log_softmax(args[0], axis=attrs["axis"])


@lowers("logsumexp")
def _logsumexp(bb, args, attrs, binding):
    axes = list(attrs["axes"])
    peak = bb.emit(R.max(args[0], axis=axes, keepdims=True))
    summed = R.log(R.sum(R.exp(R.subtract(args[0], peak)), axis=axes, keepdims=True))
    result = bb.emit(R.add(summed, peak))
    return result if attrs["keepdims"] else R.squeeze(result, axis=axes)


@lowers("top_k")
def _top_k(bb, args, attrs, binding):
    pair = bb.emit(R.topk(args[0], k=attrs["k"], axis=-1, ret_type="both", largest=True, dtype="int64"))
    return relax.TupleGetItem(pair, 0), relax.TupleGetItem(pair, 1)

"""Lowering of softmax, log_softmax, logsumexp, top_k."""
from __future__ import annotations

from tvm import relax

from .elementwise import exp_of
from .registry import lowers

R = relax.op


# Written out (not R.nn.softmax / log_softmax) so that float32 exp is the vectorized
# polynomial (tvm_bridge/elementwise.py): TVM's ops call libm once per element.


def _shifted_exp(bb, x, axes: list[int], dtype: str):
    """(x - max(x), exp(x - max(x))) over `axes`: every exponent <= 0, nothing overflows."""
    shifted = bb.emit(R.subtract(x, bb.emit(R.max(x, axis=axes, keepdims=True))))
    return shifted, bb.emit(exp_of(bb, shifted, dtype))


@lowers("softmax")
def _softmax(bb, args, attrs, binding):
    axes = [attrs["axis"]]
    _, exp = _shifted_exp(bb, args[0], axes, binding.inputs[0].type.dtype)
    return R.divide(exp, R.sum(exp, axis=axes, keepdims=True))


@lowers("log_softmax")
def _log_softmax(bb, args, attrs, binding):
    axes = [attrs["axis"]]
    shifted, exp = _shifted_exp(bb, args[0], axes, binding.inputs[0].type.dtype)
    return R.subtract(shifted, R.log(R.sum(exp, axis=axes, keepdims=True)))


@lowers("logsumexp")
def _logsumexp(bb, args, attrs, binding):
    axes = list(attrs["axes"])
    dtype = binding.inputs[0].type.dtype
    peak = bb.emit(R.max(args[0], axis=axes, keepdims=True))
    # as the interpreter (egad/ir/ops.py): an infinite peak is not subtracted (inf - inf)
    peak = bb.emit(R.where(R.isfinite(peak), peak, relax.const(0, dtype)))
    exp = bb.emit(exp_of(bb, R.subtract(args[0], peak), dtype))
    result = bb.emit(R.add(R.log(R.sum(exp, axis=axes, keepdims=True)), peak))
    return result if attrs["keepdims"] else R.squeeze(result, axis=axes)


@lowers("top_k")
def _top_k(bb, args, attrs, binding):
    pair = bb.emit(R.topk(args[0], k=attrs["k"], axis=-1, ret_type="both", largest=True, dtype="int64"))
    return relax.TupleGetItem(pair, 0), relax.TupleGetItem(pair, 1)

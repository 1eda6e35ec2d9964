"""Lowering of softmax, log_softmax, logsumexp, top_k."""
from __future__ import annotations

from tvm import relax, te, tirx

from .elementwise import exp_of, exp_te
from .host_checks import check_long_enough
from .registry import lowers

R = relax.op


# Written out (not R.nn.softmax / log_softmax) so that float32 exp is the vectorized
# polynomial (tvm_bridge/elementwise.py): TVM's ops call libm once per element. Each is
# one function (max, exp, sum, scale), so a softmax over a few experts per token is one
# kernel launch, not four.


@lowers("softmax", "log_softmax")
def _softmax(bb, args, attrs, binding):
    return bb.emit_te(_softmax_along, args[0], attrs["axis"], binding.op == "log_softmax",
                      primfunc_name_hint=binding.op)


def _softmax_along(x, axis: int, log: bool):
    """softmax (or log_softmax) of x along `axis`, shifted by the maximum so that no
    exponent is positive."""
    rank = len(x.shape)
    axis = axis % rank
    outer_shape = [d for k, d in enumerate(x.shape) if k != axis]

    def outer(position):  # x's position without the softmax axis
        return [p for k, p in enumerate(position) if k != axis]

    def at(outer_position, k):  # the position along the softmax axis of an outer position
        return [*outer_position[:axis], k, *outer_position[axis:]]

    k = te.reduce_axis((0, x.shape[axis]), name="k")
    peak = te.compute(outer_shape, lambda *o: te.max(x(*at(o, k)), axis=k), name="peak")
    shifted = te.compute(x.shape, lambda *i: x(*i) - peak(*outer(i)), name="shifted")
    exp = exp_te(shifted)
    j = te.reduce_axis((0, x.shape[axis]), name="j")
    total = te.compute(outer_shape, lambda *o: te.sum(exp(*at(o, j)), axis=j), name="total")
    if log:
        return te.compute(x.shape, lambda *i: shifted(*i) - tirx.log(total(*outer(i))), name="log_softmax")
    return te.compute(x.shape, lambda *i: exp(*i) / total(*outer(i)), name="softmax")


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
    x, k = args[0], attrs["k"]
    check_long_enough(bb, x, binding, k)  # TVM's topk reads past a last axis shorter than k
    if binding.inputs[0].type.dtype not in _ORDER_KEY_DTYPES:
        pair = bb.emit(R.topk(x, k=k, axis=-1, ret_type="both", largest=True, dtype="int64"))
        return relax.TupleGetItem(pair, 0), relax.TupleGetItem(pair, 1)
    # TVM's topk compares with `>`, which a NaN breaks (values out of order, the largest
    # dropped): it sorts integer keys in the floats' total order instead, NaN above +inf
    # (as jax, torch and numpy's sort), -0.0 equal to 0.0 (ties keep the lower index)
    key = bb.emit_te(_order_key, x, primfunc_name_hint="top_k_key")
    indices = bb.emit(R.topk(key, k=k, axis=-1, ret_type="indices", largest=True, dtype="int64"))
    return R.gather_elements(x, indices, axis=-1), indices


_ORDER_KEY_DTYPES = {"float32": "int32", "float64": "int64"}


def _order_key(x):
    """An integer per float, ordered as the floats are, with every NaN above +inf: the
    bits of a non-negative float order as it does, a negative one's with its magnitude
    bits flipped."""
    bits = _ORDER_KEY_DTYPES[str(x.dtype)]
    flip = tirx.const((1 << (int(bits[3:]) - 1)) - 1, bits)

    def key(*i):
        v = x(*i)
        canonical = tirx.Select(tirx.isnan(v), tirx.const(float("nan"), x.dtype),
                                tirx.Select(v == tirx.const(0, x.dtype), tirx.const(0, x.dtype), v))
        b = tirx.reinterpret(bits, canonical)
        return tirx.Select(b >= tirx.const(0, bits), b, tirx.bitwise_xor(b, flip))

    return te.compute(x.shape, key, name="order_key")

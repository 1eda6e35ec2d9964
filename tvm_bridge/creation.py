"""Lowering of const, full, iota."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .registry import lowers
from .shape import target_shape

R = relax.op


@lowers("const")
def _const(bb, args, attrs, binding):
    value = attrs["value"]
    if value.size > 1 and _is_splat(value):
        # reverse mode starts every weight's gradient from a zero splat: R.full keeps
        # megabytes of equal values out of the executable and the build cache
        return R.full(value.shape, relax.const(value.flat[0], value.dtype.name), value.dtype.name)
    return relax.const(np.array(value, order="C"), value.dtype.name)  # ascontiguousarray would make 0-d 1-d


def _is_splat(value: np.ndarray) -> bool:
    """All elements bit-identical to the first (so -0.0 and NaN payloads are kept)."""
    return np.full(value.shape, value.flat[0], value.dtype).tobytes() == np.ascontiguousarray(value).tobytes()


@lowers("full")
def _full(bb, args, attrs, binding):
    shape = target_shape(bb, attrs["shape"], args)
    return R.full(shape, relax.const(attrs["value"], attrs["dtype"]), attrs["dtype"])


@lowers("iota")
def _iota(bb, args, attrs, binding):
    shape = target_shape(bb, attrs["shape"], args)
    axis = attrs["axis"]
    line = bb.emit(R.arange(0, shape[axis], 1, attrs["dtype"]))
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return R.broadcast_to(R.reshape(line, view), shape)

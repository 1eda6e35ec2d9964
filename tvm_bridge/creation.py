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
    return relax.const(np.array(value, order="C"), value.dtype.name)  # ascontiguousarray would make 0-d 1-d


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

"""Lowering of const, full, iota."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .host_checks import check_shape_fits
from .registry import lowers
from .shape import target_shape

R = relax.op


@lowers("const")
def _const(bb, args, attrs, binding):
    value = attrs["value"]
    if value.size > 1 and _is_splat(value):
        # reverse mode starts every weight's gradient from a zero splat: R.full keeps
        # megabytes of equal values out of the executable and the build cache
        return filled(value.shape, value.flat[0], value.dtype.name)
    return relax.const(np.array(value, order="C"), value.dtype.name)  # ascontiguousarray would make 0-d 1-d


def _is_splat(value: np.ndarray) -> bool:
    """All elements bit-identical to the first (so -0.0 and NaN payloads are kept)."""
    return np.full(value.shape, value.flat[0], value.dtype).tobytes() == np.ascontiguousarray(value).tobytes()


@lowers("full")
def _full(bb, args, attrs, binding):
    check_shape_fits(bb, binding, args)
    return filled(target_shape(bb, attrs["shape"], args), attrs["value"], attrs["dtype"])


def filled(shape, value, dtype: str):
    """R.full(shape, value), also for inf and NaN: TVM 0.27's legalization of full
    raises on a non-finite value (topi.full tests `"float" in dtype` on a PrimType), so
    those are 0 + value, which the fused kernel computes once per element."""
    if np.isfinite(value):
        return R.full(shape, relax.const(value, dtype), dtype)
    return R.add(R.full(shape, relax.const(0, dtype), dtype), relax.const(value, dtype))


@lowers("iota")
def _iota(bb, args, attrs, binding):
    check_shape_fits(bb, binding, args)
    shape = target_shape(bb, attrs["shape"], args)
    axis = attrs["axis"]
    line = bb.emit(R.arange(0, shape[axis], 1, attrs["dtype"]))
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return R.broadcast_to(R.reshape(line, view), shape)

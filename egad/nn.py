"""`egad.nn`: neural-network helpers with jax.nn's names and semantics."""
from __future__ import annotations

import numpy as np

from .errors import ShapeError, message
from .frontend import numpy_api as enp
from .frontend.primitives import apply, apply1, cast_to, dtype_of, is_tracer
from .ir import shapes
from .ir.types import is_float
from .source import user_location


def _float(x):
    """x as a float (ints become float64, as numpy's float functions do)."""
    dtype, weak = dtype_of(x)
    return cast_to(x, dtype if is_float(dtype) else "float64", weak)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed stably."""
    return apply1("sigmoid", [_float(x)])


def relu(x):
    """max(x, 0), with gradient 0 at 0 (as jax.nn.relu and torch; `maximum` splits a
    tie's gradient, 0.5 each); NaN stays NaN."""
    return enp.where(enp.less_equal(x, 0), 0, x)


def _axis(x, axis: int) -> int:
    return shapes.normalize_axis(axis, enp.ndim(x))


def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability."""
    x = _float(x)
    return apply1("softmax", [x], {"axis": _axis(x, axis)})


def log_softmax(x, axis: int = -1):
    """x - logsumexp(x) along `axis`."""
    x = _float(x)
    return apply1("log_softmax", [x], {"axis": _axis(x, axis)})


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) over `axis` (all axes when None), computed stably."""
    x = _float(x)
    axes = shapes.normalize_axes(axis, enp.ndim(x))
    return apply1("logsumexp", [x], {"axes": axes, "keepdims": bool(keepdims)})


def one_hot(x, num_classes: int, dtype="float64"):
    """`one_hot(x, n)[..., k] = (x[...] == k)`; out-of-range indices give all-zero rows."""
    classes = enp.arange(num_classes)
    return enp.astype(enp.equal(enp.expand_dims(x, -1), classes), dtype)


def top_k(x, k: int):
    """The k largest entries along the last axis, descending, and their int64
    indices (ties: lower index first), as jax.lax.top_k."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ShapeError(message(f"top_k's k must be a Python int, got {k!r}", where=user_location().long(),
                                 instead="pass k as a static Python int"))
    values, indices = apply("top_k", [x if is_tracer(x) else np.asarray(x)], {"k": int(k)})
    return values, indices


__all__ = ["sigmoid", "relu", "softmax", "log_softmax", "logsumexp", "one_hot", "top_k"]

"""The math VJP rules are written in: egad.numpy plus a few adjoint helpers.

A VJP (egad/ir/ops.py) receives an `AdjointMath` as `ad` and writes formulas such as
`g * (1 - y * y)`; the arithmetic is traced into the adjoint region like any user
code, so the adjoint is ordinary IR, checked by the same verifier.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import UnsupportedError, message
from ..frontend import numpy_api
from ..frontend.primitives import apply1, is_tracer


@dataclasses.dataclass
class SparseRows:
    """A cotangent that is zero except for rows `index` along `axis` (the VJP of take).

    Kept sparse while it flows into a loop-invariant array, so that the loop emits
    the rows as per-step outputs and one scatter-add after the loop updates the
    array (not a dense update of the whole array every step: O(T·|X|))."""

    like: object  # the primal array (for its shape and dtype)
    index: object
    values: object
    axis: int

    def densify(self):
        return apply1("index_add", [numpy_api.zeros_like(self.like), self.index, self.values], {"axis": self.axis})


def _static_shape(x) -> tuple:
    """x's shape as its type holds it: ints, and symbols for dims known at run time."""
    return x.type.shape if is_tracer(x) else np.shape(x)


class AdjointMath:
    """egad.numpy, plus the helpers VJP formulas need. `binding` is the binding whose
    VJP is being built, for error messages."""

    def __init__(self):
        self.binding = None

    def __getattr__(self, name):
        return getattr(numpy_api, name)

    def size_of(self, x, axis: int):
        """x's size along `axis`: an int, or a traced scalar where the dim is symbolic."""
        return numpy_api.dim_size(x, axis)

    def one_hot(self, index, depth, dtype):
        from .. import nn

        return nn.one_hot(index, depth, dtype=dtype)

    def cumsum_along(self, g, axis: int, reverse: bool):
        """The running sums of g along `axis`, from its last element when `reverse`
        (egad.numpy's cumsum has numpy's signature, which has no direction)."""
        return apply1("cumsum", [g], {"axis": axis, "reverse": reverse})

    def unsupported(self, what: str):
        where = f"op {self.binding.op!r} at {self.binding.loc.long()}" if self.binding is not None else None
        raise UnsupportedError(message(f"{what} is not supported", where=where,
                                       instead="rewrite this step with ops that have gradients (see docs/ad.md)"))

    def unbroadcast(self, g, x):
        """g summed down to x's shape: over leading axes x lacks and axes where x has 1."""
        target, have = _static_shape(x), _static_shape(g)
        lead = len(have) - len(target)
        axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(target) if d == 1 and have[lead + k] != 1)
        if axes:
            g = numpy_api.sum(g, axis=axes, keepdims=True)
            if lead:
                g = numpy_api.reshape(g, (numpy_api.shape(g))[lead:])
        return g

    def expand_reduced(self, g, x, axes, keepdims: bool):
        """A reduction's cotangent (or result) broadcast back to the reduced array x."""
        if not keepdims:
            g = numpy_api.expand_dims(g, tuple(axes)) if axes else g
        return numpy_api.broadcast_to(g, numpy_api.shape(x))

    def expand_to_term(self, partial, kept: str, term: str, x):
        """einsum's cotangent over axes `kept`, as an array over `term` (x's axes)."""
        ordered = numpy_api.einsum(f"{kept}->{''.join(c for c in term if c in kept)}", partial) \
            if kept != "".join(c for c in term if c in kept) else partial
        missing = tuple(k for k, c in enumerate(term) if c not in kept)
        if missing:
            ordered = numpy_api.expand_dims(ordered, missing)
        # an index x holds at size 1 that another operand holds at n was broadcast: its cotangent sums
        broadcast = tuple(k for k, (mine, theirs) in enumerate(zip(_static_shape(x), _static_shape(ordered)))
                          if mine == 1 and theirs != 1)  # dims as types hold them: ints, or symbols ("T")
        if broadcast:
            ordered = numpy_api.sum(ordered, axis=broadcast, keepdims=True)
        return numpy_api.broadcast_to(ordered, numpy_api.shape(x))

    def unslice(self, g, x, index):
        """The cotangent of x[index] for a static slice: g written into zeros like x,
        one axis at a time with a scatter-add (reversed back where a whole axis was)."""
        shape = list(x.type.shape)
        current = g
        for axis, (start, stop, step) in enumerate(index):
            if (start, stop, step) in ((None, None, None), (None, None, 1), (0, None, None), (0, None, 1)):
                continue
            if (start, stop, step) == (None, None, -1):  # every element, reversed: reversed back, no scatter
                reverse = tuple((None, None, -1) if k == axis else (None, None, None) for k in range(len(shape)))
                current = apply1("slice", [current], {"index": reverse})
                continue
            size = shape[axis]
            if isinstance(size, int):
                rows = np.arange(size)[slice(start, stop, step)].astype("int64")
            else:  # x[1:], x[:3], x[::2] of a symbolic T: the same rows of iota(T), of the slice's own dim
                size = numpy_api.dim_size(x, axis)
                rows = numpy_api.getitem(numpy_api.arange(size), slice(start, stop, step))
            target = list(numpy_api.shape(current))
            target[axis] = size
            zeros = numpy_api.zeros(tuple(target), dtype=x.dtype)
            current = apply1("index_add", [zeros, rows, current], {"axis": axis})
        return current

    def sparse_rows(self, x, index, values, axis: int):
        return SparseRows(x, index, values, axis)

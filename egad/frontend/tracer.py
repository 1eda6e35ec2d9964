"""`Tracer`: the stand-in for an array while a function is being traced.

Operators and methods forward to `egad.numpy`, so `x @ W + b` records the same ops
as `enp.add(enp.matmul(x, W), b)`. Anything that needs a concrete value (`if x:`,
`int(x)`, `np.asarray(x)`) raises an EgadError that says which egad construct to
use instead.
"""
from __future__ import annotations

import numpy as np

from ..errors import NumpyInteropError, TracerConversionError, UnsupportedError, message
from ..source import user_location


class Tracer:
    __slots__ = ("_builder", "_var", "_dim_cache", "_symbol", "_less", "_affine")
    # Tell numpy to route `ndarray op tracer` through our __array_ufunc__ (below).

    def __init__(self, builder, var, symbol: str | None = None):
        self._builder = builder
        self._var = var
        self._dim_cache = {}
        # For int scalars that are the run-time size of a symbolic dim (x.shape[k]):
        # the symbol, so creation ops can keep the dim symbolic (enp.zeros((T, 3))).
        self._symbol = symbol
        # For `x.shape[k] - c` (c >= 0 a Python int): (the symbol, c), so that
        # enp.arange(T - c) is as long as x[c:] (both max(T - c, 0)).
        self._less: tuple[str, int] | None = None
        # For an int scalar computed as `scale * base + offset` (base a traced int scalar,
        # scale and offset Python ints): (base, scale, offset), so that x[t:t + 2] and
        # x[2 * t:2 * (t + 1)] are known to be 2 long (numpy_api.py `_window`).
        self._affine: tuple["Tracer", int, int] | None = None

    # --- what the value looks like -----------------------------------------------
    @property
    def type(self):
        return self._var.type

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._var.type.dtype)

    @property
    def ndim(self) -> int:
        return self._var.type.ndim

    @property
    def shape(self) -> tuple:
        """Static dims as ints; symbolic dims as traced int64 scalars."""
        from . import numpy_api

        return tuple(numpy_api.dim_size(self, axis) for axis in range(self.ndim))

    @property
    def size(self):
        from . import numpy_api

        return numpy_api.size(self)

    @property
    def T(self):
        from . import numpy_api

        return numpy_api.transpose(self)

    @property
    def at(self):
        from . import numpy_api

        return numpy_api._IndexUpdateHelper(self)

    def __repr__(self) -> str:
        return f"Tracer<{self._var.type}>"

    def __len__(self) -> int:
        return self._static_length("len() of", "use x.shape[0], which is traced")

    def __iter__(self):
        length = self._static_length("iterating over", "loop with egad.fori_loop(0, x.shape[0], body, init) or "
                                     "egad.scan(body, init, x), which trace one step for every length")
        return (self[i] for i in range(length))

    def __reversed__(self):
        length = self._static_length("reversed() of", "use x[::-1] (traced for every length), or "
                                     "egad.scan(body, init, x, reverse=True)")
        return (self[i] for i in range(length - 1, -1, -1))

    def _static_length(self, what: str, instead: str) -> int:
        """The first dim, when static: `what` (len(), iteration, reversed()) needs a Python int."""
        first = self._var.type.shape[0] if self.ndim else None
        if not isinstance(first, int):
            raise TracerConversionError(message(
                f"{what} a traced value of type {self._var.type} needs a static first dim"
                + ("" if self.ndim else " (it has none)"), where=user_location().long(), instead=instead))
        return first

    # --- conversions that need a concrete value ----------------------------------
    def __bool__(self):
        raise TracerConversionError(message(
            f"Python `if`, `while`, `and`/`or` or bool() on a traced value ({self._var.type}): "
            "its value is only known when the program runs",
            where=user_location().long(),
            instead="use egad.cond(pred, true_fn, false_fn, *operands) for `if`, "
                    "egad.while_loop(cond_fun, body_fun, init) for `while`, enp.where for a "
                    "per-element choice, and enp.logical_and/logical_or for `and`/`or`"))

    def _not_concrete(self, what: str):
        raise TracerConversionError(message(
            f"{what} of a traced value ({self._var.type}): its value is only known when the program runs",
            where=user_location().long(),
            instead="keep it traced (traced ints work as loop bounds, e.g. egad.fori_loop(0, n, ...), "
                    "and as indices), or pass it as a static argument with egad.trace(..., static_argnums=...)"))

    def __int__(self):
        self._not_concrete("int()")

    def __float__(self):
        self._not_concrete("float()")

    def __complex__(self):
        self._not_concrete("complex()")

    def __index__(self):
        raise TracerConversionError(message(
            f"a traced value ({self._var.type}) was used where Python needs an int — most often a numpy array "
            "indexed by a traced index (np_array[i])",
            where=user_location().long(),
            instead="pass the array as an argument of the traced function (then x[i] is traced), or write "
                    "enp.take(np_array, i, axis=0); for range(), use egad.fori_loop"))

    def item(self):
        self._not_concrete(".item()")

    def tolist(self):
        self._not_concrete(".tolist()")

    def __array__(self, dtype=None, copy=None):
        raise NumpyInteropError(message(
            f"a traced value ({self._var.type}) cannot be converted to a numpy array",
            where=user_location().long(),
            instead="use egad.numpy (import egad.numpy as enp) functions on traced values, not numpy's"))

    __hash__ = None  # like JAX tracers: equality is elementwise, so no hashing

    # --- numpy interop ---------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """`ndarray + tracer` (numpy calls the ufunc first) dispatches to egad; other
        numpy functions on tracers are refused with the egad.numpy name to use."""
        from . import numpy_api

        target = numpy_api.UFUNC_TO_ENP.get(ufunc.__name__)
        if method != "__call__" or kwargs or target is None:
            raise NumpyInteropError(message(
                f"numpy's {ufunc.__name__} was called on a traced value",
                where=user_location().long(),
                instead=f"use enp.{ufunc.__name__} (import egad.numpy as enp)"
                        if hasattr(numpy_api, ufunc.__name__) else "use the egad.numpy equivalent"))
        return target(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        from . import numpy_api

        name = func.__name__
        instead = (f"use enp.{name} (import egad.numpy as enp)" if hasattr(numpy_api, name)
                   else "use egad.numpy functions (import egad.numpy as enp)")
        raise NumpyInteropError(message(f"numpy.{name} was called on a traced value",
                                        where=user_location().long(), instead=instead))

    # --- operators ---------------------------------------------------------------
    def __neg__(self):
        from . import numpy_api as n
        return n.OPERATORS["negative"](self)

    def __pos__(self):
        return self

    def __abs__(self):
        from . import numpy_api as n
        return n.OPERATORS["abs"](self)

    def __invert__(self):
        from . import numpy_api as n
        return n.invert(self)

    def __getitem__(self, index):
        from . import numpy_api as n
        return n.getitem(self, index)

    def __getattr__(self, name):  # only for names the class lacks: an ndarray method egad has not
        from . import numpy_api as n
        raise n.missing_function(f"x.{name}()", name)

    def __lshift__(self, other):
        return self._no_shift("<<")

    __rlshift__ = __lshift__

    def __rshift__(self, other):
        return self._no_shift(">>")

    __rrshift__ = __rshift__

    def _no_shift(self, operator: str):
        raise UnsupportedError(message(f"{operator} (a bit shift) is not supported", where=user_location().long(),
                                       instead="multiply or floor-divide by a power of 2"))

    def __setitem__(self, index, value):
        raise UnsupportedError(message(
            "traced values are immutable; item assignment is not supported",
            where=user_location().long(), instead="use x = x.at[index].set(value)"))

    def astype(self, dtype):
        from . import numpy_api as n
        return n.astype(self, dtype)

    def reshape(self, *shape):
        from . import numpy_api as n
        return n.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def transpose(self, *axes):
        from . import numpy_api as n
        return n.transpose(self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None))

    def squeeze(self, axis=None):
        from . import numpy_api as n
        return n.squeeze(self, axis)

    def sum(self, axis=None, keepdims=False, dtype=None):
        from . import numpy_api as n
        return n.sum(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def mean(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.min(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.all(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        from . import numpy_api as n
        return n.argmax(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis=None, dtype=None):
        from . import numpy_api as n
        return n.cumsum(self, axis=axis, dtype=dtype)

    def take(self, indices, axis=None):
        from . import numpy_api as n
        return n.take(self, indices, axis=axis)

    def var(self, axis=None, keepdims=False, ddof=0):
        from . import numpy_api as n
        return n.var(self, axis=axis, keepdims=keepdims, ddof=ddof)

    def std(self, axis=None, keepdims=False, ddof=0):
        from . import numpy_api as n
        return n.std(self, axis=axis, keepdims=keepdims, ddof=ddof)

    def clip(self, a_min=None, a_max=None):
        from . import numpy_api as n
        return n.clip(self, a_min, a_max)

    def dot(self, other):
        from . import numpy_api as n
        return n.dot(self, other)

    def flatten(self):
        from . import numpy_api as n
        return n.reshape(self, (-1,))

    ravel = flatten


def _binary_operator(name: str, reflected: bool):
    def operator(self, other):
        from . import numpy_api

        # Arithmetic operators keep weak types (Python scalar arithmetic); the rest are numpy's.
        fn = numpy_api.OPERATORS.get(name) or getattr(numpy_api, name)
        return fn(other, self) if reflected else fn(self, other)

    return operator


for _dunder, _fn in [
    ("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "true_divide"),
    ("floordiv", "floor_divide"), ("mod", "mod"), ("pow", "power"), ("matmul", "matmul"),
    ("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
]:
    setattr(Tracer, f"__{_dunder}__", _binary_operator(_fn, reflected=False))
    setattr(Tracer, f"__r{_dunder}__", _binary_operator(_fn, reflected=True))

for _dunder, _fn in [("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                     ("gt", "greater"), ("ge", "greater_equal")]:
    setattr(Tracer, f"__{_dunder}__", _binary_operator(_fn, reflected=False))

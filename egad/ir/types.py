"""Tensor types: a shape whose dims are ints or named symbols, and a dtype.

A symbolic dim ("T") stands for a length fixed only when the program runs; the
interpreter binds each symbol the first time it meets it and checks every later
use against that binding.
"""
from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np

Dim = Union[int, str]

# The closed set of element types. int64 is the type of counters and indices,
# bool the type of predicates.
DTYPES = ("bool", "int32", "int64", "float32", "float64")
FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
_SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}


def canonical_dtype(dtype) -> str:
    """The dtype's name in egad's closed set, or ShapeError (an EgadError, and a ValueError)."""
    try:
        return _CANONICAL_NAMES[dtype]  # every call checks each argument's dtype: np.dtype(...).name took 4 us
    except (KeyError, TypeError):
        pass
    name = np.dtype(dtype).name
    if name not in DTYPES:
        from ..errors import ShapeError, message

        raise ShapeError(message(f"dtype {name} is not supported; egad supports {', '.join(DTYPES)}",
                                 instead="convert the array with .astype(), e.g. to int32, int64, float32 or float64"))
    try:
        _CANONICAL_NAMES[dtype] = name
    except TypeError:  # an unhashable dtype spec
        pass
    return name


_CANONICAL_NAMES: dict = {}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


@dataclasses.dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a value. `weak` marks a Python scalar (or counter) that
    adopts the dtype of whatever it is combined with, as in JAX; it never changes
    what the interpreter computes, only how the front end promotes."""

    shape: tuple[Dim, ...]
    dtype: str
    weak: bool = dataclasses.field(default=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        for dim in self.shape:
            if isinstance(dim, bool) or not isinstance(dim, (int, str)) or (isinstance(dim, int) and dim < 0):
                raise ValueError(f"invalid dim {dim!r} in shape {self.shape}")
        if self.dtype not in DTYPES:
            raise ValueError(f"invalid dtype {self.dtype!r}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def size(self) -> int | None:
        """Number of elements, or None when a dim is symbolic."""
        if not self.is_static:
            return None
        return int(np.prod(self.shape, dtype=np.int64))

    def with_weak(self, weak: bool) -> "TensorType":
        return TensorType(self.shape, self.dtype, weak)

    def same_as(self, other: "TensorType") -> bool:
        """Equal shape and dtype (weakness ignored)."""
        return isinstance(other, TensorType) and self.shape == other.shape and self.dtype == other.dtype

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{_SHORT[self.dtype]}[{dims}]" + ("~" if self.weak else "")


@dataclasses.dataclass(frozen=True)
class TapeType:
    """A last-in-first-out stack of values of type `elem`: where reverse-mode AD keeps
    a loop's per-iteration residuals (DESIGN §4). Pushing and popping are ops
    (`tape_push`, `tape_pop`); a tape is threaded through loops as state."""

    elem: TensorType
    weak: bool = dataclasses.field(default=False, compare=False)

    @property
    def shape(self):  # a tape has no array shape; the verifier compares whole types
        return ("tape",)

    @property
    def dtype(self) -> str:
        return self.elem.dtype

    @property
    def ndim(self) -> int:
        return -1

    def with_weak(self, weak: bool) -> "TapeType":
        return self

    def same_as(self, other) -> bool:
        return isinstance(other, TapeType) and self.elem.same_as(other.elem)

    def __str__(self) -> str:
        return f"tape<{self.elem}>"


def scalar(dtype: str, weak: bool = False) -> TensorType:
    return TensorType((), dtype, weak)


def type_of_value(value) -> TensorType:
    """The type of a concrete numpy value (arrays and numpy scalars are strong)."""
    array = np.asarray(value)
    return TensorType(array.shape, canonical_dtype(array.dtype))


_fresh_symbol_counter = [0]


def fresh_symbol(prefix: str = "n") -> str:
    """A new symbolic dim for a length known only at run time (e.g. a while loop's trips):
    `n#3`, which no user's name can be (egad.Spec takes identifiers)."""
    _fresh_symbol_counter[0] += 1
    return f"{prefix}#{_fresh_symbol_counter[0]}"


def bind_dims(shape: tuple[Dim, ...], actual: tuple[int, ...], env: dict[str, int]) -> str | None:
    """Bind symbolic dims of `shape` to the concrete `actual` shape in `env`.

    Returns None on success, else a description of the first mismatch."""
    if len(shape) != len(actual):
        return f"rank {len(actual)} where rank {len(shape)} was expected"
    for axis, (dim, size) in enumerate(zip(shape, actual)):
        if isinstance(dim, int):
            if dim != size:
                return f"size {size} on axis {axis} where {dim} was expected"
        elif env.setdefault(dim, size) != size:
            return f"size {size} on axis {axis} where symbol {dim}={env[dim]} was bound earlier"
    return None


def resolve_shape(shape: tuple[Dim, ...], env: dict[str, int]) -> tuple[int, ...]:
    """Concrete shape: symbols replaced by their bound sizes."""
    return tuple(d if isinstance(d, int) else env[d] for d in shape)

"""Shape arithmetic shared by the op table's shape rules: broadcasting, axes, symbols."""
from __future__ import annotations

import operator
import re

from ..errors import ArgumentError, ShapeError, message
from ..source import user_location
from .types import Dim


def broadcast_shapes(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """numpy broadcasting over int or symbolic dims.

    A symbol broadcasts against 1 and against itself; a symbol against another
    size cannot be proven equal before the program runs, so it is refused."""
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    result: list[Dim] = []
    for axis in range(rank):
        sizes = {s[axis] for s in padded} - {1}
        if len(sizes) > 1:
            shown = " and ".join(str(tuple(s)) for s in shapes)
            raise ShapeError(f"shapes {shown} do not broadcast (axis {axis - rank}: sizes {sorted(map(str, sizes))})")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


# The front end calls these on the user's axis arguments (op shape rules do not), so
# their errors name the user's line.

def normalize_axis(axis: int, rank: int) -> int:
    """The non-negative axis for a possibly negative one, e.g. `normalize_axis(-1, 3) == 2`."""
    try:
        axis = operator.index(axis)  # ints and numpy ints
    except TypeError:
        if axis is None:
            instead = "this function takes one axis; for the flattened array, reshape first (enp.reshape(x, -1))"
        elif isinstance(axis, (tuple, list)):
            instead = "this function takes one axis; pass one int, or reshape those axes into one first"
        else:
            instead = "pass an int axis"
        raise ArgumentError(message(f"axis must be an int, got {axis!r}", where=user_location().long(),
                                    instead=instead)) from None
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise ShapeError(message(f"axis {axis} is out of range for an array of rank {rank}",
                                 where=user_location().long(),
                                 instead=f"use an axis from {-max(rank, 1)} to {max(rank, 1) - 1}"))
    return axis % rank if rank else 0


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; None means every axis."""
    if axes is None:
        return tuple(range(rank))
    if not isinstance(axes, (tuple, list)):
        axes = (axes,)  # one axis: normalize_axis refuses anything but an int
    result = tuple(sorted({normalize_axis(a, rank) for a in axes}))
    if len(result) != len(tuple(axes)):
        raise ShapeError(message(f"repeated axis in {tuple(axes)}", where=user_location().long(),
                                 instead="name each axis once"))
    return result


def reduced_shape(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


_SHORTER_DIM = re.compile(r"(?P<base>.+)-(?P<dropped>[0-9]+)")


def shorter_dim(dim) -> tuple[str, int] | None:
    """(T, k) for a slice's derived dim `T-k` (max(T - k, 0) long), else None."""
    shorter = _SHORTER_DIM.fullmatch(dim) if isinstance(dim, str) else None
    return (shorter["base"], int(shorter["dropped"])) if shorter else None


def ends_dropped(start, stop, step) -> int | None:
    """How many elements `[start:stop:step]` drops from the two ends of an axis of any
    length (`[1:]`, `[:-1]`, `[2:-3]`), or None for another kind of slice."""
    if step in (None, 1) and (start is None or start >= 0) and (stop is None or stop < 0):
        return (start or 0) - (stop or 0)
    return None


def slice_dim(dim: Dim, start, stop, step) -> Dim:
    """Length of `range(dim)[start:stop:step]`; for a symbolic dim a derived symbol.

    Slices that drop k elements from the ends (`x[1:]`, `x[:-1]`, `x[2:-3]`) are named
    by what is left, `T-k`, so `x[1:] - x[:-1]` broadcasts; a whole axis reversed is
    `T`. Both are max(T - k, 0) long, like any slice of a shorter axis."""
    if isinstance(dim, int):
        return len(range(dim)[slice(start, stop, step)])
    if (start, stop, step) == (None, None, -1):  # every element, reversed
        return dim
    dropped = ends_dropped(start, stop, step)
    if dropped is not None:
        shorter = shorter_dim(dim)
        if shorter:  # T-1 sliced again: max(max(T-1, 0) - 1, 0) = max(T-2, 0)
            dim, dropped = shorter[0], dropped + shorter[1]
        return dim if dropped == 0 else f"{dim}-{dropped}"
    text = lambda v: "" if v is None else str(v)  # noqa: E731
    suffix = f":{step}" if step not in (None, 1) else ""
    return f"{dim}[{text(start)}:{text(stop)}{suffix}]"


def product_of_static(shape) -> int:
    total = 1
    for d in shape:
        if isinstance(d, int):
            total *= d
    return total


def symbols_of(shape) -> list[str]:
    return sorted(d for d in shape if isinstance(d, str))

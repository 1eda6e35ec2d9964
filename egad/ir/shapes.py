"""Shape arithmetic shared by the op table's shape rules: broadcasting, axes, symbols."""
from __future__ import annotations

from ..errors import ShapeError
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


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise ShapeError(f"axis {axis} is out of range for an array of rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; None means every axis."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    result = tuple(sorted({normalize_axis(a, rank) for a in axes}))
    if len(result) != len(tuple(axes)):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return result


def reduced_shape(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def slice_dim(dim: Dim, start, stop, step) -> Dim:
    """Length of `range(dim)[start:stop:step]`; for a symbolic dim a derived symbol."""
    if isinstance(dim, int):
        return len(range(dim)[slice(start, stop, step)])
    if (start in (None, 0)) and stop is None and step in (None, 1):
        return dim
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

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
            raise ShapeError(f"shapes {shown} do not broadcast (axis {axis - rank}: sizes {sorted(map(str, sizes))})"
                             + _symbolic_hint(sizes))
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _symbolic_hint(sizes) -> str:
    """Why two symbolic lengths cannot broadcast, and what to write instead."""
    if not any(isinstance(size, str) for size in sizes):
        return ""
    for size in sizes:
        grown = grown_dim(size)
        shorter = shorter_dim(grown[0]) if grown else None
        if shorter and shorter[1] == grown[1] and shorter[0] in sizes:  # `T-1+1` beside `T`
            return (f": {size} is max({shorter[0]} - {grown[1]}, 0) + {grown[1]}, not {shorter[0]} when "
                    f"{shorter[0]} is 0; to shift by {grown[1]}, concatenate first and slice after "
                    f"(enp.concatenate([first, x])[:-{grown[1]}] is {shorter[0]} long)")
    named = sorted(size for size in sizes if isinstance(size, str) and size.isidentifier())
    static = sorted({size for size in sizes if isinstance(size, int) and size != 1})
    if named and static and len(named) == len([size for size in sizes if isinstance(size, str)]):
        return (f"; {named[0]} is a length known only at run time, so it broadcasts with {static[0]} only where "
                f"it is {static[0]} or 1: declare that dim as {static[0]} in the egad.Spec, or trace with static "
                "sizes")
    if len(named) > 1:
        return (f"; {' and '.join(named)} are separate names, so egad cannot know they are one length: where they "
                "are, give the egad.Spec dims one name")
    return ("; a symbolic length is known by how it was made (x[1:] and enp.arange(1, T) are both 'T-1' long, "
            "enp.concatenate([a, x]) is 'T+1' long for a of length 1) and these cannot be proven equal for every "
            "size: make both from the same slices, or trace with static sizes")


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


_GROWN_DIM = re.compile(r"(?P<base>.+)\+(?P<added>[0-9]+)")


def grown_dim(dim) -> tuple[str, int] | None:
    """(D, c) for a concatenation's dim `D+c` (a symbolic part D joined with c static
    elements, exactly D + c long), else None."""
    grown = _GROWN_DIM.fullmatch(dim) if isinstance(dim, str) else None
    return (grown["base"], int(grown["added"])) if grown else None


def joined_dim(dims) -> Dim:
    """The length of a concatenation of axes of lengths `dims`: their sum, named
    `A+B+c` when symbolic (symbolic parts sorted, static ones summed into c). A part
    that is itself a sum or a difference is parenthesized when there are several, so
    that `T+(U-1)` (T + max(U - 1, 0)) is not read as max(T + U - 1, 0)."""
    static, parts = 0, []
    for dim in dims:
        while isinstance(dim, str) and grown_dim(dim):  # `T+3` and 2 more are `T+5`
            dim, added = grown_dim(dim)
            static += added
        if isinstance(dim, int):
            static += dim
        else:
            parts.append(dim)
    parts.sort()
    if not parts:
        return static
    if len(parts) > 1:
        parts = [f"({part})" if ("+" in part or "-" in part) else part for part in parts]
    return "+".join(parts) + (f"+{static}" if static else "")


def joined_parts(dim) -> list | None:
    """The parts joined_dim summed into `dim` (`T+U+3`: ["T", "U", 3]; `T+(U-1)`: ["T",
    "U-1"]), or None where `dim` is not a sum."""
    if not isinstance(dim, str):
        return None
    parts, depth, start = [], 0, 0
    for k, c in enumerate(dim + "+"):
        depth += (c in "([") - (c in ")]")
        if c == "+" and depth == 0:
            parts.append(dim[start:k])
            start = k + 1
    if len(parts) < 2:
        return None
    unwrapped = [part[1:-1] if part.startswith("(") and part.endswith(")") else part for part in parts]
    return [int(part) if part.isdigit() else part for part in unwrapped]


def ends_dropped(start, stop, step) -> int | None:
    """How many elements `[start:stop:step]` drops from the two ends of an axis of any
    length (`[1:]`, `[:-1]`, `[2:-3]`), or None for another kind of slice."""
    if step in (None, 1) and (start is None or start >= 0) and (stop is None or stop < 0):
        return (start or 0) - (stop or 0)
    return None


def _within_first_or_last(start, stop, step, at_least: int) -> int | None:
    """The static length of `[start:stop]` on an axis known to be at least `at_least`
    long, when both bounds fall in its first `at_least` elements (`[1:3]`) or in its
    last (`[-3:-1]`); else None."""
    if step not in (None, 1):
        return None
    if start is None and stop is not None and stop >= 0:
        start = 0
    if start is not None and stop is not None and 0 <= start <= stop <= at_least:
        return stop - start
    if start is not None and start < 0 and (stop is None or start <= stop < 0) and -start <= at_least:
        return (0 if stop is None else stop) - start
    return None


def _empty_on_any_axis(start, stop, step) -> bool:
    """Whether `[start:stop:step]` is empty however long the axis: both bounds counted
    from the same end, and the stop not past the start in the step's direction (x[5:1],
    x[-3:-1:-1])."""
    if start is None or stop is None or (start >= 0) != (stop >= 0):
        return False
    return stop <= start if (step or 1) > 0 else stop >= start


def slice_dim(dim: Dim, start, stop, step) -> Dim:
    """Length of `range(dim)[start:stop:step]`; for a symbolic dim a derived symbol.

    Slices that drop k elements from the ends (`x[1:]`, `x[:-1]`, `x[2:-3]`) are named
    by what is left, `T-k`, so `x[1:] - x[:-1]` broadcasts; a whole axis reversed is
    `T`. Both are max(T - k, 0) long, like any slice of a shorter axis. On a
    concatenation's axis `D+c`, at least c long: dropping k <= c elements leaves
    `D+(c-k)`, and a slice within its first or last c elements has a static length
    (the parts of a concatenation's gradient)."""
    if isinstance(dim, int):
        return len(range(dim)[slice(start, stop, step)])
    if (start, stop, step) == (None, None, -1):  # every element, reversed
        return dim
    grown = grown_dim(dim)
    within = grown and _within_first_or_last(start, stop, step, grown[1])
    if within is not None:
        return within
    if _empty_on_any_axis(start, stop, step):
        return 0
    dropped = ends_dropped(start, stop, step)
    if dropped is not None:
        if grown and dropped <= grown[1]:  # (D+c)[1:]: max(D + c - 1, 0) = D + c - 1, as D >= 0
            base, added = grown
            return base if dropped == added else f"{base}+{added - dropped}"
        if grown:  # (D+c)[k:] for k > c: max(D + c - k, 0), which is D-(k-c), not a new dim `D+c-k`
            dim, dropped = grown[0], dropped - grown[1]
        shorter = shorter_dim(dim)
        if shorter:  # T-1 sliced again: max(max(T-1, 0) - 1, 0) = max(T-2, 0)
            dim, dropped = shorter[0], dropped + shorter[1]
        return dim if dropped == 0 else f"{dim}-{dropped}"
    first = _first_elements(start, stop, step)
    if first is not None:  # [:k], [0:k] and [-k:] are all min(T, k) long: one name, so they broadcast
        return f"{dim}[:{first}]"
    text = lambda v: "" if v is None else str(v)  # noqa: E731
    suffix = f":{step}" if step not in (None, 1) else ""
    return f"{dim}[{text(start)}:{text(stop)}{suffix}]"


def _first_elements(start, stop, step) -> int | None:
    """k when `[start:stop:step]` keeps min(T, k) elements of an axis of any length T:
    the first k (`[:k]`, `[0:k]`) or the last k (`[-k:]`)."""
    if step not in (None, 1):
        return None
    if start in (None, 0) and stop is not None and stop > 0:
        return stop
    if start is not None and start < 0 and stop is None:
        return -start
    return None


def product_of_static(shape) -> int:
    total = 1
    for d in shape:
        if isinstance(d, int):
            total *= d
    return total


def symbols_of(shape) -> list[str]:
    return sorted(d for d in shape if isinstance(d, str))

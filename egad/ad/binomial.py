"""Binomial (Revolve-style) checkpoint schedules: where to cut a loop's trips.

Every-k checkpointing (egad/ad/checkpoint.py) cuts a loop into segments of equal
length, so the memory peak comes at the start of the adjoint sweep, when every
checkpoint is still held and the last segment's residuals are taped. Later in the
sweep the popped checkpoints are gone (tvm_bridge's tapes give back their memory
as they are popped), and that room is wasted. Griewank's Revolve spends it: the
segment the adjoint reaches with j + 1 checkpoints held gets the memory left over,
so the segments shrink from the first to the last, and their lengths follow
binomial coefficients.

egad's schedules keep the nested-loop form of every-k (one extra forward pass per
level, checkpoints taped by the loop over segments) and cut unevenly. With S the
bytes of one checkpoint (the carried state) and R the residual bytes one trip tapes:

    capacity(M, 0) = floor(M / R)                                  # tape every trip
    capacity(M, r) = sum over j >= 0 of capacity(M - (j + 1) S, r - 1)

is the most trips that `r` levels of segments cover in M bytes: segment j is
processed while checkpoints 0..j are held. With S = R = 1 it is C(M, r + 1), a
binomial coefficient as in Revolve (whose beta(s, r) = C(s + r, s) differs because
its innermost segments are single trips, where egad's tape several). With one
level, T trips need about sqrt(2 T S R) bytes where even segments need 2 sqrt(T S R).

    levels = cuts(trips=1024, levels=2, state_bytes=S, residual_bytes=R, memory=least_memory(1024, 2, S, R))
    program = checkpoint.segment_at(program, loop, levels)

`cuts` returns each level's cut positions (0 and T included), each level
refining the one above; segment lengths vary, so a loop with per-trip outputs
cannot be cut this way.
"""
from __future__ import annotations

import functools


def capacity(memory: int, levels: int, state_bytes: int, residual_bytes: int) -> int:
    """The most trips `levels` levels of segments cover within `memory` bytes
    (module docstring)."""
    return _capacity(memory, levels, max(state_bytes, 1), max(residual_bytes, 1), None)


@functools.lru_cache(maxsize=1 << 16)
def _capacity(memory: int, levels: int, state: int, residual: int, enough: int | None) -> int:
    """`capacity`, or any number >= `enough` once it is reached (the sum stops early)."""
    if memory < residual:
        return 0
    if levels == 0:
        return memory // residual
    total = 0
    for held in range(state, memory - residual + 1, state):
        total += _capacity(memory - held, levels - 1, state, residual, enough)
        if enough is not None and total >= enough:
            break
    return total


def least_memory(trips: int, levels: int, state_bytes: int, residual_bytes: int) -> int:
    """The fewest bytes in which `levels` levels of segments cover `trips` trips."""
    state, residual = max(state_bytes, 1), max(residual_bytes, 1)
    # capacity(low) < trips <= capacity(high): one segment a level, each holding its checkpoint
    low, high = residual - 1, trips * residual + levels * state
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _capacity(middle, levels, state, residual, trips) < trips else (low, middle)
    return high


def cuts(trips: int, levels: int, state_bytes: int, residual_bytes: int, memory: int) -> tuple[tuple[int, ...], ...]:
    """Per level (outermost first), the positions where its segments start, with 0
    and `trips` at the ends; every level's cuts include the level above's. The first
    segments are the longest: each takes what `memory` leaves it (`capacity`), the
    last takes the rest."""
    state, residual = max(state_bytes, 1), max(residual_bytes, 1)
    if _capacity(memory, levels, state, residual, trips) < trips:
        raise ValueError(f"{levels} levels cannot cover {trips} trips in {memory} bytes")
    per_level: list[set[int]] = [set() for _ in range(levels)]

    def cut(start: int, length: int, memory: int, level: int) -> None:
        if level == levels:
            return
        held, position = 0, start
        while position < start + length:
            held += state
            rest = start + length - position
            take = min(_capacity(memory - held, levels - level - 1, state, residual, rest), rest)
            per_level[level].add(position)
            cut(position, take, memory - held, level + 1)
            position += take

    cut(0, trips, memory, 0)
    out, above = [], {trips}
    for level in per_level:
        above = above | level
        out.append(tuple(sorted(above)))
    return tuple(out)


def peak_bytes(levels: tuple[tuple[int, ...], ...], state_bytes: int, residual_bytes: int) -> int:
    """The most bytes the schedule holds at once in the adjoint sweep: for every
    segment, the checkpoints of it and of the segments before it at every level
    above, plus its innermost segment's taped residuals."""
    def worst(start: int, stop: int, level: int) -> int:
        if level == len(levels):
            return (stop - start) * residual_bytes
        inside = [p for p in levels[level] if start <= p <= stop]
        return max((j + 1) * state_bytes + worst(a, b, level + 1)
                   for j, (a, b) in enumerate(zip(inside, inside[1:])))

    return worst(0, levels[0][-1], 0)

"""Online doubling checkpoints for `while` loops: segments that grow as the loop runs on.

A `while` loop's trip count T is known only when it stops, so every-k checkpointing
(egad/ad/checkpoint.py) has to pick k for the trips it ran on the example inputs. A
run of many more trips then keeps one checkpoint per k trips: ceil(T/k) x S bytes,
growing linearly with T. The best every-k for a given T needs 2 sqrt(T S R) bytes
(k = sqrt(T S / R); S bytes per checkpoint, R bytes of residuals per trip), so a
fixed k falls further behind the longer the loop runs.

The doubling policy starts with segments of k trips and doubles their length
whenever the checkpoints' bytes reach `GROWTH` segments' residual bytes:

    n x S >= GROWTH x L x R   (n segments run so far, L their current length)  ->  L = 2 L

decided after each segment, on values the loop carries, so it needs no trip count.
With GROWTH = 2, a loop of T trips keeps at most about sqrt(3) = 1.73 times the
bytes of the best every-k for that T, for any T (and exactly every-k's bytes as
long as T stays within 2 (k / k*)^2 times the trips k was planned for, k* the
best k for them). Checking it: the phase of length L starts at n = r L (r = R/S)
and ends at n = 2 r L, having run T = (4/3) r L^2 trips; its bytes go from 2 L R to
3 L R while the best every-k's go from 2 sqrt(T S R) = 1.15 L R to 2.31 L R.

Each level's re-run of a segment is counted the same way as every-k's, so the
adjoint costs one extra forward pass per level, as before. `segment(program, loop,
k, online=Doubling(S, R))` builds the loops; `Doubling.lengths` and
`Doubling.peak_bytes` are the same rule run in Python, for the planner.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

GROWTH = 2  # double the segment length when the checkpoints hold this many segments' residual bytes


@dataclasses.dataclass(frozen=True)
class Doubling:
    """The doubling rule for one loop: S = `checkpoint_bytes` per segment,
    R = `residual_bytes` per trip."""

    checkpoint_bytes: int
    residual_bytes: int

    def grows(self, segments, length):
        """Whether the segment length doubles after `segments` segments of `length`
        trips: Python ints for the planner, traced int64 scalars for the loop."""
        return segments * self.checkpoint_bytes >= length * (GROWTH * self.residual_bytes)

    def lengths(self, trips: int, k: int) -> list[int]:
        """The trips of each segment of a run of `trips` trips starting at length k."""
        out, length, done = [], k, 0
        while done < trips:
            out.append(min(length, trips - done))
            done += out[-1]
            if self.grows(len(out), length):
                length *= 2
        return out

    def peak_bytes(self, trips: int, k: int, segment_bytes: Callable[[int], int] | None = None) -> int:
        """Tape bytes at the adjoint's peak: while segment j's residuals are taped,
        checkpoints 0..j are held. `segment_bytes(length)` is what re-running a segment
        of that length tapes (default: every trip's residuals; deeper levels pass
        their own)."""
        segment_bytes = segment_bytes or (lambda length: length * self.residual_bytes)
        return max((j + 1) * self.checkpoint_bytes + segment_bytes(length)
                   for j, length in enumerate(self.lengths(trips, k) or [0]))

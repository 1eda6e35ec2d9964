"""Timing helpers shared by the benchmarks: interleaved rounds and their medians."""
from __future__ import annotations

import statistics
import time


def median_seconds(calls: dict, rounds: int = 7) -> dict:
    """Median seconds per call of each callable, the sides interleaved round by round
    so that load from other processes falls on both."""
    return {name: statistics.median(times) for name, times in interleaved_seconds(calls, rounds).items()}


def interleaved_seconds(calls: dict, rounds: int = 7) -> dict:
    """Seconds per call of each callable in each round ({name: [one per round]}), the
    sides interleaved round by round: round k of one side ran beside round k of the others."""
    for call in calls.values():
        call()  # warm-up
    per_call = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            batch = batch_size(call)
            start = time.perf_counter()
            for _ in range(batch):
                call()
            per_call[name].append((time.perf_counter() - start) / batch)
    return per_call


def batch_size(call, seconds: float = 0.05) -> int:
    """How many calls make up about `seconds` (at least one)."""
    start = time.perf_counter()
    call()
    return max(1, int(seconds / max(time.perf_counter() - start, 1e-6)))

"""How close a benchmark's results are to a reference, shared by optimizer.py and
gpu_run.py: numpy alone, so that it also runs where only TVM's runtime is installed."""
from __future__ import annotations

import numpy as np


def largest_relative_error(got: list, want: list) -> float:
    """The largest error of any leaf of `got` against the same leaf of `want` (flat
    lists of arrays), relative to that leaf's largest magnitude."""
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        scale = max(float(np.max(np.abs(w), initial=0.0)), 1e-30)
        worst = max(worst, float(np.max(np.abs(g - w), initial=0.0)) / scale)
    return worst

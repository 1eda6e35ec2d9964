"""How close a benchmark's results are to a reference, shared by optimizer.py and
gpu_run.py: numpy alone, so that it also runs where only TVM's runtime is installed."""
from __future__ import annotations

import numpy as np


def largest_relative_error(got: list, want: list) -> float:
    """The largest error of any leaf of `got` against the same leaf of `want` (flat
    lists of arrays), relative to that leaf's largest finite magnitude: NaN where a
    result is NaN and its reference is not (Python's max would keep the number before
    it), 0 where both are the same infinity or both NaN."""
    errors = []
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        scale = max(float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)), 1e-30)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        with np.errstate(invalid="ignore"):  # inf - inf where both are inf: `same` covers it
            errors.append(float(np.max(np.where(same, 0.0, np.abs(g - w)), initial=0.0)) / scale)
    return float(np.max(errors, initial=0.0))  # numpy's max keeps a NaN

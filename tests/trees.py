"""Comparing program outputs (pytrees of numpy values) in tests."""
from __future__ import annotations

import numpy as np

from egad.pytree import flatten


def assert_trees_close(got, want, rtol: float, context: str = "", atol: float | None = None):
    """Same structure and shapes; integers and bools equal; floats close."""
    got_leaves, got_tree = flatten(got)
    want_leaves, want_tree = flatten(want)
    assert got_tree == want_tree, f"{context}: structure {got_tree} != {want_tree}"
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{context} leaf {k}: shape {g.shape} != {w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{context} leaf {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol if atol is None else atol,
                                       err_msg=f"{context} leaf {k}")

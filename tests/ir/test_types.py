"""egad/ir/types.py: the closed dtype set."""
from __future__ import annotations

import numpy as np
import pytest

from egad.ir.types import DTYPES, canonical_dtype


@pytest.mark.parametrize("name", DTYPES)
def test_every_spelling_of_a_dtype_has_one_name(name):
    for spelling in (name, np.dtype(name), np.dtype(name).type, np.zeros(1, name).dtype):
        for _ in range(2):  # the second answer comes from the cache of names
            assert canonical_dtype(spelling) == name


@pytest.mark.parametrize("spelling", ["float16", np.dtype("complex64"), np.uint8, "<U3"])
def test_an_unsupported_dtype_is_refused_every_time(spelling):
    for _ in range(2):  # never cached as supported
        with pytest.raises(ValueError, match="is not supported; egad supports"):
            canonical_dtype(spelling)

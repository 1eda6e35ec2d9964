"""egad/ir/types.py: the closed dtype set."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
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


@pytest.mark.parametrize("call", [
    lambda: enp.reshape(np.ones(3, np.int8), (3, 1)),
    lambda: enp.astype(np.ones(3, np.float16), "float32"),
    lambda: enp.take(np.ones(3, np.uint16), [0]),
], ids=["reshape-int8", "astype-float16", "take-uint16"])
def test_an_unsupported_dtype_is_an_egad_error_where_egad_numpy_runs_eagerly(call):
    """canonical_dtype raised a plain ValueError, which reached users of enp.reshape,
    astype and take on such arrays raw. Found by fuzzing."""
    with pytest.raises(egad.ShapeError, match="dtype .* is not supported; egad supports"):
        call()


@pytest.mark.parametrize("index_dtype", ["int8", "int16", "uint8", "uint16", "uint32"])
def test_integer_index_arrays_of_any_width_index_as_in_numpy(index_dtype):
    """A numpy index array of int8 or an unsigned dtype raised a raw ValueError while
    tracing; numpy (and JAX) take them."""
    x = np.arange(6.0).reshape(2, 3)
    index = np.array([2, 0], index_dtype)
    program = egad.trace(lambda x: (enp.take(x, index, axis=1), x[:, index]), x)
    for got in egad.interpret(program, x):
        np.testing.assert_array_equal(got, np.take(x, index, axis=1))


@pytest.mark.parametrize("bound", [np.int32(4), np.int64(4), 4])
def test_arange_of_a_traced_bound_counts_in_numpys_dtype(bound):
    """numpy's arange is int64 or float64 whatever the bounds' widths; a traced int32
    bound gave int32."""
    program = egad.trace(lambda n: (enp.arange(n), enp.arange(1, n)), bound)
    want = (np.arange(bound), np.arange(1, bound))
    assert [v.type.dtype for v in program.region.results] == [w.dtype.name for w in want]
    for got, expected in zip(egad.interpret(program, bound), want):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_clip_of_a_python_scalar_is_as_wide_as_numpys(dtype):
    """numpy's clip makes a Python scalar `a` an array (int64 or float64); egad took it
    for a weak scalar and gave the bounds' dtype."""
    bounds = np.array([1, 5], dtype)
    program = egad.trace(lambda lo: enp.clip(3, lo, None), bounds)
    want = np.clip(3, bounds, None)
    assert program.region.results[0].type.dtype == want.dtype.name
    np.testing.assert_array_equal(egad.interpret(program, bounds), want)

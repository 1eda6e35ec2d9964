"""The packed functions compiled code calls to check values on the host: the host
checks (host_checks.py) and the index checks (index_checks.py).

Like runtime.py, this module needs TVM's runtime alone (no Relax, no compiler), so an
exported library runs where only the runtime is installed (benchmarks/gpu_run.py).
A check raises a Python error whose message names its site; `Compiled.__call__`
reads it back (`FAILED_HOST_CHECK`, `OUT_OF_RANGE`) into egad's error naming the op
and the user's source line.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import tvm

FAILED_HOST_CHECK = re.compile(r"egad host check site (\d+): ([^\n]*)")
OUT_OF_RANGE = re.compile(r"egad index site (\d+): index (-?\d+) is out of range for an axis of size (\d+)")


@tvm.register_global_func("egad.reduction_is_empty", override=True)
def _reduction_is_empty(site: int, *sizes) -> None:
    if any(int(size.numpy()) == 0 if isinstance(size, tvm.runtime.Tensor) else int(size) == 0 for size in sizes):
        raise ValueError(f"egad host check site {site}: an axis of size 0")


@tvm.register_global_func("egad.at_least", override=True)
def _at_least(site: int, least: int, size) -> None:
    if int(size.numpy()) < least:
        raise ValueError(f"egad host check site {site}: k={least}, {int(size.numpy())} given")


@tvm.register_global_func("egad.exponent_is_negative", override=True)
def _exponent_is_negative(site: int, exponent) -> None:
    if (exponent.numpy() < 0).any():
        raise ValueError(f"egad host check site {site}: a negative integer exponent")


@tvm.register_global_func("egad.shape_fits", override=True)
def _shape_fits(site: int, target: str, *sizes) -> None:
    """`target` (JSON: ints, and None for each symbolic dim, filled from `sizes` in
    order) has no negative dim."""
    _filled(site, target, sizes)


@tvm.register_global_func("egad.reshape_fits", override=True)
def _reshape_fits(site: int, target: str, x_shape, *sizes) -> None:
    """... and holds as many elements as x."""
    shape, x_shape = _filled(site, target, sizes), tuple(int(d) for d in x_shape.numpy())
    if math.prod(shape) != math.prod(x_shape):
        raise ValueError(f"egad host check site {site}: cannot reshape an array of shape {x_shape} to {shape}")


def _filled(site: int, target: str, sizes) -> tuple[int, ...]:
    given = iter(sizes)
    shape = tuple(int(next(given).numpy()) if d is None else d for d in json.loads(target))
    if any(d < 0 for d in shape):
        raise ValueError(f"egad host check site {site}: negative dimensions are not allowed")
    return shape


@tvm.register_global_func("egad.index_out_of_range", override=True)
def _index_out_of_range(site: int, index: int, size: int) -> None:
    raise IndexError(f"egad index site {site}: index {index} is out of range for an axis of size {size}")


@tvm.register_global_func("egad.check_indices", override=True)
def _check_indices(indices, size, site: int) -> None:
    values = indices.numpy().astype(np.int64, copy=False).reshape(-1)
    size = int(size.numpy()) if isinstance(size, tvm.runtime.Tensor) else int(size)
    bad = (values < -size) | (values >= size)
    if bad.any():
        _index_out_of_range(site, int(values[bad][0]), size)

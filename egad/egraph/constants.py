"""Constants in the e-graph, bit-exact.

A rank-0 constant is a `Scalar(dtype, bits)` node and an array whose entries are all
the same bits a `Splat(dtype, bits, shape)`: small, visible to rules (`x * 0`), and
equal constants share one e-class. Any other array lives in a `ConstantTable` and
the node holds its key (`Array(key)`); the table is content-addressed, so equal
arrays also share a key and an e-class.

`bits` is the value's float64 bit pattern for floats (float32 widens exactly) and
its int64 value for ints and bools, so -0.0, 0.0 and NaN payloads stay distinct,
which egglog's own f64 (ordered floats, -0.0 == 0.0) would not guarantee.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .enode import ENode
from .language import scalar_bits


class ConstantTable:
    """Arrays too large to sit in a node, keyed by content."""

    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self._keys: dict[tuple, int] = {}

    def key_of(self, array: np.ndarray) -> int:
        array = np.asarray(array)
        content = (array.dtype.str, array.shape, hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest())
        if content not in self._keys:
            self._keys[content] = len(self.arrays)
            self.arrays.append(array)
        return self._keys[content]

    def __getitem__(self, key: int) -> np.ndarray:
        return self.arrays[key]

    def __len__(self) -> int:
        return len(self.arrays)


def literal_node(value: np.ndarray, table: ConstantTable, shape_field) -> ENode:
    """The node of constant `value`; `shape_field(shape)` encodes a Splat's shape attr."""
    value = np.asarray(value)
    if value.ndim == 0:
        return ENode("Scalar", (value.dtype.name, scalar_bits(value)))
    if value.size and _all_same_bits(value):
        return ENode("Splat", (value.dtype.name, scalar_bits(value.reshape(-1)[0]), shape_field(value.shape)))
    return ENode("Array", (table.key_of(value),))


def literal_value(head: str, args: tuple, table: ConstantTable, shape=None) -> np.ndarray:
    """The array of a `Scalar`/`Splat`/`Array` node (`shape`: the Splat's decoded shape)."""
    if head == "Array":
        return table[args[0]]
    dtype, bits = args[0], args[1]
    if np.dtype(dtype).kind == "f":
        entry = np.asarray(bits, "int64").view("float64").astype(dtype)
    else:
        entry = np.asarray(bits, "int64").astype(dtype)
    return entry if head == "Scalar" else np.full(shape, entry, dtype)


def _all_same_bits(value: np.ndarray) -> bool:
    flat = np.ascontiguousarray(value).reshape(-1).view(f"u{value.dtype.itemsize}")
    return bool((flat == flat[0]).all())

"""A program's structural fingerprint: equal for programs that compute the same
thing the same way (same ops, attrs, constants, types and dataflow), whatever their
variables are called. Build caches key on it (tvm_bridge/cache.py).
"""
from __future__ import annotations

import hashlib

import numpy as np

from .program import Program, Region
from .types import TapeType


def fingerprint(program: Program) -> str:
    """sha256 hex digest of `program`'s region (params, bindings, results)."""
    digest = hashlib.sha256()
    _Hasher(digest).region(program.region)
    return digest.hexdigest()


class _Hasher:
    def __init__(self, digest):
        self.digest = digest
        self.numbers: dict[int, int] = {}  # var uid -> order of first definition

    def write(self, *parts) -> None:
        for part in parts:
            self.digest.update(part if isinstance(part, bytes) else str(part).encode())
            self.digest.update(b"\x00")

    def define(self, var) -> None:
        self.numbers[var.uid] = len(self.numbers)
        self.write("var", self.numbers[var.uid], _type_text(var.type))

    def use(self, var) -> None:
        self.write("use", self.numbers[var.uid])

    def region(self, region: Region) -> None:
        self.write("region", len(region.params))
        for param in region.params:
            self.define(param)
        for binding in region.bindings:
            self.write("op", binding.op, len(binding.inputs))
            for var in binding.inputs:
                self.use(var)
            for name in sorted(binding.attrs):
                self.write("attr", name)
                self.value(binding.attrs[name])
            for sub in binding.regions:
                self.region(sub)
            for var in binding.outputs:
                self.define(var)
        self.write("results", len(region.results))
        for var in region.results:
            self.use(var)

    def value(self, value) -> None:
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.ascontiguousarray(value)
            self.write("array", array.dtype.str, array.shape, array.tobytes())
        elif isinstance(value, (tuple, list)):
            self.write(type(value).__name__, len(value))
            for item in value:
                self.value(item)
        elif isinstance(value, dict):
            self.write("dict", len(value))
            for key in sorted(value, key=repr):
                self.write(repr(key))
                self.value(value[key])
        else:  # ints, floats, strings, None, dtypes: repr is exact (floats round-trip)
            text = repr(value)
            if " at 0x" in text:  # an object without a value repr would make the key unstable
                raise TypeError(f"attr value {text} has no stable fingerprint")
            self.write(type(value).__name__, text)


def _type_text(t) -> str:
    return "tape" if isinstance(t, TapeType) else f"{t.dtype}{t.shape}{'w' if t.weak else ''}"

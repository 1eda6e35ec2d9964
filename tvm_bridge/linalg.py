"""Lowering of matmul and einsum."""
from __future__ import annotations

from tvm import relax

from egad.ir.ops import parse_einsum

from .registry import lowers


@lowers("matmul")
def _matmul(bb, args, attrs, binding):
    return relax.op.matmul(args[0], args[1])


@lowers("einsum")
def _einsum(bb, args, attrs, binding):
    terms, output = parse_einsum(attrs["spec"], [v.type.ndim for v in binding.inputs])
    return relax.op.einsum(args, ",".join(terms) + "->" + output)

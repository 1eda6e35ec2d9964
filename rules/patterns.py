"""Pattern pieces the families share: constants of each dtype, dtype conditions, and
the integer value of a class for the Python transformers.

IR binary ops take operands of one dtype, so a rule about `x * 1` is written once per
dtype, with the `1` of that dtype (bit-exact, as the encoder writes constants).
"""
from __future__ import annotations

import numpy as np
from egglog import String, eq

from egad.egraph.analysis import dtype_of
from egad.egraph.attrs import attrs_node
from egad.egraph.constants import literal_value
from egad.egraph.enode import ClassId, ENode
from egad.egraph.language import Term, attr, literal, scalar_bits
from egad.ir.types import TensorType

FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES


def scalars(value, dtypes=NUMERIC_DTYPES) -> list[Term]:
    """The rank-0 constant `value` in each dtype: `scalars(1)` matches every inserted one."""
    return [literal(value, dtype) for dtype in dtypes]


def scalar_pairs(value, dtypes=NUMERIC_DTYPES) -> list[tuple[str, Term]]:
    return [(dtype, literal(value, dtype)) for dtype in dtypes]


def splat(value, dtype: str, shape) -> Term:
    """An all-`value` constant of `shape` (an Attr, usually a pattern variable)."""
    return Term.splat(dtype, scalar_bits(np.asarray(value, dtype)), attr(shape))


def has_dtype(x: Term, dtype: str):
    """Condition: x's dtype is `dtype` (egad/egraph/analysis.py)."""
    return eq(dtype_of(x)).to(String(dtype))


def int_constant(view, cid: ClassId) -> int | None:
    """The value of an integer rank-0 constant class (a loop bound), else None."""
    for node in view.snapshot.nodes[cid]:
        if node.head == "Scalar" and node.args[0] in INT_DTYPES:
            return node.args[1]
    return None


def constant_integers(view, cid: ClassId) -> np.ndarray | None:
    """The value of a constant integer class of static shape (a `Scalar`, `Splat` or
    `Array` node: an index's rows), else None."""
    index_type = view.types.get(cid)
    if not isinstance(index_type, TensorType) or not all(isinstance(d, int) for d in index_type.shape):
        return None
    for node in view.snapshot.nodes[cid]:
        if node.head in ("Scalar", "Splat", "Array"):
            value = literal_value(node.head, node.args, view.encoding.constants, index_type.shape)
            return value if value.dtype.kind in "iu" else None
    return None


def is_index_add(node: ENode) -> bool:
    return node.head == "Op3" and node.args[0] == "index_add"


def is_zeros(node: ENode) -> bool:
    """An all-zero constant (+0.0 or integer 0: all bits clear)."""
    return node.head == "Splat" and node.args[1] == 0


OP_HEADS = {1: "Op1", 2: "Op2", 3: "Op3"}  # op nodes by operand count; more operands: "OpN" over a Vec


def op_node(name: str, attrs: ENode, operands) -> ENode:
    """The node of op `name` with its attributes node over `operands` (classes or nodes):
    Op1, Op2 or Op3 by their count, OpN over a tuple of more."""
    operands = tuple(operands)
    if len(operands) in OP_HEADS:
        return ENode(OP_HEADS[len(operands)], (name, attrs, *operands))
    return ENode("OpN", (name, attrs, operands))


def concat_node(view, classes: list[ClassId], axis: int) -> ENode:
    """The node `concat(classes, axis=axis)`, for a transformer to union with a class."""
    return op_node("concat", attrs_node({"axis": axis}, view.encoding.constants), classes)


def is_concat(view, cid: ClassId) -> bool:
    return any(n.head.startswith("Op") and n.args[0] == "concat" for n in view.snapshot.nodes[cid])


def axis_slice_node(view, of, axis: int, start: int, stop: int, rank: int) -> ENode:
    """The node `of[..., start:stop, ...]`: rows start to stop of axis `axis` of its `rank`
    axes, every other axis whole, for a transformer to union with a class."""
    whole = (None, None, None)
    index = (whole,) * axis + ((start, stop, None),) + (whole,) * (rank - axis - 1)
    return ENode("Op1", ("slice", attrs_node({"index": index}, view.encoding.constants), of))

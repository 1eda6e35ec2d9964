"""Op attributes as `Attrs`/`Attr` nodes and back, exactly.

An attribute dict becomes a chain `WithAttr(...WithAttr(NoAttrs, k1, v1)..., kn, vn)`
with keys sorted, so equal dicts give one e-class. Values: bool, int, str, None,
Python float (as its bits), tuples (nested), `TensorType` (tape element types), and
numpy arrays (through the constant table). Anything else is refused: an attribute
the e-graph cannot give back exactly would silently change the program.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..ir.types import TensorType
from .constants import ConstantTable
from .enode import ENode
from .language import float_bits

NO_ATTRS = ENode("NoAttrs")


def attrs_node(values: dict, table: ConstantTable) -> ENode:
    node = NO_ATTRS
    for key in sorted(values):
        node = ENode("WithAttr", (node, key, attr_node(values[key], table)))
    return node


def attr_node(value, table: ConstantTable) -> ENode:
    if isinstance(value, bool):
        return ENode("AttrBool", (value,))
    if isinstance(value, int):
        return ENode("AttrInt", (value,))
    if isinstance(value, float):
        return ENode("AttrFloat", (float_bits(value),))
    if isinstance(value, str):
        return ENode("AttrStr", (value,))
    if value is None:
        return ENode("AttrNone")
    if isinstance(value, tuple):
        return ENode("AttrTuple", (tuple(attr_node(item, table) for item in value),))
    if isinstance(value, TensorType):
        return ENode("AttrType", (attr_node(value.shape, table), value.dtype, value.weak))
    if isinstance(value, np.ndarray):
        return ENode("AttrArray", (table.key_of(value),))
    raise UnsupportedError(f"the e-graph cannot encode the attribute value {value!r} ({type(value).__name__}); "
                           "use a bool, int, float, str, None, tuple, TensorType or numpy array")


def attrs_value(node_of, cid, table: ConstantTable) -> dict:
    """The attribute dict of an `Attrs` class; `node_of(cid)` gives a class's node."""
    values = {}
    node = node_of(cid)
    while node.head == "WithAttr":
        rest, key, value = node.args
        values[key] = attr_value(node_of, value, table)
        node = node_of(rest)
    return dict(sorted(values.items()))


def attr_value(node_of, cid, table: ConstantTable):
    node = node_of(cid)
    head, args = node.head, node.args
    if head in ("AttrBool", "AttrInt", "AttrStr"):
        return args[0]
    if head == "AttrFloat":
        return float(np.asarray(args[0], "int64").view("float64"))
    if head == "AttrNone":
        return None
    if head == "AttrTuple":
        return tuple(attr_value(node_of, item, table) for item in args[0])
    if head == "AttrType":
        return TensorType(attr_value(node_of, args[0], table), args[1], args[2])
    if head == "AttrArray":
        return table[args[0]]
    raise ValueError(f"not an attribute node: {node}")

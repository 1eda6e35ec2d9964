"""fusion: several matmuls of one operand become one matmul on concatenated weights.

An LSTM or GRU written gate by gate computes `h @ W_i`, `h @ W_f`, `h @ W_g`,
`h @ W_o`: four small kernels, each paying a dispatch and reading h again. With the
weights side by side, `h @ concat(W_i, W_f, W_g, W_o)` is one kernel, and each gate
is a slice of its result. This is a Python transformer rather than an egglog
rewrite because it groups any number of matmuls at once (pairwise rewrites would
build every sub-concatenation).

Assumes: the right operands are rank-2 with static column counts, share a dtype and
a row count, and are computed from the program's parameters by pure ops alone
(`parameter_derived`, egad/egraph/analysis.py), so the concatenation is computed once
at the top of the program and the fused product lives where the shared left operand
lives. A weight that only a branch computes is never fused with another: the fused
product would compute it outside its branch, tape pops included. Each output column of a matmul depends only on its
own weight column, so slicing the fused product gives the same sums (a BLAS may
block them differently, so the last bits can differ).
Elementwise chains are fused by the lowering, not here.
"""
from __future__ import annotations

from egad.egraph.attrs import NO_ATTRS, attrs_node
from egad.egraph.enode import ClassId, ENode
from egad.ir.types import TensorType

from .registry import family

FUSION = family("fusion", __doc__)

_OP_HEADS = {1: "Op1", 2: "Op2", 3: "Op3"}


@FUSION.transformer("fuse-shared-operand-matmuls",
                    "x @ W1, ..., x @ Wk = slices of x @ concat(W1..Wk): one kernel instead of k")
def fuse_shared_operand_matmuls(view) -> int:
    snapshot, types = view.snapshot, view.types
    fused_already = {tuple(_term_inputs(node)) for members in snapshot.nodes.values() for node in members
                     if node.head.startswith("Op") and node.args[0] == "concat"}
    groups: dict[tuple, dict[ClassId, ClassId]] = {}  # (x, rows, dtype) -> {W: class of x @ W}
    for cid, members in snapshot.nodes.items():
        for node in members:
            if node.head != "Op2" or node.args[0] != "matmul":
                continue
            x, weight = node.args[2], node.args[3]
            weight_type, x_type = types.get(weight), types.get(x)
            if not isinstance(weight_type, TensorType) or not isinstance(x_type, TensorType) \
                    or weight_type.ndim != 2 or x_type.ndim < 1:
                continue
            if not isinstance(weight_type.shape[1], int) or weight not in view.facts.parameter_derived:
                continue
            if any(n.head.startswith("Op") and n.args[0] == "concat" for n in snapshot.nodes[weight]):
                continue  # already a fused weight
            groups.setdefault((x, weight_type.shape[0], weight_type.dtype), {}).setdefault(weight, cid)
    fused = 0
    for (x, _, _), products in groups.items():
        if len(products) < 2:
            continue
        weights = sorted(products, key=view.order)  # program order: gates in the order written
        if tuple(weights) in fused_already:
            continue
        concat = ENode(_OP_HEADS.get(len(weights), "OpN"),
                       ("concat", attrs_node({"axis": 1}, view.encoding.constants),
                        *([tuple(weights)] if len(weights) > 3 else weights)))
        product = ENode("Op2", ("matmul", NO_ATTRS, x, concat))
        rank = max(types[x].ndim, 2) if types[x].ndim >= 2 else 1
        start = 0
        for weight in weights:
            width = types[weight].shape[1]
            index = ((None, None, None),) * (rank - 1) + ((start, start + width, None),)
            view.union(products[weight], ENode("Op1", ("slice", attrs_node({"index": index}, view.encoding.constants),
                                                       product)))
            start += width
        fused += 1
    return fused


def _term_inputs(node: ENode) -> list:
    inputs = node.args[2:]
    return list(inputs[0]) if node.head == "OpN" else list(inputs)

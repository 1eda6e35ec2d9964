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

from .patterns import concat_node, is_concat
from .registry import family

FUSION = family("fusion", __doc__)


@FUSION.transformer("fuse-shared-operand-matmuls",
                    "x @ W1, ..., x @ Wk = slices of x @ concat(W1..Wk): one kernel instead of k")
def fuse_shared_operand_matmuls(view) -> int:
    snapshot, types = view.snapshot, view.types
    concats = {cid: tuple(_term_inputs(node)) for cid, members in snapshot.nodes.items() for node in members
               if node.head.startswith("Op") and node.args[0] == "concat"}
    # (x, weights) of every product of x with concatenated weights: a loop's copy (rules/checkpoint.py)
    # multiplies a new x by the same weights, and is fused again
    fused_already = {(node.args[2], concats[node.args[3]]) for members in snapshot.nodes.values() for node in members
                     if node.head == "Op2" and node.args[0] == "matmul" and node.args[3] in concats}
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
            if is_concat(view, weight):
                continue  # already a fused weight
            groups.setdefault((x, weight_type.shape[0], weight_type.dtype), {}).setdefault(weight, cid)
    fused = 0
    for (x, _, _), products in groups.items():
        if len(products) < 2:
            continue
        weights = sorted(products, key=view.order)  # program order: gates in the order written
        if (x, tuple(weights)) in fused_already:
            continue
        product = ENode("Op2", ("matmul", NO_ATTRS, x, concat_node(view, weights, 1)))
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


@FUSION.transformer("fuse-matmul-sum",
                    "a1 @ B1 + ... + ak @ Bk = concat(a1..ak) @ concat(B1..Bk): one matmul instead of k matmuls "
                    "and k - 1 adds (the adjoint of fused gates sums one product per gate)", finite_only=True)
def fuse_matmul_sum(view) -> int:
    """The mirror image of `fuse_shared_operand_matmuls`, for sums: AD of `h @ U_i`,
    ..., `h @ U_o` gives `dh = dz_i @ U_i.T + ... + dz_o @ U_o.T` in the reverse loop.
    Each output element is one dot product over the concatenated depth, so the sum is
    one matmul of the left operands side by side and the weights stacked; the weights'
    concatenation is parameter-derived, so it is computed once at the top. Only sums
    whose every add keeps its operands' type (no broadcasting) and whose terms are
    matmuls with a rank-2, static, parameter-derived weight are fused; the largest sum
    only (a tree's inner sums are not fused again), and never one whose terms read a
    fused weight already. The left operands must all have one type, and none may be a
    row `take(X, i)` of a loop-invariant X: a cell's `x @ W + h @ U` stays as written,
    since batching takes `x @ W` out of the loop (rules/batching.py) and fusing it with
    `h @ U` would keep it in. Float sums are reassociated (the last bits can differ)."""
    snapshot, types = view.snapshot, view.types
    sums: dict[ClassId, tuple[list, set]] = {}
    memo: dict[ClassId, tuple[list, set] | int] = {}
    for cid in snapshot.nodes:
        found = _sum_of_products(view, cid, 0, memo)
        if found is not None and len(found[0]) > 1:
            sums[cid] = found
    inner = {c for root, (_, adds) in sums.items() for c in adds if c != root}
    fused = 0
    for root, (terms, _) in sums.items():
        if root in inner or _holds_fused_matmul(view, root):
            continue
        if len(terms) > MAX_FUSED_TERMS:
            continue
        terms = sorted(terms, key=lambda term: view.order(term[1]))  # weights in program order
        lefts, weights = [a for a, _ in terms], [w for _, w in terms]
        if len({types[a] for a in lefts}) != 1 or any(_row_of_invariant(view, a) for a in lefts):
            continue
        axis = types[lefts[0]].ndim - 1
        view.union(root, ENode("Op2", ("matmul", NO_ATTRS, concat_node(view, lefts, axis),
                                       concat_node(view, weights, 0))))
        fused += 1
    return fused


MAX_SUM_DEPTH = 16  # adds followed down one sum tree
# Terms one fused matmul may take: a cell's gates are 4 (8 for a bidirectional pair); the
# weight gradient of a 500-step unrolled chain was a 500-way concatenation that took 30 s
# to build and was then measured slower than the sum (found by fuzzing).
MAX_FUSED_TERMS = 32


def _sum_of_products(view, cid: ClassId, depth: int, memo: dict) -> tuple[list, set] | None:
    """([(a, B) for each term], {the add classes walked}) when class `cid` is a matmul
    `a @ B` with a fusable weight or a same-typed add of such sums, else None.

    `memo` holds each class's sum, or the least depth it was missed from: a miss found
    with less depth left holds with less still, and is searched again only from nearer
    the root (at most MAX_SUM_DEPTH times a class). Without it the search was
    exponential: a class holds many adds once associativity has run, and each of their
    children was searched again from every path reaching it."""
    known = memo.get(cid)
    if isinstance(known, tuple):
        return known
    if known is not None and known <= depth:
        return None
    found = None
    product = _fusable_product(view, cid)
    if product is not None:
        found = [product], set()
    elif depth < MAX_SUM_DEPTH:
        result_type = view.types.get(cid)
        for node in view.snapshot.nodes[cid]:
            if node.head != "Op2" or node.args[0] != "add":
                continue
            left, right = node.args[2], node.args[3]
            if view.types.get(left) != result_type or view.types.get(right) != result_type:
                continue
            parts = [_sum_of_products(view, child, depth + 1, memo) for child in (left, right)]
            if None not in parts:
                found = parts[0][0] + parts[1][0], {cid} | parts[0][1] | parts[1][1]
                break
    memo[cid] = found if found is not None else depth
    return found


def _fusable_product(view, cid: ClassId) -> tuple[ClassId, ClassId] | None:
    """(a, B) for a class holding `a @ B` with B rank-2, static, parameter-derived and not a
    fused weight already, a of rank >= 1 with B's rows, both of the result's dtype."""
    result_type = view.types.get(cid)
    for node in view.snapshot.nodes[cid]:
        if node.head != "Op2" or node.args[0] != "matmul":
            continue
        a, weight = node.args[2], node.args[3]
        a_type, weight_type = view.types.get(a), view.types.get(weight)
        if not all(isinstance(t, TensorType) for t in (a_type, weight_type, result_type)):
            continue
        if weight_type.ndim != 2 or a_type.ndim < 1 or not all(isinstance(d, int) for d in weight_type.shape):
            continue
        if a_type.shape[-1] != weight_type.shape[0] or not a_type.dtype == weight_type.dtype == result_type.dtype:
            continue
        if weight in view.facts.parameter_derived and not is_concat(view, weight):
            return a, weight
    return None


def _row_of_invariant(view, cid: ClassId) -> bool:
    """The class holds `take(X, i, axis=0)` of an X invariant in some loop: a row batching reads."""
    tables = [node.args[2] for node in view.snapshot.nodes[cid] if node.head == "Op2" and node.args[0] == "take"]
    return any(table in invariant for table in tables for invariant in view.facts.invariant.values())


def _holds_fused_matmul(view, cid: ClassId) -> bool:
    return any(node.head == "Op2" and node.args[0] == "matmul" and is_concat(view, node.args[3])
               for node in view.snapshot.nodes[cid])

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

The adjoint side: `fuse-matmul-sum` makes the reverse loop concatenate the gates'
gradients; `stack-concatenated-rows` then stacks that concatenation instead of each
gradient, and `fuse-einsums-of-slices` turns the gates' weight-gradient contractions
(batching's, after the loop) into one per weight, sliced.
"""
from __future__ import annotations

from egad.egraph.attrs import NO_ATTRS
from egad.egraph.enode import ClassId, ENode
from egad.ir import ops
from egad.ir.types import TapeType, TensorType

from .loop_body import copy_loop, loop_body
from .patterns import axis_slice_node, concat_node, is_concat, op_node
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
            view.union(products[weight], axis_slice_node(view, product, rank - 1, start, start + width, rank))
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


STACK_CONCATENATIONS = "stack-concatenated-rows"


@FUSION.transformer(STACK_CONCATENATIONS,
                    "ys rows y1..yk of a for loop whose body also concatenates them = slices of the stacked "
                    "concatenation: one row stacked a step instead of k, and contractions of the rows fuse",
                    reads=("batch-weight-gradient", "fuse-matmul-sum", "stack-taped-residuals"))
def stack_concatenated_rows(view) -> int:
    """The reverse loop of fused gates computes `dz = concat(dz_i, dz_f, dz_g, dz_o)` for
    `fuse-matmul-sum`'s product and stacks each `dz_*` for the weight gradients after
    the loop (`batch-weight-gradient`). A new loop stacks `dz` instead, and each stacked
    `dz_*` is a slice of it along the concatenated axis: the gate kernels then write
    straight into the concatenation (nothing else reads them), and the contractions of
    the four slices are one (`fuse-einsums-of-slices`). Stacking takes row i of every
    trip to row i of the stack, so slicing the stack of concatenations gives the stack of
    each operand, exactly.

    Assumes: a `for` loop with its `trip_dim` set that carries no tape, a concat (static
    sizes along its axis) whose operands are distinct ys of the loop. A loop that pops
    tapes is left alone: each checkpoint rule would copy its copy again (on the LSTM,
    270 e-nodes and 0.4 s), and their tape-free copies are stacked instead. The new
    loop is a copy (rules/loop_body.py) with the same state, the other ys, and the
    concatenation last; its body holds no control node and no tape allocation."""
    snapshot, types = view.snapshot, view.types
    concats = [(cid, node) for cid, members in snapshot.nodes.items() for node in members
               if node.head.startswith("Op") and node.args[0] == "concat" and len(_term_inputs(node)) > 1]
    if not concats:
        return 0
    outputs = view.outputs()
    # the loops stacked already, and their copies: each alternative of a loop (a checkpoint
    # rule's copy, say) is stacked once
    done = {region for copy, info in view.encoding.regions.items()
            if info.copied_from is not None and info.copied_from[0] == STACK_CONCATENATIONS
            for region in (copy, info.copied_from[1])}
    stacked = 0
    for loop_class, members in snapshot.nodes.items():
        for loop in members:
            gets = outputs.get(loop_class, {})
            if loop.head != "For" or not gets or loop.args[0] in done:
                continue
            region, lo, hi, inits, results, attrs_class = loop.args
            if view.attrs(attrs_class).get("trip_dim") is None \
                    or any(isinstance(types.get(init), TapeType) for init in inits):
                continue
            ys = results[len(inits):]
            position: dict[ClassId, int] = {}
            for j, y in enumerate(ys):
                position.setdefault(y, j)
            for concat_class, concat in concats:
                parts = _term_inputs(concat)
                if len(set(parts)) == len(parts) and all(part in position for part in parts) \
                        and _stack_concatenation(view, loop, gets, concat_class, concat, position):
                    stacked += 1
                    break
    return stacked


def _stack_concatenation(view, loop: ENode, gets: dict[int, ClassId], concat_class: ClassId, concat: ENode,
                         position: dict[ClassId, int]) -> bool:
    types = view.types
    region, _, _, inits, results, _ = loop.args
    n_state = len(inits)
    parts = _term_inputs(concat)
    concat_type = types.get(concat_class)
    if not isinstance(concat_type, TensorType):
        return False
    axis = view.attrs(concat.args[1])["axis"] % concat_type.ndim
    widths = [types[part].shape[axis] if isinstance(types.get(part), TensorType) else None for part in parts]
    if not all(isinstance(width, int) for width in widths):
        return False
    ys = results[n_state:]
    concatenated = {position[part] for part in parts}
    kept = [j for j in range(len(ys)) if j not in concatenated]
    new_results = list(results[:n_state]) + [ys[j] for j in kept] + [concat_class]
    walked = loop_body(view, region, new_results, view.facts.invariant.get(region, set()))
    if walked is None:
        return False
    body, _ = walked
    new_loop = copy_loop(view, view.snapshot.index[loop], loop, body, new_results, list(range(n_state)),
                         copied_from=(STACK_CONCATENATIONS, region, ()))
    for k, get in sorted(gets.items()):
        if k < n_state:
            view.union(get, ENode("Get", (new_loop, k)))
        elif k - n_state in kept:
            view.union(get, ENode("Get", (new_loop, n_state + kept.index(k - n_state))))
    stack = ENode("Get", (new_loop, len(new_results) - 1))
    start = 0
    for part, width in zip(parts, widths):
        get = gets.get(n_state + position[part])
        if get is not None:  # stacked axis first, then the row's: the concatenated axis is 1 + axis
            view.union(get, axis_slice_node(view, stack, 1 + axis, start, start + width, 1 + concat_type.ndim))
        start += width
    return True


@FUSION.transformer("fuse-einsums-of-slices",
                    "einsum(.., C[.., r1], ..), ..., einsum(.., C[.., rk], ..) for slices r1..rk tiling an axis of C "
                    "that the output keeps = slices of einsum(.., C, ..): one contraction instead of k")
def fuse_einsums_of_slices(view) -> int:
    """After `stack-concatenated-rows`, the weight gradients of fused gates are
    `einsum('tki,tkj->ij', hs, dz[:, :, r_g])` for each gate's columns r_g: one
    contraction of `hs` with all of `dz`, sliced, computes the same sums (each output
    column reads only its own column of `dz`), in one kernel that reads `hs` once.
    Slices of one class along one axis whose letter only that operand and the output
    carry (not summed, not on a diagonal), the other operands and the spec the same,
    tiling the axis from 0 to its end with no gap or overlap; the contraction is
    blocked differently, so float sums can differ in the last bits."""
    snapshot, types = view.snapshot, view.types
    slices = {cid: found for cid in snapshot.nodes if (found := _axis_slices(view, cid))}
    if not slices:
        return 0
    groups: dict[tuple, dict[tuple[int, int], ClassId]] = {}  # (spec, operands, position, C, axis) -> ranges
    spec_attrs: dict[str, ClassId] = {}  # spec -> its attrs class
    for cid, members in snapshot.nodes.items():
        for node in members:
            if not node.head.startswith("Op") or node.args[0] != "einsum":
                continue
            operands = _term_inputs(node)
            spec = view.attrs(node.args[1])["spec"]
            spec_attrs[spec] = node.args[1]
            if "." in spec or not all(isinstance(types.get(o), TensorType) for o in operands):
                continue
            terms, output = ops.parse_einsum(spec, [types[o].ndim for o in operands])
            for p, operand in enumerate(operands):
                for sliced, axis, start, stop in slices.get(operand, ()):
                    letter = terms[p][axis]
                    if terms[p].count(letter) != 1 or output.count(letter) != 1 \
                            or any(letter in term for q, term in enumerate(terms) if q != p):
                        continue
                    key = (spec, tuple(operands[:p]), tuple(operands[p + 1:]), sliced, axis)
                    groups.setdefault(key, {}).setdefault((start, stop), cid)
    fused = 0
    for (spec, before, after, sliced, axis), ranges in groups.items():
        bounds = sorted(ranges)
        length = types[sliced].shape[axis]
        if len(bounds) < 2 or bounds[0][0] != 0 or bounds[-1][1] != length \
                or any(a[1] != b[0] for a, b in zip(bounds, bounds[1:])):
            continue
        operands = (*before, sliced, *after)
        terms, output = ops.parse_einsum(spec, [types[o].ndim for o in operands])
        whole = op_node("einsum", spec_attrs[spec], operands)
        if whole in snapshot.index:
            continue  # fused in an earlier round
        out_axis = output.index(terms[len(before)][axis])
        for start, stop in bounds:
            view.union(ranges[start, stop], axis_slice_node(view, whole, out_axis, start, stop, len(output)))
        fused += 1
    return fused


def _axis_slices(view, cid: ClassId) -> list[tuple[ClassId, int, int, int]]:
    """(C, axis, start, stop) for each node of the class slicing a static C along one
    axis, unit step, every other axis whole."""
    found = []
    for node in view.snapshot.nodes[cid]:
        if node.head != "Op1" or node.args[0] != "slice":
            continue
        source_type = view.types.get(node.args[2])
        if not isinstance(source_type, TensorType) or not all(isinstance(d, int) for d in source_type.shape):
            continue
        cut = []
        for axis, (entry, dim) in enumerate(zip(view.attrs(node.args[1])["index"], source_type.shape)):
            start, stop, step = slice(*entry).indices(dim)
            if step != 1:
                break
            if (start, stop) != (0, dim):
                cut.append((axis, start, stop))
        else:
            if len(cut) == 1 and cut[0][1] < cut[0][2]:
                found.append((node.args[2], *cut[0]))
    return found

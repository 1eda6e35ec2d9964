"""Lowering of matmul and einsum.

A two-operand einsum that is a (batched) matrix product in disguise, such as the
weight gradient 'tki,tkj->ij' that rules/batching.py writes after a reverse loop,
is lowered as permute + reshape + `R.matmul` + reshape + permute (a contraction that
reads a transposed operand in place when the einsum's letters already put it that
way, as for a `matmul` of a transpose), so that egad's tiled matmul schedule
(tvm_bridge/schedule.py) runs it;
TVM's generic einsum is a plain loop nest. Reshapes take the operands' shapes as
Relax shape expressions, so symbolic dims (a trip count T) work. One operand with
some axes summed away is `R.sum`. Anything else (a letter summed within one operand,
repeated letters, broadcast dims, three operands) stays `R.einsum`. The einsum
'ik,jkc->ijc' of a right operand packed column tile by column tile
(tvm_bridge/pack_weights.py) is one contraction reading it in place.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx

from egad.ir.ops import parse_einsum

from .registry import lowers


@lowers("matmul")
def _matmul(bb, args, attrs, binding):
    # A^T @ B (x.T @ g, every dense layer's weight gradient) and A @ B^T (g @ W.T, its input
    # gradient): one contraction reading the transposed operands in place. A transpose kernel
    # would copy the operand first (as long as the product itself on 32768 x 256), and TVM's
    # FuseTransposeMatmul, which folds a transposed right operand, fails on a transpose other
    # ops read too (a shared W.T) and on X @ X^T (both operands one value), and then fuses
    # nothing in the whole module
    left, right = _transposed_source(bb, args[0]), _transposed_source(bb, args[1])
    a = args[0] if left is None else left
    b = args[1] if right is None else right
    if (left is not None or right is not None) and _same_batch(a, b, left is not None, right is not None):
        return bb.emit_te(_transposed_product, a, b, left is not None, right is not None,
                          primfunc_name_hint="matmul_tn" if left is not None else "matmul_nt")
    if right is not None:
        # a vector times X^T, or a batch of 1 against more: R.matmul of a transpose of its own,
        # which FuseTransposeMatmul folds (tvm_bridge/fusion.py) even when X^T is shared
        return relax.op.matmul(args[0], bb.emit(relax.op.permute_dims(right, _last_two_swapped(right))))
    return relax.op.matmul(args[0], args[1])


def _last_two_swapped(value) -> list[int]:
    axes = list(range(value.ty.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return axes


def _transposed_source(bb, value):
    """X when `value` is bound to X with its last two axes swapped (both >= 2-D), else None."""
    if not isinstance(value, relax.Var):
        return None
    bound = bb.lookup_binding(value)
    if not isinstance(bound, relax.Call) or bound.op != tvm.ir.Op.get("relax.permute_dims"):
        return None
    source = bound.args[0]
    ndim = source.ty.ndim if isinstance(source.ty, relax.TensorType) else -1
    if ndim < 2:
        return None
    axes = [int(a) for a in bound.attrs.axes] if bound.attrs.axes is not None else list(range(ndim))[::-1]
    return source if axes == _last_two_swapped(source) else None


def _same_batch(a, b, a_transposed: bool, b_transposed: bool) -> bool:
    """A (*n, i, k) and B (*m, k, j) of one dtype (A (*n, k, i) when `a_transposed`, B
    (*m, j, k) when `b_transposed`) whose depths k are equal and whose batch dims,
    aligned from the right, are equal where both have them (static or the same symbol):
    what `_transposed_product` computes, the operand with fewer batch dims broadcast
    over the other's. A batch dim of 1 against another size stays with `R.matmul`,
    which broadcasts it."""
    ta, tb = a.ty, b.ty
    if not (isinstance(ta, relax.TensorType) and isinstance(tb, relax.TensorType)) or ta.dtype != tb.dtype:
        return False
    if ta.ndim < 2 or tb.ndim < 2 or ta.shape is None or tb.shape is None:
        return False
    a_dims, b_dims = list(ta.shape.values), list(tb.shape.values)
    # each operand's depth, then its batch dims from the innermost out
    a_dims = [a_dims[-2 if a_transposed else -1]] + a_dims[-3::-1]
    b_dims = [b_dims[-1 if b_transposed else -2]] + b_dims[-3::-1]
    analyzer = tvm.sym.Analyzer()
    return all(analyzer.can_prove_equal(x, y) for x, y in zip(a_dims, b_dims))


@lowers("einsum")
def _einsum(bb, args, attrs, binding):
    terms, output = parse_einsum(attrs["spec"], [v.type.ndim for v in binding.inputs])
    if _is_packed_product(terms, output):
        return bb.emit_te(_packed_product, *args, primfunc_name_hint="matmul_packed")
    if len(args) == 1 and _is_sum_of_axes(terms[0], output):
        return _einsum_as_sum(bb, args[0], terms[0], output)
    if len(args) == 2:
        product = _einsum_as_matmul(bb, args, terms, output, [v.type for v in binding.inputs])
        if product is not None:
            return product
    return relax.op.einsum(args, ",".join(terms) + "->" + output)


def _is_sum_of_axes(term: str, output: str) -> bool:
    """One operand with distinct letters, some summed away: 'tab->b', the bias gradient
    rules/batching.py writes after a reverse loop."""
    return len(set(term)) == len(term) and len(output) < len(term) and set(output) <= set(term)


def _einsum_as_sum(bb, arg, term: str, output: str):
    """`R.sum` over the summed axes, then the kept ones put in the output's order. TVM's
    einsum loops over the summed letters in an order of its own: 'tab->b' on 64 x 32 x
    1024 stepped 128 KiB between reads (its inner loop ran over t), where the sum over
    leading axes (schedule.py) reads rows in order: 112 -> 92 us hot on 2 Zen 3 cores."""
    summed = [axis for axis, letter in enumerate(term) if letter not in output]
    kept = [letter for letter in term if letter in output]
    return _in_output_order(bb, relax.op.sum(arg, axis=summed), kept, output)


def _in_output_order(bb, value, letters: list[str], output: str):
    """`value`, whose axes are `letters`, with its axes in the order of `output`."""
    if letters == list(output):
        return value
    return relax.op.permute_dims(bb.emit(value), [letters.index(c) for c in output])


def _is_packed_product(terms, output) -> bool:
    """'ik,jkc->ijc' in any letters: rows x depth times a right operand packed as
    [column tiles, depth, columns of a tile]."""
    if len(terms) != 2 or len(terms[0]) != 2 or len(terms[1]) != 3 or len(set("".join(terms))) != 4:
        return False
    (i, k), (j, k2, c) = terms
    return k == k2 and output == i + j + c


def _packed_product(a, packed):
    """C[i, j, c] = sum_k A[i, k] * P[j, k, c]: a contraction whose columns are (j, c),
    each column tile's panel of P contiguous."""
    depth = te.reduce_axis((0, a.shape[1]), name="k")
    return te.compute((a.shape[0], packed.shape[0], packed.shape[2]),
                      lambda i, j, c: te.sum(a[i, depth] * packed[j, depth, c], axis=depth), name="matmul_packed")


def _einsum_as_matmul(bb, args, terms, output, types):
    a, b = terms
    if any(len(set(term)) != len(term) for term in (a, b, output)) or not set(output) <= set(a) | set(b):
        return None
    sizes = {}
    for term, t in zip(terms, types):
        for letter, dim in zip(term, t.shape):
            if sizes.setdefault(letter, dim) != dim:
                return None  # a broadcast dim
    batch = [c for c in output if c in a and c in b]
    contracted = [c for c in a if c in b and c not in output]
    a_free = [c for c in output if c in a and c not in b]
    b_free = [c for c in output if c in b and c not in a]
    if not contracted or set(a) != set(batch + a_free + contracted) or set(b) != set(batch + contracted + b_free):
        return None
    # each operand's dims as tir values: ints, or variables bound by a match_cast
    operands, dims = [], []
    for term, arg, t in zip(terms, args, types):
        shape = [d if isinstance(d, int) else tirx.Var(f"einsum_{letter}", "int64") for letter, d in zip(term, t.shape)]
        operands.append(bb.match_cast(arg, relax.TensorType(shape, t.dtype)) if any(
            not isinstance(d, int) for d in shape) else arg)
        dims.append(dict(zip(term, shape)))

    def size(dims_of, letters):
        total = tirx.IntImm("int64", 1)
        for letter in letters:
            total = total * dims_of[letter]
        return total

    def operand(k, rows, columns):
        """Operand k as (*batch, rows, columns), or as (*batch, columns, rows) and True
        when its axes come in that order (the weight gradient 'tki,...' is such a
        case): then it is only reshaped, and the product reads it transposed in place."""
        arg, term = operands[k], list(terms[k])
        batch_dims = [dims[k][c] for c in batch]
        if term == batch + columns + rows and rows and columns:
            return bb.emit(relax.op.reshape(arg, batch_dims + [size(dims[k], columns), size(dims[k], rows)])), True
        if term != batch + rows + columns:
            arg = bb.emit(relax.op.permute_dims(arg, [term.index(c) for c in batch + rows + columns]))
        return bb.emit(relax.op.reshape(arg, batch_dims + [size(dims[k], rows), size(dims[k], columns)])), False

    lhs, lhs_transposed = operand(0, a_free, contracted)
    rhs, rhs_transposed = operand(1, contracted, b_free)
    if lhs_transposed:
        # read in place, as `_matmul` does: a transpose kernel would copy it first (the weight
        # gradient's 2048 x 256 stacked inputs took 1.3 ms, as long as a third of the product)
        product = bb.emit_te(_transposed_product, lhs, rhs, True, rhs_transposed, primfunc_name_hint="matmul_tn")
    elif rhs_transposed:
        product = bb.emit_te(_transposed_product, lhs, rhs, False, True, primfunc_name_hint="matmul_nt")
    else:
        product = bb.emit(relax.op.matmul(lhs, rhs))
    product = relax.op.reshape(product, [dims[0][c] for c in batch + a_free] + [dims[1][c] for c in b_free])
    return _in_output_order(bb, product, batch + a_free + b_free, output)


def _transposed_product(a, b, a_transposed: bool, b_transposed: bool):
    """C[*n, i, j] = sum_k A[*n, i, k] * B[*n, k, j], reading A as A[*n, k, i] when
    `a_transposed` and B as B[*n, j, k] when `b_transposed`: a contraction egad's matmul
    schedule recognises in any operand layout. The operand with fewer batch dims is
    broadcast over the other's (their shared ones are equal: `_same_batch`)."""
    depth = te.reduce_axis((0, a.shape[-2] if a_transposed else a.shape[-1]), name="k")
    rows = a.shape[-1] if a_transposed else a.shape[-2]
    columns = b.shape[-2] if b_transposed else b.shape[-1]
    batch = max(a.shape[:-2], b.shape[:-2], key=len)

    def element(*index):
        *n, i, j = index
        n_a, n_b = n[len(n) - (len(a.shape) - 2):], n[len(n) - (len(b.shape) - 2):]
        left = a[(*n_a, depth, i)] if a_transposed else a[(*n_a, i, depth)]
        right = b[(*n_b, j, depth)] if b_transposed else b[(*n_b, depth, j)]
        return te.sum(left * right, axis=depth)

    return te.compute((*batch, rows, columns), element, name="matmul_tn" if a_transposed else "matmul_nt")

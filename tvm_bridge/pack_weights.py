"""Loop-invariant right operands of matmuls in `for` bodies, packed once before the loop.

An RNN step multiplies its state by the same weight every trip: `h @ U` with U of
[K, N] an invariant of the loop. egad's matmul schedule (tvm_bridge/schedule.py)
walks U a column tile at a time, down all K rows: one cache line from each row,
N * 4 bytes apart. For N = 1024 that is one line per 4 KiB page, every line in the
same few cache sets, and no hardware prefetcher follows it; below 128 rows of h the
schedule does not even pack the panel (the pack would cost as much again). This pass
rewrites the program before lowering (CPU builds only) so that the loop reads U
already packed, column tile by column tile:

    before the loop:  Up = transpose(reshape(U, (K, N/w, w)), (1, 0, 2))   # [N/w, K, w]
    in the body:      y = reshape(einsum('ik,jkc->ijc', h, Up), (M, N))

with w the schedule's column tile (two vectors: 16 float32 with AVX2, 32 with
AVX-512), so that a column tile's panel is one contiguous run of K * w elements.
tvm_bridge/linalg.py lowers that einsum as one contraction reading Up in place,
which the matmul schedule tiles as it tiles `h @ U`. The pack costs one pass over U
each time the loop runs, however many trips it makes.

2 Zen 3 cores (AVX2), an LSTM step's products, us: (32 x 256) @ (256 x 1024) 182 ->
118, (32 x 1024) @ (1024 x 256) read transposed 203 -> 125, (32 x 128) @ (128 x 1024)
91 -> 48; (32 x 256) @ (256 x 256), one gate's, 43 -> 40.

The rewrite is an ordinary egad program (reshape, transpose, einsum), so the tests
interpret it against the original. Only rank-2 products with static shapes whose
columns the tile divides (into two tiles or more) are packed, and only where no
elementwise op reads the product: FuseOps runs such an epilogue (`+ b`, a `tanh`) in
the product's tiles, and the reshape after the packed einsum would keep it out, in a
kernel of its own (GNMT-lite's steps, `x @ W + b` each, and the gate-by-gate LSTM of
rules=() ran 2-4% slower packed). The loop's invariant stays in place where other
ops of the body read it too.
"""
from __future__ import annotations

import dataclasses

from egad.ir import ops
from egad.ir.program import Binding, Program, Region, Var

PACKED_SPEC = "ik,jkc->ijc"  # rows x depth times [column tiles, depth, columns of a tile]


def pack_loop_invariant_operands(program: Program, columns_per_tile) -> Program:
    """`program` with the invariant right operands of its `for` bodies' matmuls
    packed before their loops; `columns_per_tile(dtype)` is the matmul schedule's
    column tile. The program itself is left as it was (a changed region is a copy)."""
    region = _packed_region(program.region, columns_per_tile)
    return program if region is program.region else dataclasses.replace(program, region=region)


def _packed_region(region: Region, columns_per_tile) -> Region:
    bindings, changed = [], False
    made_by = {output.uid: binding for binding in region.bindings for output in binding.outputs}
    for binding in region.bindings:
        subs = tuple(_packed_region(sub, columns_per_tile) for sub in binding.regions)
        if any(new is not old for new, old in zip(subs, binding.regions)):
            binding, changed = dataclasses.replace(binding, regions=subs), True
        if binding.op == "for":
            packs, binding = _pack_invariants(binding, columns_per_tile, made_by)
            bindings += packs
            changed = changed or bool(packs)
        bindings.append(binding)
    return dataclasses.replace(region, bindings=bindings) if changed else region


def _pack_invariants(loop: Binding, columns_per_tile, made_by: dict) -> tuple[list[Binding], Binding]:
    """(the packing bindings to put before `loop`, `loop` reading the packed operands);
    `made_by`: the binding making each value of the loop's region, by uid."""
    (body,) = loop.regions
    n_state = loop.attrs["n_state"]
    first_invariant = 1 + n_state  # body params: the counter, the state, the invariants
    readers: dict[int, list[Binding]] = {}
    for binding in body.bindings:
        for var in binding.inputs:
            readers.setdefault(var.uid, []).append(binding)
    packs, inputs, params, rewritten = [], list(loop.inputs), list(body.params), {}
    for k, param in enumerate(body.params[first_invariant:]):
        width = columns_per_tile(param.type.dtype)
        products = [b for b in readers.get(param.uid, ()) if _packable(b, param, width)
                    and not any(ops.OPS[r.op].family == "elementwise" for r in readers.get(b.outputs[0].uid, ()))]
        if not products:
            continue
        outer = loop.inputs[2 + n_state + k]
        made = _pack(outer, width, loop, made_by.get(outer.uid))
        packs += made
        packed_param = Var(made[-1].outputs[0].type, f"{param.hint or 'w'}_packed")
        if len(products) == len(readers[param.uid]) and param not in body.results:
            inputs[2 + n_state + k], params[first_invariant + k] = made[-1].outputs[0], packed_param
        else:  # other ops read the invariant as it is: it stays, the packed one comes after
            inputs.append(made[-1].outputs[0])
            params.append(packed_param)
        for product in products:
            rewritten[id(product)] = _packed_product(product, packed_param, width)
    if not packs:
        return [], loop
    new_bindings = []
    for binding in body.bindings:
        new_bindings += rewritten.get(id(binding), [binding])
    new_body = dataclasses.replace(body, params=tuple(params), bindings=new_bindings)
    return packs, dataclasses.replace(loop, inputs=tuple(inputs), regions=(new_body,))


def _packable(binding: Binding, param: Var, width: int) -> bool:
    """A rank-2 matmul whose right operand is `param`, static, with columns in two
    tiles or more that the tile (`width` columns) divides."""
    if binding.op != "matmul" or binding.inputs[1] is not param or binding.inputs[0] is param:
        return False
    left, right = (var.type for var in binding.inputs)
    if left.ndim != 2 or right.ndim != 2 or not (left.is_static and right.is_static):
        return False
    columns = right.shape[1]
    return width > 1 and columns % width == 0 and columns >= 2 * width


def _pack(weight: Var, width: int, loop: Binding, made_by: Binding | None = None) -> list[Binding]:
    """[K, N] -> [N/width, K, width], as bindings at the loop's source line. A weight
    that `made_by` concatenates along its columns from pieces of whole tiles (an LSTM's
    gates, fused into one product) is packed piece by piece and the packs concatenated
    along the tiles: the same array, but each tile of it is copied from one piece. The
    kernel packing the concatenation chose a piece per vector, with a select that read
    every piece (the LSTM's 256 x 1024 in the call, profiled side by side on 2 Zen 3
    cores: 0.40 -> 0.18 ms)."""
    if (made_by is not None and made_by.op == "concat" and made_by.attrs["axis"] == 1
            and all(0 < piece.type.shape[1] and piece.type.shape[1] % width == 0 for piece in made_by.inputs)):
        pieces = [_pack(piece, width, loop) for piece in made_by.inputs]
        joined = _binding("concat", [made[-1].outputs[0] for made in pieces], {"axis": 0}, loop)
        return [binding for made in pieces for binding in made] + [joined]
    depth, columns = weight.type.shape
    tiled = _binding("reshape", [weight], {"shape": (depth, columns // width, width)}, loop)
    packed = _binding("transpose", [tiled.outputs[0]], {"perm": (1, 0, 2)}, loop)
    return [tiled, packed]


def _packed_product(product: Binding, packed: Var, width: int) -> list[Binding]:
    """`y = x @ W` as `y = reshape(einsum(PACKED_SPEC, x, W packed), y's shape)`."""
    (left, _), (output,) = product.inputs, product.outputs
    tiles = _binding("einsum", [left, packed], {"spec": PACKED_SPEC}, product)
    return [tiles, Binding((output,), "reshape", tiles.outputs, {"shape": tuple(output.type.shape)}, loc=product.loc)]


def _binding(op: str, inputs: list[Var], attrs: dict, at: Binding) -> Binding:
    (output_type,) = ops.OPS[op].shape_rule([var.type for var in inputs], attrs)
    return Binding((Var(output_type),), op, tuple(inputs), attrs, loc=at.loc)

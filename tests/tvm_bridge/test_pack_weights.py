"""Loop-invariant matmul operands packed before their loops (tvm_bridge/pack_weights.py):
which products are packed and which are not, that the rewritten program is well formed
and computes what the original does (both interpreted), that the packed einsum lowers
to one contraction the matmul schedule tiles, and that built programs, forward and
reverse loops and gradients included, agree with the interpreter. No timing here: the
module cites what was measured."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ir.program import walk_bindings
from egad.ir.verify import verify
from egad.tvm_bridge import build, schedule
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.pack_weights import PACKED_SPEC, pack_loop_invariant_operands
from egad.tvm_bridge.targets import resolve
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_prim_funcs

RNG = np.random.default_rng(0)
TILE = 16  # the column tile the tests pack with (AVX2's for float32)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def tile_of(dtype) -> int:
    return TILE


def rnn(U, W, xs, h0):
    """Two gates' products fused into one per weight, as egad's rules write them: each
    product read by slices, no elementwise op on it."""
    def step(t, h):
        z, a = h @ U, xs[t] @ W
        H = h.shape[1]
        return enp.tanh(z[:, :H] + a[:, :H]) * (1.0 / (1.0 + enp.exp(z[:, H:] + a[:, H:])))
    return egad.fori_loop(0, xs.shape[0], step, h0)


def rnn_args(T=4, B=3, I=32, H=24):
    return f32(H, 2 * H) * 0.2, f32(I, 2 * H) * 0.2, f32(T, B, I), f32(B, H)


def packed(program):
    return pack_loop_invariant_operands(program, tile_of)


def packed_products(program) -> list:
    return [b for b in walk_bindings(program.region) if b.op == "einsum" and b.attrs["spec"] == PACKED_SPEC]


def loop_of(program):
    return next(b for b in program.region.bindings if b.op == "for")


def assert_same_when_interpreted(program, args):
    rewritten = verify(packed(program))
    assert_trees_close(egad.interpret(rewritten, *args), egad.interpret(program, *args), rtol=1e-5, atol=1e-5)
    return rewritten


def test_an_rnn_step_reads_both_weights_packed_and_computes_the_same():
    args = rnn_args()
    program = egad.trace(rnn, *args)
    rewritten = assert_same_when_interpreted(program, args)
    assert len(packed_products(rewritten)) == 2
    assert not any(b.op == "matmul" for b in walk_bindings(loop_of(rewritten).regions[0]))
    # the packs run before the loop, once, and the loop takes them instead of the weights
    before = [b.op for b in rewritten.region.bindings[:rewritten.region.bindings.index(loop_of(rewritten))]]
    assert before.count("transpose") == 2 and before.count("reshape") == 2
    assert len(loop_of(rewritten).inputs) == len(loop_of(program).inputs)
    assert sorted(p.type.shape for p in loop_of(rewritten).regions[0].params[2:]) == [
        (3, 24, TILE), (3, 32, TILE), (4, 3, 32)]  # U [24, 48] and W [32, 48] packed, xs as it was


def test_the_original_program_is_left_as_it_was():
    args = rnn_args()
    program = egad.trace(rnn, *args)
    text = str(program)
    packed(program)
    assert str(program) == text


def test_a_weight_other_ops_also_read_stays_and_its_packed_copy_comes_after():
    def step_reading_w(U, xs, h0):
        return egad.fori_loop(0, xs.shape[0], lambda t, h: enp.sum(U) * xs[t] - (h @ U)[:, :32], h0)

    args = (f32(32, 64) * 0.2, f32(3, 2, 32), f32(2, 32))
    program = egad.trace(step_reading_w, *args)
    rewritten = assert_same_when_interpreted(program, args)
    assert len(packed_products(rewritten)) == 1
    assert len(loop_of(rewritten).inputs) == len(loop_of(program).inputs) + 1


def gates_step(Ui, Uf, h0):
    """Two gates' weights concatenated along their columns, as egad's fusion rules
    write an LSTM's: one product, read by slices."""
    U = enp.concatenate([Ui, Uf], axis=1)
    return egad.fori_loop(0, 3, lambda t, h: (h @ U)[:, :h.shape[1]] * 0.5, h0)


def test_a_concatenation_of_whole_tiles_is_packed_piece_by_piece():
    args = (f32(32, 32) * 0.2, f32(32, 32) * 0.2, f32(2, 32))
    program = egad.trace(gates_step, *args)
    rewritten = assert_same_when_interpreted(program, args)
    before = rewritten.region.bindings[:rewritten.region.bindings.index(loop_of(rewritten))]
    assert [b.op for b in before].count("transpose") == 2  # one pack a piece
    joined = before[-1]
    assert joined.op == "concat" and joined.attrs["axis"] == 0 and joined.outputs[0].type.shape == (4, 32, TILE)
    assert loop_of(rewritten).inputs[-1] is joined.outputs[0]
    assert_trees_close(build(program, cache=BuildCache(None))(*args), egad.interpret(program, *args),
                       rtol=1e-5, atol=1e-5)


def test_a_concatenation_whose_piece_is_not_whole_tiles_is_packed_whole():
    args = (f32(32, 40) * 0.2, f32(32, 24) * 0.2, f32(2, 32))  # 40 and 24 columns: 64 in all, 4 tiles
    program = egad.trace(gates_step, *args)
    rewritten = assert_same_when_interpreted(program, args)
    before = rewritten.region.bindings[:rewritten.region.bindings.index(loop_of(rewritten))]
    assert [b.op for b in before].count("transpose") == 1 and before[-1].op == "transpose"


def sliced_step(U, h0):  # h @ U read by a slice only: packed where nothing else stops it
    return egad.fori_loop(0, 3, lambda t, h: (h @ U)[:, :h.shape[1]], h0)


@pytest.mark.parametrize("why, fn, args", [
    ("one column tile", sliced_step, (f32(16, 16), f32(2, 16))),
    ("columns the tile does not divide", sliced_step, (f32(40, 40), f32(2, 40))),
    ("an elementwise op reads the product (its epilogue, fused into the product's tiles)",
     lambda U, h0: egad.fori_loop(0, 3, lambda t, h: enp.tanh(h @ U), h0), (f32(32, 32), f32(2, 32))),
    ("a weight the loop carries", lambda U, h0: egad.fori_loop(
        0, 3, lambda t, c: ((c[1] @ c[0])[:, :32], c[0][:, ::-1])[::-1], (U, h0)),
     (f32(32, 32), f32(32, 32))),
    ("the invariant on the left", lambda U, h0: egad.fori_loop(0, 3, lambda t, h: (U @ h)[:, :32], h0),
     (f32(32, 32), f32(32, 32))),
    ("a batched product", lambda U, h0: egad.fori_loop(0, 3, lambda t, h: (h @ U)[:, :, :32], h0),
     (f32(2, 32, 32), f32(2, 4, 32))),
    ("no loop", lambda U, h0: (h0 @ U)[:, :32], (f32(32, 32), f32(2, 32))),
])
def test_left_alone(why, fn, args):
    program = egad.trace(fn, *args)
    assert packed(program) is program, why


def test_a_loop_in_a_loop_packs_in_the_outer_body():
    def nested(U, xs, h0):
        def outer(s, h):
            return egad.fori_loop(0, xs.shape[1], lambda t, g: xs[s, t] - (g @ U)[:, 32:], h)
        return egad.fori_loop(0, xs.shape[0], outer, h0)

    args = (f32(32, 64) * 0.2, f32(2, 3, 2, 32), f32(2, 32))
    program = egad.trace(nested, *args)
    rewritten = assert_same_when_interpreted(program, args)
    (product,) = packed_products(rewritten)
    outer_body = loop_of(rewritten).regions[0]
    assert [b.op for b in outer_body.bindings].count("transpose") == 1


def test_the_packed_einsum_is_one_contraction_the_matmul_schedule_tiles():
    a, p = f32(8, 64), f32(4, 64, TILE)
    program = egad.trace(lambda a, p: enp.einsum(PACKED_SPEC, a, p), a, p)
    funcs = pipeline_prim_funcs(program)
    (name,) = [name for name in funcs if "matmul_packed" in name]
    assert funcs[name].attrs["egad.schedule_rule"] == "matmul-tiled-packed"
    assert not any("transpose" in name for name in funcs)
    np.testing.assert_allclose(build(program, cache=BuildCache(None))(a, p), np.einsum(PACKED_SPEC, a, p),
                               rtol=1e-5, atol=1e-5)


def test_an_rnn_gradient_built_agrees_with_the_interpreter():
    args = rnn_args(T=5, B=4, I=32, H=64)

    def loss(U, W, xs, h0):
        return enp.sum(rnn(U, W, xs, h0) ** 2)

    program = egad.value_and_grad(egad.trace(loss, *args), wrt=(0, 1))
    rewritten = packed(program)
    assert len(packed_products(rewritten)) >= 2  # the forward loop's two
    compiled = build(program, cache=BuildCache(None))
    assert_trees_close(compiled(*args), egad.interpret(program, *args), rtol=1e-4, atol=1e-4)


def test_the_build_packs_with_the_schedules_column_tile():
    target = resolve("llvm").tvm_target
    tile = schedule.matmul_column_tile(target, "float32")
    assert tile == 2 * schedule.VectorLanes(schedule._vector_bits(target))("float32")
    args = rnn_args(T=3, B=2, I=2 * tile, H=2 * tile)
    program = egad.trace(rnn, *args)
    funcs = pipeline_prim_funcs(pack_loop_invariant_operands(
        program, lambda dtype: schedule.matmul_column_tile(target, dtype)))
    assert sum("matmul_packed" in name for name in funcs) >= 1
    assert_trees_close(build(program, cache=BuildCache(None))(*args), egad.interpret(program, *args),
                       rtol=1e-5, atol=1e-5)

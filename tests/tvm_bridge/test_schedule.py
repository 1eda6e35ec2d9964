"""egad's CPU schedules (tvm_bridge/schedule.py): scheduled builds agree with the
interpreter for matmuls (odd, batched, transposed, symbolic), fused elementwise
functions and reductions, and the rules really apply (parallel and vectorized loops
in the scheduled TIR). No timing here: benchmarks/cpu_kernels.py measures speed."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.tvm_bridge import build, schedule
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.targets import resolve
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_prim_funcs

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def rule_errors_raise(monkeypatch):
    """A rule that raises fails the test here instead of leaving a function unscheduled."""
    monkeypatch.setattr(schedule, "RAISE_RULE_ERRORS", True)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def built(program):
    """Built afresh (not from the build cache), so the schedule rules run."""
    return build(program, cache=BuildCache(None))


def check_against_interpreter(fn, *args, specs=None, calls=None):
    program = egad.trace(fn, *(specs or args))
    compiled = built(program)
    for call_args in calls or [args]:
        assert_trees_close(compiled(*call_args), egad.interpret(program, *call_args), 1e-4, fn.__name__)


def scheduled_prim_funcs(fn, *args) -> dict:
    """The PrimFuncs of `fn`'s module after egad's Relax pipeline, by name."""
    return pipeline_prim_funcs(egad.trace(fn, *args))


def loop_kinds(func) -> set:
    """The annotated loop kinds in a PrimFunc's TVMScript: parallel, vectorized, unroll."""
    return set(re.findall(r"in T\.(parallel|vectorized|unroll)\(", func.script()))


def rules_applied(funcs: dict) -> set:
    return {str(func.attrs["egad.schedule_rule"]) for func in funcs.values()
            if func.attrs is not None and "egad.schedule_rule" in func.attrs}


# ---------------------------------------------------------------- values

def matmul(a, b):
    return a @ b


def matmul_a_transposed(a, b):
    return a.T @ b


def matmul_b_transposed(a, b):
    return a @ b.T


def batched_matmul_a_transposed(a, b):
    return enp.transpose(a, (0, 2, 1)) @ b


def transposed_also_returned(a, b):
    return a.T @ b, a.T * 2.0


def dense_tanh(a, b, bias):
    return enp.tanh(a @ b + bias)


MATMULS = {
    "square": (matmul, f32(64, 48), f32(48, 80)),
    "odd 7x13x5": (matmul, f32(7, 13), f32(13, 5)),
    "odd 33x70x37": (matmul, f32(33, 70), f32(70, 37)),
    "batched": (matmul, f32(3, 9, 17), f32(3, 17, 24)),
    "batch broadcast": (matmul, f32(3, 9, 17), f32(17, 24)),
    # rows fused across the batch: a row tile must never straddle two batch entries
    "batch broadcast, tile straddles": (matmul, f32(4, 6, 3), f32(3, 4)),
    "batch broadcast, odd": (matmul, f32(5, 7, 16), f32(16, 8)),
    "batch broadcast, whole slices per tile": (matmul, f32(8, 2, 16), f32(16, 8)),
    "batch broadcast float64": (matmul, RNG.standard_normal((4, 6, 3)), RNG.standard_normal((3, 4))),
    "A^T @ B": (matmul_a_transposed, f32(64, 40), f32(64, 48)),
    "A @ B^T": (matmul_b_transposed, f32(40, 64), f32(48, 64)),
    "batched A^T @ B": (batched_matmul_a_transposed, f32(3, 64, 40), f32(3, 64, 48)),
    "A^T also returned": (transposed_also_returned, f32(64, 40), f32(64, 48)),
    "A^T @ B, broadcast batch": (batched_matmul_a_transposed, f32(2, 64, 40), f32(64, 48)),
    "A^T @ batched B": (matmul_a_transposed, f32(64, 40), f32(2, 64, 48)),
    "A^T @ B, batch of one against two": (batched_matmul_a_transposed, f32(1, 64, 40), f32(2, 64, 48)),
    "bias + tanh epilogue": (dense_tanh, f32(32, 64), f32(64, 128), f32(128)),
    "float64": (matmul, RNG.standard_normal((20, 30)), RNG.standard_normal((30, 40))),
    "long depth (panels)": (matmul, f32(16, 1536), f32(1536, 64)),
    # many rows: blocks of A kept in cache (two blocks, four; with panels; after a batch)
    "row blocks": (matmul, f32(1024, 24), f32(24, 40)),
    "row blocks, panels, A^T": (matmul_a_transposed, f32(1536, 512), f32(1536, 48)),
    "two row blocks, panels": (matmul, f32(256, 1024), f32(1024, 32)),
    "row blocks, bias + tanh epilogue": (dense_tanh, f32(1024, 64), f32(64, 48), f32(48)),
    "row blocks in column groups, epilogue": (dense_tanh, f32(1024, 64), f32(64, 1024), f32(1024)),
    "row blocks, panels, epilogue": (dense_tanh, f32(512, 1024), f32(1024, 32), f32(32)),
    "batched row blocks": (matmul, f32(2, 1024, 16), f32(2, 16, 24)),
    "matrix @ vector": (matmul, f32(30, 40), f32(40)),
    "vector @ matrix": (matmul, f32(40), f32(40, 30)),
}


@pytest.mark.parametrize("name", MATMULS)
def test_matmul_matches_interpreter(name):
    fn, *args = MATMULS[name]
    check_against_interpreter(fn, *args)


@pytest.mark.parametrize("inner, other", [(3, 5), (40, 37)])
def test_matmul_with_symbolic_rows_matches_interpreter_for_every_length(inner, other):
    b = f32(inner, other)
    calls = [(f32(rows, inner), b) for rows in (1, 11, 29)]
    check_against_interpreter(matmul, specs=[egad.Spec(("T", inner), "float32"), b], calls=calls)


def scaled_tanh(a, b):
    return enp.tanh(a) * b + 1.0


def clipped(a):
    return enp.where(a > 0, a, 0.0)


@pytest.mark.parametrize("fn, args", [(scaled_tanh, (f32(300, 257), f32(257))), (clipped, (f32(100, 100),))],
                         ids=["tanh-scale-shift", "where"])
def test_fused_elementwise_matches_interpreter(fn, args):
    check_against_interpreter(fn, *args)


def tanh_plus_one(a):
    return enp.tanh(a) + 1.0


@pytest.mark.parametrize("shape", [("T", 19), (4, "T")], ids=["symbolic-outer", "symbolic-inner"])
def test_elementwise_with_symbolic_dims_matches_interpreter(shape):
    calls = [(f32(*[length if dim == "T" else dim for dim in shape]),) for length in (23, 1)]
    check_against_interpreter(tanh_plus_one, specs=[egad.Spec(shape, "float32")], calls=calls)


def sum_rows(a):
    return enp.sum(a, axis=0)


def sum_columns(a):
    return enp.sum(a, axis=1)


def max_of_squares(a):
    return enp.max(a * a, axis=-1)


def sum_all(a):
    return enp.sum(a * a)


def softmax(a):
    return enn.softmax(a, axis=-1)


@pytest.mark.parametrize("fn, shape", [(sum_rows, (300, 257)), (sum_columns, (300, 257)), (max_of_squares, (30, 64)),
                                       (sum_all, (300, 257)), (softmax, (20, 33))],
                         ids=lambda value: getattr(value, "__name__", str(value)))
def test_reduction_matches_interpreter(fn, shape):
    check_against_interpreter(fn, f32(*shape))


def test_reduction_with_symbolic_rows_matches_interpreter():
    calls = [(f32(rows, 19),) for rows in (1, 23)]
    check_against_interpreter(sum_rows, specs=[egad.Spec(("T", 19), "float32")], calls=calls)


def test_gradient_of_a_dense_layer_matches_interpreter():
    def loss(W, b, x):
        return enp.sum(enp.tanh(x @ W + b) ** 2)

    args = (f32(64, 96) * 0.1, f32(96), f32(32, 64))
    program = egad.value_and_grad(egad.trace(loss, *args), wrt=(0, 1, 2))
    assert_trees_close(built(program)(*args), egad.interpret(program, *args), 1e-4, "dense gradient")


# ---------------------------------------------------------------- the rules apply

def test_matmul_is_tiled_parallel_and_vectorized():
    funcs = scheduled_prim_funcs(dense_tanh, f32(32, 512), f32(512, 1024), f32(1024))
    (func,) = funcs.values()  # bias + tanh fused into the matmul's function
    assert func.attrs["egad.schedule_rule"] == "matmul-tiled-packed"
    assert {"parallel", "vectorized", "unroll"} <= loop_kinds(func)


def host_lanes() -> int:
    """float32 lanes of a vector on the host CPU."""
    return schedule._vector_bits(resolve("llvm").tvm_target) // 32


def host_column_tiles(columns: int) -> int:
    """Column tiles of a float32 product with this many columns on the host CPU: each
    MATMUL_VECTORS_PER_TILE vectors wide."""
    return columns // (schedule.MATMUL_VECTORS_PER_TILE * host_lanes())


def blocks_of_rows(rows: int, depth: int) -> int:
    """Blocks of A of a product with these many rows, at this depth (no depth panels):
    about MATMUL_BLOCK_ELEMENTS each, within MATMUL_BLOCK_ROWS."""
    low, high = schedule.MATMUL_BLOCK_ROWS
    return rows // min(max(schedule.MATMUL_BLOCK_ELEMENTS // depth, low), high)


def test_many_rows_are_cut_into_blocks_that_every_column_tile_reads():
    """(4096 x 128) @ (128 x 128): blocks of 512 rows (MATMUL_BLOCK_ELEMENTS at depth
    128, at most MATMUL_BLOCK_ROWS), 8 of them, the parallel loop over blocks x column
    tiles (two float32 vectors wide: 8 tiles of 16 columns with AVX2, 4 of 32 with
    AVX-512: too few to group)."""
    column_tiles = host_column_tiles(128)
    assert column_tiles < 2 * schedule.MATMUL_COLUMN_TILES_PER_GROUP
    (func,) = scheduled_prim_funcs(matmul, f32(4096, 128), f32(128, 128)).values()
    assert re.search(rf"in T\.parallel\(T\.int64\({blocks_of_rows(4096, 128) * column_tiles}\)\)", func.script())
    (few_rows,) = scheduled_prim_funcs(matmul, f32(64, 128), f32(128, 128)).values()
    assert re.search(rf"in T\.parallel\(T\.int64\({column_tiles}\)\)", few_rows.script())  # one block


def test_many_rows_and_columns_run_each_row_tile_over_a_group_of_column_tiles():
    """An RNN's input projection, (2048 x 128) @ (128 x 1024): each block's column tiles
    in groups of MATMUL_COLUMN_TILES_PER_GROUP, the parallel loop over blocks x groups,
    and under it the row tiles outside the column tiles of the group, so a row tile
    writes along its rows (column tiles outside the row tiles wrote 8 rows on 8 pages a
    register tile)."""
    per_group = schedule.MATMUL_COLUMN_TILES_PER_GROUP
    groups = host_column_tiles(1024) // per_group
    blocks = blocks_of_rows(2048, 128)
    row_tile = schedule.MATMUL_ROW_TILES[32 if host_lanes() == 16 else 16][0]  # AVX-512: 32 registers
    row_tiles = 2048 // blocks // row_tile
    (func,) = scheduled_prim_funcs(matmul, f32(2048, 128), f32(128, 1024)).values()
    assert re.search(rf"in T\.parallel\(T\.int64\({blocks * groups}\)\):\n(.*\n)*?"
                     rf"\s+for \w+ in range\(T\.int64\({row_tiles}\)\):\n"
                     rf"\s+for \w+ in range\(T\.int64\({per_group}\)\):", func.script())
    check_against_interpreter(matmul, f32(2048, 128), f32(128, 1024))


@pytest.mark.parametrize("mcpu, rows", [("skylake-avx512", 8), ("haswell", 4)])
def test_the_register_tile_has_as_many_rows_as_the_vector_registers_allow(mcpu, rows):
    """8 rows x 2 vectors of accumulators with AVX-512's 32 vector registers (4 x 2 left
    the FMA units waiting on their latency), 4 x 2 with AVX2's 16."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    (func,) = pipeline_prim_funcs(egad.trace(matmul, f32(64, 256), f32(256, 256)), target).values()
    assert set(re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", func.script())) == {str(rows)}


def test_a_few_rows_over_a_long_depth_start_the_threads_once():
    """(32 x 1024) @ (1024 x 256), an LSTM's adjoint step: two depth panels of 512. One
    parallel loop over the column tiles, each walking both panels, and the output zeroed
    inside it (the panels outside the parallel loop started the threads three times a
    call: to zero, and once a panel)."""
    column_tiles = host_column_tiles(256)
    (func,) = scheduled_prim_funcs(matmul, f32(32, 1024), f32(1024, 256)).values()
    assert re.findall(r"in T\.parallel\(T\.int64\((\d+)\)\)", func.script()) == [str(column_tiles)]
    check_against_interpreter(matmul, f32(32, 1024), f32(1024, 256))


def weight_gradient(xs, deltas):
    return enp.einsum("tki,tkj->ij", xs, deltas)


def test_one_large_block_of_a_keeps_its_depth_panels_outside_the_column_tiles():
    """An LSTM's weight gradient, (2048 x 256)^T @ (2048 x 1024): all 256 rows make one
    block, but A (2 MiB) is larger than MATMUL_WALKED_A_ELEMENTS, so the four depth
    panels of 512 stay outside the parallel loop over column tiles: each panel of A is
    read from cache by every column tile and B is packed once (each column tile walking
    all of A read it 32 times, from memory once A outgrew the cache)."""
    column_tiles = host_column_tiles(1024)
    args = f32(64, 32, 256), f32(64, 32, 1024)
    func = scheduled_prim_funcs(weight_gradient, *args)["matmul_tn"]
    first_loop = re.search(r"for \w+ in (.*):", func.script())
    assert first_loop[1] == "range(T.int64(1))"  # one block of rows
    # in each of the 4 panels, after A's pack (the next test), the column tiles in parallel
    assert re.search(rf"in range\(T\.int64\(4\)\):\n(\s+)(?:for .*?\n\1)?for \w+ in "
                     rf"T\.parallel\(T\.int64\({column_tiles}\)\)", func.script(), re.DOTALL)
    check_against_interpreter(weight_gradient, f32(16, 32, 256), f32(16, 32, 1024))


def test_a_weight_gradients_left_operand_is_packed_in_row_tiles_once_a_depth_panel():
    """The same product's A, read across its rows (x^T), is copied once per depth panel,
    in parallel over row tiles, into [row tiles, depth, rows of a tile] that every column
    tile reads contiguously; a product without depth panels outside its column tiles
    reads its A in place."""
    args = f32(64, 32, 256), f32(64, 32, 1024)
    script = scheduled_prim_funcs(weight_gradient, *args)["matmul_tn"].script()
    row_tile = schedule.MATMUL_ROW_TILES[2 * host_lanes()][0]  # 16 registers with 8 lanes, 32 with 16
    assert re.search(rf"_global = T\.sblock_alloc_buffer\(\(T\.int64\({256 // row_tile}\), T\.int64\(2048\), "
                     rf"T\.int64\({row_tile}\)\)", script)
    # first in each panel: the pack, parallel over row tiles, along the depth, a row tile's rows in a vector
    assert re.search(rf"in range\(T\.int64\(4\)\):\n\s+for \w+ in T\.parallel\(T\.int64\({256 // row_tile}\)\):\n"
                     rf"\s+for \w+ in range\(T\.int64\(512\)\):\n\s+for \w+ in T\.vectorized\(T\.int64\({row_tile}\)\)",
                     script)
    check_against_interpreter(weight_gradient, f32(16, 32, 256), f32(16, 32, 1024))
    (unpanelled,) = scheduled_prim_funcs(matmul_a_transposed, f32(512, 64), f32(512, 128)).values()
    assert "_global = T.sblock_alloc_buffer" not in unpanelled.script()


@pytest.mark.parametrize("fn, rows, packed", [(matmul, 32, False), (matmul, 128, True),
                                              (matmul_b_transposed, 32, True)])
def test_b_is_packed_for_many_rows_or_when_read_across_its_rows(fn, rows, packed):
    """A B read along its columns is read in place below MATMUL_MIN_ROWS_TO_PACK_CONTIGUOUS
    rows (an LSTM step's 32 rows ran 1.2x faster unpacked), packed from there on; a
    transposed B is packed from MATMUL_MIN_ROWS_TO_PACK rows (its vectors would gather
    across rows of B)."""
    a, b = f32(rows, 256), (f32(256, 512) if fn is matmul else f32(512, 256))
    (func,) = scheduled_prim_funcs(fn, a, b).values()
    assert bool(re.search(r"\bb_local = T\.sblock_alloc_buffer", func.script())) == packed
    check_against_interpreter(fn, a, b)


def test_transposed_operand_is_read_in_place_by_the_matmul():
    funcs = scheduled_prim_funcs(matmul_b_transposed, f32(32, 512), f32(1024, 512))
    assert rules_applied(funcs) == {"matmul-tiled-packed"} and len(funcs) == 1


def test_a_transposed_left_operand_is_read_in_place_too():
    """x.T @ g, every dense layer's weight gradient: no transpose kernel before it."""
    for fn, a, b in ((matmul_a_transposed, f32(512, 64), f32(512, 128)),
                     (batched_matmul_a_transposed, f32(3, 512, 64), f32(3, 512, 128))):
        funcs = scheduled_prim_funcs(fn, a, b)
        assert rules_applied(funcs) == {"matmul-tiled-packed"} and len(funcs) == 1, fn.__name__


@T.prim_func(private=True, s_tir=True)
def _transpose_then_matmul(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 48), "float32"),
                           C: T.Buffer((32, 48), "float32")):
    T.func_attr({"tirx.noalias": True})
    At = T.sblock_alloc_buffer((32, 64))
    for i, k in T.grid(32, 64):
        with T.sblock("transpose"):
            vi, vk = T.axis.remap("SS", [i, k])
            At[vi, vk] = A[vk, vi]
    for i, j, k in T.grid(32, 48, 64):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + At[vi, vk] * B[vk, vj]


def test_a_transpose_inside_the_product_kernel_is_inlined_into_its_pack():
    """A kernel whose product reads a transpose made in the same kernel: the transpose
    is inlined (the pack transposes) and the product scheduled. The check for "only
    moves data" compared against a TIR constructor function and raised, which left such
    kernels unscheduled."""
    func = schedule.schedule_prim_func(_transpose_then_matmul, schedule.VectorLanes(256))
    assert func.attrs["egad.schedule_rule"] == "matmul-tiled-packed"
    assert 'T.sblock("transpose")' not in func.script()
    library = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    a, b = f32(64, 32), f32(64, 48)
    c = tvm.runtime.empty((32, 48), "float32")
    library["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a.T @ b, rtol=1e-5, atol=1e-5)


def test_a_transposed_left_operand_with_broadcast_or_symbolic_batch_is_read_in_place():
    """The operand with fewer batch dims is broadcast over the other's, and a symbolic
    batch or depth (a trip count) compares by its symbol: still one contraction."""
    cases = [(batched_matmul_a_transposed, [f32(2, 64, 40), f32(64, 48)]),
             (matmul_a_transposed, [f32(64, 40), f32(2, 64, 48)]),
             (batched_matmul_a_transposed, [egad.Spec(("T", 64, 40), "float32"), egad.Spec(("T", 64, 48), "float32")]),
             (matmul_a_transposed, [egad.Spec(("T", 40), "float32"), egad.Spec(("T", 48), "float32")])]
    for fn, args in cases:
        funcs = scheduled_prim_funcs(fn, *args)
        kernels = [name for name in funcs if name != "shape_func"]  # symbolic shapes: a shape function too
        assert rules_applied(funcs) == {"matmul-tiled-packed"} and kernels == ["matmul_tn"], (fn.__name__, args)
    # a batch of one against two: R.matmul broadcasts it, after a transpose kernel
    funcs = scheduled_prim_funcs(batched_matmul_a_transposed, f32(1, 64, 40), f32(2, 64, 48))
    assert "matmul_tn" not in funcs and any("transpose" in name for name in funcs)


@pytest.mark.parametrize("rows", [1, 9, 40])
def test_a_transposed_left_operand_with_symbolic_depth_matches_interpreter(rows):
    specs = [egad.Spec(("T", 5), "float32"), egad.Spec(("T", 3), "float32")]
    check_against_interpreter(matmul_a_transposed, specs=specs, calls=[(f32(rows, 5), f32(rows, 3))])
    specs = [egad.Spec(("T", 4, 5), "float32"), egad.Spec(("T", 4, 3), "float32")]
    check_against_interpreter(batched_matmul_a_transposed, specs=specs, calls=[(f32(rows, 4, 5), f32(rows, 4, 3))])


def transposed_right_operand_shared(x, w):
    """W.T read by a product and by an elementwise op: TVM's FuseTransposeMatmul failed on
    such a module and then fused nothing in it."""
    wt = w.T
    return x @ wt, wt * 2.0


def gram(m):
    return m @ m.T  # both operands one value: TVM's pass failed on it too


def both_transposed(a, b):
    return a.T @ b.T


def vector_times_shared_transpose(v, w):
    wt = w.T
    return v @ wt, wt + 1.0


def same_operand_einsum(x):
    return enp.einsum("ik,jk->ij", x, x)


TRANSPOSED_PRODUCTS = [
    (transposed_right_operand_shared, (f32(24, 40), f32(56, 40)), "matmul_nt"),
    (gram, (f32(48, 40),), "matmul_nt"),
    (both_transposed, (f32(40, 24), f32(56, 40)), "matmul_tn"),
    (same_operand_einsum, (f32(48, 40),), "matmul_nt"),
    (vector_times_shared_transpose, (f32(40), f32(56, 40)), "NT_matmul"),  # FuseTransposeMatmul's
]


@pytest.mark.parametrize("fn, args, kernel", TRANSPOSED_PRODUCTS, ids=[c[0].__name__ for c in TRANSPOSED_PRODUCTS])
def test_every_product_of_a_transposed_operand_reads_it_in_place(fn, args, kernel):
    """A @ B^T, A^T @ B^T, X @ X^T and a vector times a shared W^T: one tiled contraction,
    the product's transposes read in place (a transpose kernel is left only for another
    reader of W^T), and the results match the interpreter."""
    funcs = scheduled_prim_funcs(fn, *args)
    (product,) = [name for name in funcs if name.startswith(kernel)]
    if args[0].ndim == 2:  # a vector times a matrix is a reduction, scheduled as one
        assert funcs[product].attrs["egad.schedule_rule"] == "matmul-tiled-packed"
    transposes = [name for name in funcs if "transpose" in name]
    assert len(transposes) == (fn in (transposed_right_operand_shared, vector_times_shared_transpose)), list(funcs)
    check_against_interpreter(fn, *args)


def sum_then_product(a, b, h, w):
    return (a + b) + h @ w  # FuseOps puts a + b before the product, in the product's function


def test_a_sum_only_the_epilogue_reads_is_inlined_into_it_and_the_product_scheduled():
    args = (f32(32, 128), f32(32, 128), f32(32, 128), f32(128, 128))
    funcs = scheduled_prim_funcs(sum_then_product, *args)
    (func,) = funcs.values()
    assert func.attrs["egad.schedule_rule"] == "matmul-tiled-packed"
    check_against_interpreter(sum_then_product, *args)


def gated_dense(a, w, bias):
    y = a @ w + bias  # read by two epilogue chains: tanh's and sigmoid's
    gate_columns = np.arange(w.shape[1]) % 3 == 0  # which columns take tanh, the others sigmoid
    return enp.where(gate_columns, enp.tanh(y), enn.sigmoid(y))


@pytest.mark.parametrize("rows, columns", [(8, 96), (32, 96), (1024, 96), (1024, 1024)])
def test_a_product_read_by_two_epilogue_chains_is_kept_for_the_second(rows, columns):
    """The write-back of the product's tiles computes one reader's chain only when that is
    its only reader; inlined for the first of two, the second read a product no tile wrote
    (TVM: "matmul_intermediate is used before its definition", the build failed). 1024 x
    1024: row blocks in groups of column tiles, the second chain per block and group."""
    args = (f32(rows, 24), f32(24, columns) / 4, f32(columns))
    funcs = scheduled_prim_funcs(gated_dense, *args)
    assert rules_applied(funcs) == {"matmul-tiled-packed"}, list(funcs)
    check_against_interpreter(gated_dense, *args)


def two_column_blocks(W, h):
    return enp.sum(h @ W[:, :64]) + enp.sum(h @ W[:, 128:])


def test_a_product_added_into_some_columns_of_a_larger_gradient_is_computed_whole():
    """W's gradient adds `h.T @ g` into columns 0-63 (then 128-191) of zeros(64, 192); FuseOps
    puts that scatter in the product's function. It is not an epilogue of the product's tiles
    (they reach columns 0-63 only): run tile by tile, columns 64-191 were never written."""
    args = (f32(64, 192), f32(32, 64))
    gradient = egad.value_and_grad(egad.trace(two_column_blocks, *args), wrt=0)
    assert "matmul-tiled-packed" in rules_applied(pipeline_prim_funcs(gradient))
    assert_trees_close(built(gradient)(*args), egad.interpret(gradient, *args), 1e-4, "two column blocks")


REVERSED_SLICES = {
    "x[::-1]": ((300, 64), lambda x: x[::-1]),
    "x[::-2]": ((300, 64), lambda x: x[::-2]),
    "x[290:10:-3]": ((300, 64), lambda x: x[290:10:-3]),
    "3-d x[::-1]": ((10, 30, 64), lambda x: x[::-1]),
    "3-d x[:, ::-1]": ((10, 30, 64), lambda x: x[:, ::-1]),
    "3-d x[:, ::-2]": ((10, 30, 64), lambda x: x[:, ::-2]),
}


@pytest.mark.parametrize("name", REVERSED_SLICES)
def test_the_gradient_of_a_reversed_slice_matches_interpreter(name):
    """The adjoint of a reversed slice is the cotangent reversed back (all of an axis) or
    added into rows counted down (tvm_bridge/index.py). Written as a division by the
    negative step, TVM's FlattenBuffer mis-simplified the latter once the elementwise
    rule fused the row loop with the split column loop (rows off by one), or the build
    failed (3-d)."""
    shape, sliced = REVERSED_SLICES[name]
    x = f32(*shape)
    weights = f32(*np.asarray(sliced(x)).shape)

    def loss(x, weights):
        return enp.sum(sliced(x) * weights)

    gradient = egad.value_and_grad(egad.trace(loss, x, weights), wrt=0)
    expected = np.zeros_like(x)
    sliced(expected)[...] = weights  # a basic slice is a view: the weights land where x was read
    np.testing.assert_array_equal(egad.interpret(gradient, x, weights)[1], expected)
    (value, grad), (expected_value, expected_grad) = built(gradient)(x, weights), egad.interpret(gradient, x, weights)
    assert_trees_close(grad, expected_grad, 1e-5, name)
    # the loss sums thousands of terms of either sign: its rounding scales with their magnitudes, not with it
    np.testing.assert_allclose(value, expected_value, rtol=0, atol=1e-6 * np.abs(sliced(x) * weights).sum())


def transposes_stacked(a, b):
    return enp.concatenate([a.T, b.T], axis=0)


def transpose_last_two(a):
    return enp.transpose(a, (0, 2, 1)) * 2.0


def transpose_of_bools(a):
    return (a > 0).T


@pytest.mark.parametrize("fn, args", [(transposes_stacked, (f32(64, 48), f32(64, 48))),
                                      (transpose_last_two, (f32(3, 64, 32),))])
def test_a_transpose_runs_in_square_tiles_of_vectors(fn, args):
    """Each vector of a transpose reads a vector's worth of rows of its input; a square
    tile reuses those rows' cache lines for as many output rows (untiled, an LSTM's four
    256 x 256 recurrent weights transposed into one 1024 x 256 took 132 us, tiled 23)."""
    lanes = host_lanes()
    (func,) = scheduled_prim_funcs(fn, *args).values()
    tile = rf"T\.int64\({lanes}\)\):\n\s+for \w+ in T\.vectorized\(T\.int64\({lanes}\)\)"
    assert re.search(tile, func.script())  # the tile's rows, then one vector of its columns
    check_against_interpreter(fn, *args)


def test_a_large_transpose_runs_its_tiles_in_parallel():
    lanes = host_lanes()
    (func,) = scheduled_prim_funcs(transposes_stacked, f32(256, 256), f32(256, 256)).values()
    assert re.findall(r"in T\.parallel\(T\.int64\((\d+)\)\)", func.script()) == [str(512 * 256 // lanes ** 2)]


def test_a_transpose_of_odd_sizes_or_bools_matches_interpreter():
    check_against_interpreter(transpose_last_two, f32(2, 37, 20))
    check_against_interpreter(transpose_of_bools, f32(48, 32))


def test_elementwise_function_is_parallel_and_vectorized():
    funcs = scheduled_prim_funcs(scaled_tanh, f32(300, 256), f32(256))
    (func,) = funcs.values()
    assert func.attrs["egad.schedule_rule"] == "elementwise-parallel-vector"
    assert {"parallel", "vectorized"} <= loop_kinds(func)


def tanh_returned_and_read(x, y):
    t = enp.tanh(x)  # an output of its own, and read by the next: one kernel with two outputs
    return t, t * y + 1.0


def sigmoid_of_a_sum(x, y):
    return enn.sigmoid(x + y * 2.0)  # `-(x + 2y)`, read 20 times by the polynomial, all at one point


def tanh_twice_side_by_side(x):
    t = enp.tanh(x)
    return enp.concatenate([t, t], axis=1)  # the polynomial read at two points: copied, computed twice


def top_level_loops(func) -> int:
    """Loop nests directly under a PrimFunc's root block."""
    body = func.body.block.body if hasattr(func.body, "block") else func.body
    return len(body.seq) if isinstance(body, tvm.tirx.SeqStmt) else 1


@pytest.mark.parametrize("fn, rows, parallel", [(tanh_returned_and_read, 32, False),
                                                (tanh_returned_and_read, 64, True),
                                                (tanh_returned_and_read, 512, True)])
def test_elementwise_nests_of_one_shape_run_row_by_row_in_one_loop(fn, rows, parallel):
    """Each row of every nest is made and read while in L1, not each nest over all of
    memory in turn; the merged rows are parallel when the nests together are work enough."""
    args = (f32(rows, 256), f32(rows, 256))
    (func,) = scheduled_prim_funcs(fn, *args).values()
    assert top_level_loops(func) == 1, func.script()
    assert ("parallel" in loop_kinds(func)) is parallel
    assert "vectorized" in loop_kinds(func)
    check_against_interpreter(fn, *args)


def test_an_expression_read_at_one_point_is_inlined_and_at_two_it_is_not():
    (func,) = scheduled_prim_funcs(sigmoid_of_a_sum, f32(64, 256), f32(64, 256)).values()
    assert top_level_loops(func) == 1 and "sblock_alloc_buffer" not in func.script(), func.script()
    assert {"parallel", "vectorized"} <= loop_kinds(func)
    check_against_interpreter(sigmoid_of_a_sum, f32(64, 256), f32(64, 256))
    (func,) = scheduled_prim_funcs(tanh_twice_side_by_side, f32(64, 256)).values()
    assert "sblock_alloc_buffer" in func.script()  # tanh's nest of its own
    check_against_interpreter(tanh_twice_side_by_side, f32(64, 256))


def nests_of_two_shapes(x, y):
    t = enp.tanh(x)
    return t, t[:, :128] * y  # a narrower second nest: not merged with the first


def tanh_and_its_transpose(x):
    t = enp.tanh(x)
    return t, t.T * 2.0  # the second nest reads the first's rows as columns: not merged


@pytest.mark.parametrize("fn, args", [(nests_of_two_shapes, (f32(32, 256), f32(32, 128))),
                                      (tanh_and_its_transpose, (f32(64, 64),))])
def test_nests_of_different_shapes_or_reads_across_rows_stay_apart(fn, args):
    (func,) = scheduled_prim_funcs(fn, *args).values()
    assert top_level_loops(func) == 2
    check_against_interpreter(fn, *args)


def concat_gates(a, b, c, d):
    return enp.concatenate([a, b, c, d], axis=1)


@pytest.mark.parametrize("rows, parallel", [(32, False), (256, True)])
def test_a_concatenation_runs_parallel_only_when_large(rows, parallel):
    """Moving data runs at memory speed: a small concatenation (an LSTM's four gate
    gradients, 32 x 1024, every reverse step) is faster serial than through a parallel
    launch; a large one (256 x 1024) is not. A polynomial of as many elements is parallel."""
    args = [f32(rows, 256) for _ in range(4)]
    (func,) = scheduled_prim_funcs(concat_gates, *args).values()
    assert func.attrs["egad.schedule_rule"] == "elementwise-parallel-vector"
    assert ("parallel" in loop_kinds(func)) == parallel
    assert "vectorized" in loop_kinds(func)
    check_against_interpreter(concat_gates, *args)
    (heavy,) = scheduled_prim_funcs(lambda a: enp.tanh(a), f32(rows, 1024)).values()
    assert "parallel" in loop_kinds(heavy)


def concat_of_computed(a, b, c, d):
    return enp.concatenate([a * 2.0, b + 1.0, enp.tanh(c), d * d], axis=-1)


def concat_rows_of_computed(a, b, c, d):
    return enp.concatenate([a * 2.0, b + 1.0, enp.tanh(c), d * d], axis=0)


@pytest.mark.parametrize("fn, pieces", [(concat_of_computed, 4), (concat_rows_of_computed, 1)])
def test_a_concatenation_of_computed_pieces_computes_each_piece_alone(fn, pieces):
    """Vectorized as one loop, a concatenation whose operands are computed in it (the
    fused gate gradients of an LSTM's reverse step) computes every piece for every
    element and selects one; its innermost loop is cut at the pieces' bounds instead,
    one vectorized loop a piece. Cut along an outer axis, it stays one loop."""
    args = [f32(32, 256) for _ in range(4)]
    (func,) = scheduled_prim_funcs(fn, *args).values()
    assert func.attrs["egad.schedule_rule"] == "elementwise-parallel-vector"
    assert len(re.findall(r"in T\.vectorized\(", func.script())) == pieces
    check_against_interpreter(fn, *args)

def tanh_chain(a):
    for _ in range(8):  # float32 tanh reads its input a dozen times (a polynomial)
        a = enp.tanh(a * 0.5) + a
    return a


def test_a_chain_of_polynomials_is_scheduled_without_copying_each_into_the_next():
    # inlining every tanh into the next would write the first one out 12 ** 8 times
    funcs = scheduled_prim_funcs(tanh_chain, f32(64, 64))
    (func,) = funcs.values()
    assert func.attrs["egad.schedule_rule"] == "elementwise-parallel-vector"
    assert len(func.script()) < 200_000
    check_against_interpreter(tanh_chain, f32(64, 64))


def diamond_chain(a):
    for _ in range(16):  # each step reads a twice, once in each of two ops
        a = enp.sin(a) * 0.5 + enp.cos(a) * 0.5
    return a


def test_a_chain_of_values_each_read_by_two_ops_is_not_copied_into_both():
    """Inlined into both of its readers, each step doubled the kernel (12 steps took
    1.6 s to build, 16 would have been 2**16 copies of the first): found by fuzzing.
    Inlining stops where an expression would grow past MAX_INLINED_EXPRESSION."""
    x = np.random.default_rng(0).uniform(-1, 1, (64, 64))
    (func,) = scheduled_prim_funcs(diamond_chain, x).values()
    assert func.attrs["egad.schedule_rule"] == "elementwise-parallel-vector"
    assert len(func.script()) < 200_000
    check_against_interpreter(diamond_chain, x)


def test_sum_over_rows_is_parallel_over_columns_and_vectorized():
    funcs = scheduled_prim_funcs(sum_rows, f32(300, 256))
    assert rules_applied(funcs) == {"reduction-parallel-spatial"}
    assert {"parallel", "vectorized"} <= set().union(*map(loop_kinds, funcs.values()))


def sum_over_steps_and_rows(a):
    return enp.sum(a, axis=(0, 1))


# tasks by the host's float32 lanes: AVX-512's 16, AVX2's 8 (1024 columns in blocks of 16
# vectors of 8 leave 8 tasks; 48 columns, too few for 4 tasks of 2 vectors, go one vector a task)
@pytest.mark.parametrize("fn, shape, blocks", [(sum_over_steps_and_rows, (8, 32, 1024), {16: 4, 8: 8}),
                                               (sum_rows, (300, 256), {16: 4, 8: 4}),
                                               (sum_rows, (300, 64), {16: 4, 8: 4}),
                                               (sum_rows, (1000, 48), {16: 3, 8: 6})])
def test_a_sum_over_rows_reads_each_row_in_blocks_of_vectors(fn, shape, blocks):
    """Each parallel task sums a block of columns several vectors wide (a run of cache
    lines from every row), leaving a few tasks to share out."""
    if host_lanes() not in blocks:
        pytest.skip(f"no expectation for {host_lanes()} float32 lanes")
    (func,) = scheduled_prim_funcs(fn, f32(*shape)).values()
    (tasks,) = re.findall(r"in T\.parallel\(T\.int64\((\d+)\)\)", func.script())
    assert int(tasks) == blocks[host_lanes()]
    check_against_interpreter(fn, f32(*shape))


def sum_of_exp_per_row(a):
    return enp.sum(enp.exp(a), axis=1)


def test_a_sum_along_the_contiguous_axis_accumulates_in_vector_lanes():
    funcs = scheduled_prim_funcs(sum_of_exp_per_row, f32(300, 256))
    assert rules_applied(funcs) == {"reduction-parallel-spatial"}
    (func,) = funcs.values()
    assert {"parallel", "vectorized"} <= loop_kinds(func) and "_rf" in func.script()  # the lanes' partials
    check_against_interpreter(sum_of_exp_per_row, f32(300, 256))


def squared_error(a, b):
    return enp.sum((a - b) * (a - b))


def test_a_loss_summed_to_one_value_accumulates_in_vector_lanes():
    """A function's one reduction to a single value (a loss) accumulates per vector lane
    too: serial, each add waited on the one before (7.5 us for 32 x 256 products, 0.4 in
    lanes). Also in float64 and with a NaN, which the sum keeps."""
    funcs = scheduled_prim_funcs(squared_error, f32(32, 256), f32(32, 256))
    (func,) = funcs.values()
    assert "vectorized" in loop_kinds(func) and "_rf" in func.script()
    check_against_interpreter(squared_error, f32(32, 256), f32(32, 256))
    a, b = RNG.standard_normal((64, 64)), RNG.standard_normal((64, 64))
    check_against_interpreter(squared_error, a, b)
    a[3, 5] = np.nan
    assert np.isnan(built(egad.trace(squared_error, a, b))(a, b))


def test_max_and_min_reductions_return_nan_where_a_nan_is_reduced():
    def extremes(a):
        return enp.max(a, axis=1), enp.min(a, axis=0), enp.max(a)

    a = f32(40, 64)
    a[3, 17] = a[5, 0] = a[7, 63] = np.nan
    program = egad.trace(extremes, a)
    for got, want in zip(built(program)(a), egad.interpret(program, a)):
        np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN, equal elsewhere


def test_tiny_functions_are_left_alone():
    funcs = scheduled_prim_funcs(tanh_plus_one, f32(3, 4))
    assert rules_applied(funcs) == set()


def test_a_rule_that_raises_leaves_its_function_unscheduled_and_the_build_correct(monkeypatch):
    def broken(sch, lanes_of):
        raise RuntimeError("broken rule")

    monkeypatch.setattr(schedule, "RAISE_RULE_ERRORS", False)
    monkeypatch.setattr(schedule, "SCHEDULE_RULES", (schedule.ScheduleRule("broken", broken),))
    failures = schedule.RULE_COUNTS["failed:broken"]
    check_against_interpreter(scaled_tanh, f32(300, 257), f32(257))
    assert schedule.RULE_COUNTS["failed:broken"] > failures


def test_a_finishing_step_that_raises_leaves_the_schedule_it_would_refine(monkeypatch):
    def broken(func):
        raise RuntimeError("broken finish")

    matmul_rule = next(rule for rule in schedule.SCHEDULE_RULES if rule.name == "matmul-tiled-packed")
    rules = tuple(schedule.ScheduleRule(rule.name, rule.apply, broken) if rule is matmul_rule else rule
                  for rule in schedule.SCHEDULE_RULES)
    monkeypatch.setattr(schedule, "RAISE_RULE_ERRORS", False)
    monkeypatch.setattr(schedule, "SCHEDULE_RULES", rules)
    failures = schedule.RULE_COUNTS["failed:matmul-tiled-packed.finish"]
    funcs = scheduled_prim_funcs(matmul_a_transposed, f32(512, 128), f32(512, 256))
    assert rules_applied(funcs) == {"matmul-tiled-packed"}
    assert schedule.RULE_COUNTS["failed:matmul-tiled-packed.finish"] > failures
    check_against_interpreter(matmul_a_transposed, f32(512, 128), f32(512, 256))


def test_llvm_targets_get_the_cpu_pipeline_and_gpus_the_gpu_one():
    assert schedule.relax_pipeline("llvm").info.name == "egad.CPUPipeline"
    assert schedule.relax_pipeline({"kind": "cuda"}).info.name == "egad.GPUPipeline"
    assert schedule.relax_pipeline({"kind": "c"}) is None  # TVM's default
    assert "mcpu" in resolve("llvm").tvm_target.attrs


EINSUMS = [("tki,tkj->ij", (6, 4, 5), (6, 4, 3)), ("bij,bjk->kib", (2, 3, 4), (2, 4, 5)), ("ij,kj->ik", (3, 4), (5, 4)),
           ("ijk,jkl->il", (2, 3, 4), (3, 4, 5)), ("ij,ij->", (3, 4), (3, 4)), ("ii->i", (3, 3), None),
           ("ij,j->i", (3, 4), (4,)), ("ab,cd->abcd", (2, 3), (4, 5)),
           # left operand read transposed in place, with the right one plain, transposed, batched
           ("ki,kj->ij", (4, 3), (4, 5)), ("ki,jk->ij", (4, 3), (5, 4)), ("bki,bkj->bij", (2, 4, 3), (2, 4, 5)),
           ("tbki,tbkj->bij", (3, 2, 4, 3), (3, 2, 4, 5)),
           # one operand's axes summed away (R.sum), the kept ones in order or not
           ("tab->b", (3, 4, 5), None), ("tab->ba", (3, 4, 5), None), ("abc->", (2, 3, 4), None),
           ("ab->a", (3, 4), None)]


@pytest.mark.parametrize("spec, a, b", EINSUMS, ids=[spec for spec, *_ in EINSUMS])
def test_einsum_lowered_as_a_matmul_or_not_matches_interpreter(spec, a, b):
    operands = [RNG.standard_normal(a)] + ([RNG.standard_normal(b)] if b else [])
    check_against_interpreter(lambda *x: enp.einsum(spec, *x), *operands)


def test_an_einsum_summing_axes_away_is_a_sum_for_every_length():
    # the bias gradient rules/batching.py writes after a reverse loop: TVM's einsum looped
    # over t innermost, a row of the stack apart at every read
    program = egad.trace(lambda G: enp.einsum("tab->b", G), egad.Spec(("T", 4, 24), "float32"))
    compiled = built(program)
    assert "R.einsum" not in compiled.relax_text and "R.sum" in compiled.relax_text
    for T in (1, 7):
        G = f32(T, 4, 24)
        np.testing.assert_allclose(compiled(G), G.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


def test_einsum_over_a_symbolic_trip_count_is_one_matmul_for_every_length():
    program = egad.trace(lambda A, B: enp.einsum("tki,tkj->ij", A, B),
                         egad.Spec(("T", 4, 5), "float32"), egad.Spec(("T", 4, 3), "float32"))
    before = schedule.RULE_COUNTS["matmul-tiled-packed"]
    compiled = built(program)
    # one contraction reading the stacked A transposed in place: no transpose kernel first
    assert "matmul_tn" in compiled.relax_text and "R.einsum" not in compiled.relax_text
    assert "permute_dims" not in compiled.relax_text
    assert schedule.RULE_COUNTS["matmul-tiled-packed"] == before + 1
    for T in (1, 9):
        A, B = f32(T, 4, 5), f32(T, 4, 3)
        np.testing.assert_allclose(compiled(A, B), np.einsum("tki,tkj->ij", A, B), rtol=1e-5, atol=1e-5)

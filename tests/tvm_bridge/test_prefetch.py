"""Software prefetch around a matmul's packing loop (tvm_bridge/prefetch.py): where the
pack reads a few cache lines from each of many rows it prefetches the row
PACK_PREFETCH_ROWS ahead, and the row tiles after it the next pack's rows, within the
buffer; elsewhere nothing is added; the products still agree with the interpreter, and
LLVM emits the prefetch instructions. No timing here: tvm_bridge/prefetch.py cites
what was measured."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
import tvm
from tvm import s_tir, tirx

import egad
import egad.numpy as enp
from egad.tvm_bridge import build, prefetch, schedule
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.targets import resolve
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_prim_funcs

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def rule_errors_raise(monkeypatch):
    """A pack prefetch that raises fails the test here instead of leaving it out (the
    next trip's prefetch raises in every test here: tests/tvm_bridge/conftest.py)."""
    monkeypatch.setattr(schedule, "RAISE_RULE_ERRORS", True)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def weight_gradient(x, delta):
    return x.T @ delta


def projection(x, w):
    return x @ w


def prefetches(func) -> list[str]:
    return re.findall(r"T\.prefetch\(.*\)", func.script())


def prefetches_by_loop(stmt, found=None) -> dict:
    """{a loop's extent: the prefetches first in its body}, over a TIR statement."""
    found = {} if found is None else found
    if isinstance(stmt, tirx.For):
        body = stmt.body.seq if isinstance(stmt.body, tirx.SeqStmt) else [stmt.body]
        count = sum(1 for child in body if isinstance(child, tirx.Evaluate) and "prefetch" in str(child.value))
        if count:
            found[int(stmt.extent)] = count
        prefetches_by_loop(stmt.body, found)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            prefetches_by_loop(child, found)
    elif isinstance(stmt, (s_tir.SBlockRealize, s_tir.SBlock)):
        prefetches_by_loop(stmt.block.body if isinstance(stmt, s_tir.SBlockRealize) else stmt.body, found)
    return found


def host_lines_a_tile() -> int:
    """Cache lines of one float32 column tile (MATMUL_VECTORS_PER_TILE vectors)."""
    vector_bytes = schedule._vector_bits(resolve("llvm").tvm_target) // 8
    return max(schedule.MATMUL_VECTORS_PER_TILE * vector_bytes // prefetch.CACHE_LINE_BYTES, 1)


def host_row_tile() -> int:
    """Rows of a register tile on the host CPU (8 with AVX-512's 32 registers, else 4)."""
    return schedule.MATMUL_ROW_TILES[32 if host_lines_a_tile() == 2 else 16][0]


def assert_each_pack_and_its_row_tiles_prefetch(func, rows: int = 128, packed_rows: int = 512):
    """Each pack of `packed_rows` prefetches one row per trip, each of its row tiles (over
    `rows` rows of A) an equal share of the next pack's rows: a prefetch a cache line."""
    row_tiles = rows // host_row_tile()
    lines = host_lines_a_tile()
    assert prefetches_by_loop(func.body) == {packed_rows: lines, row_tiles: packed_rows // row_tiles * lines}


def test_a_pack_of_many_rows_prefetches_its_rows_ahead_and_the_row_tiles_the_next_packs():
    """x.T @ delta over 512 rows of delta (a weight gradient, 128 columns of x): each
    column tile's pack reads one tile of each of the 512 rows and prefetches each of its
    cache lines PACK_PREFETCH_ROWS rows ahead; the row tiles computing after it prefetch
    the next column tile's rows, 512 / (row tiles) each; every index clamped within
    delta."""
    x, delta = f32(512, 128), f32(512, 256)
    program = egad.trace(weight_gradient, x, delta)
    (func,) = pipeline_prim_funcs(program).values()
    assert_each_pack_and_its_row_tiles_prefetch(func)
    for call in prefetches(func):
        assert "T.int64(511)" in call, call
    ahead = rf"T\.max\(\w+ \+ T\.int64\({prefetch.PACK_PREFETCH_ROWS}\), T\.int64\(0\)\), T\.int64\(511\)\)"  # row + 16
    assert sum(bool(re.search(ahead, call)) for call in prefetches(func)) == host_lines_a_tile()
    assert_trees_close(build(program, cache=BuildCache(None))(x, delta), egad.interpret(program, x, delta), 1e-4,
                       "weight gradient")


def test_the_next_depth_panel_is_prefetched_where_the_panels_are_inside_the_column_tiles():
    """(128 x 1024) @ (1024 x 256): A one small block, each column tile walks two depth
    panels of 512 rows, packing each inside the panel loop; the row tiles computing with
    one panel prefetch the next panel's rows."""
    a, b = f32(128, 1024), f32(1024, 256)
    program = egad.trace(projection, a, b)
    (func,) = pipeline_prim_funcs(program).values()
    assert_each_pack_and_its_row_tiles_prefetch(func)
    assert "T.int64(1023)" in prefetches(func)[-1]  # the second panel's prefetch of a third, clamped
    assert_trees_close(build(program, cache=BuildCache(None))(a, b), egad.interpret(program, a, b), 1e-4, "a @ b")


@pytest.mark.parametrize("fn, args, packed", [
    (weight_gradient, (f32(32, 128), f32(32, 256)), "delta_local"),  # 32 rows of delta: in cache
    (projection, (f32(2048, 128), f32(128, 1024)), "w_local"),  # a group's panel: long runs along each row
])
def test_a_pack_of_few_rows_or_of_long_runs_along_them_prefetches_nothing(fn, args, packed):
    (func,) = pipeline_prim_funcs(egad.trace(fn, *args)).values()
    assert f"{packed} = T.sblock_alloc_buffer" in func.script() and not prefetches(func)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 assembly")
def test_llvm_emits_the_prefetch_instructions():
    (func,) = pipeline_prim_funcs(egad.trace(weight_gradient, f32(512, 128), f32(512, 256))).values()
    assert prefetches(func)
    target = resolve("llvm").tvm_target
    module = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target)
    assembly = module.mod.inspect_source("asm") if hasattr(module, "mod") else module.inspect_source("asm")
    assert "prefetcht0" in assembly


# ---------------------------------------------------------------- the next trip's rows

def rnn_both_ways(W, xs, h0, back_steps=8):
    """An RNN over xs forward, then another backward (a reversed scan) over its first
    `back_steps` rows: a stack of another shape, so a kernel of its own reads its rows
    (over all of xs, both loops read theirs with one kernel)."""
    def step(h, x):
        h = enp.tanh(x + h @ W)
        return h, h

    forward, _ = egad.scan(step, h0, xs)
    backward, _ = egad.scan(step, forward, xs[:back_steps], reverse=True)
    return enp.sum(backward ** 2)


RNN_ARGS = (f32(64, 64) / 8, f32(16, 32, 64), f32(32, 64))


def counter_prefetches(funcs: dict) -> dict:
    """{kernel name: the steps its prefetches take the counter by}, over kernels with any."""
    found = {}
    for name, func in funcs.items():
        steps = set(re.findall(r"T\.prefetch\(.*?i\w*\[\(\)\] \+ T\.int64\((-?\d+)\)", func.script()))
        if steps:
            found[name] = {int(step) for step in steps}
    return found


def test_a_loop_body_prefetches_the_rows_its_next_trip_reads():
    """A loop running forward reads xs[t] and prefetches xs[t + 1]; one running in
    reverse reads xs[t] and prefetches xs[t - 1]. The results agree with the
    interpreter."""
    program = egad.trace(rnn_both_ways, *RNN_ARGS)
    steps = counter_prefetches(pipeline_prim_funcs(program))
    assert {1} in steps.values() and {-1} in steps.values(), steps
    assert_trees_close(build(program, cache=BuildCache(None))(*RNN_ARGS), egad.interpret(program, *RNN_ARGS), 1e-4,
                       "rnn both ways")


def test_a_kernel_both_loops_call_prefetches_neither_way():
    """The same step both ways: both bodies read xs[t] with one kernel, which the two
    loops step through in opposite directions."""
    program = egad.trace(lambda W, xs, h0: rnn_both_ways(W, xs, h0, back_steps=len(xs)), *RNN_ARGS)
    assert not counter_prefetches(pipeline_prim_funcs(program))
    assert_trees_close(build(program, cache=BuildCache(None))(*RNN_ARGS), egad.interpret(program, *RNN_ARGS), 1e-4,
                       "the same step both ways")


def test_a_kernel_the_prefetch_fails_on_goes_without_and_the_build_stands(monkeypatch):
    def broken(func, counter, step):
        raise RuntimeError("broken prefetch")

    monkeypatch.setattr(prefetch, "_prefetch_next_trip", broken)
    monkeypatch.setattr(prefetch, "RAISE_ERRORS", False)
    failed = sum(prefetch.FAILED.values())
    program = egad.trace(rnn_both_ways, *RNN_ARGS)
    assert not counter_prefetches(pipeline_prim_funcs(program))
    assert sum(prefetch.FAILED.values()) > failed
    assert_trees_close(build(program, cache=BuildCache(None))(*RNN_ARGS), egad.interpret(program, *RNN_ARGS), 1e-4,
                       "rnn both ways")

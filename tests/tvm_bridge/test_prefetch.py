"""Software prefetch in a matmul's packing loop (tvm_bridge/prefetch.py): where the
pack reads a few cache lines from each of many rows it prefetches the row
PACK_PREFETCH_ROWS ahead, within the buffer; elsewhere nothing is added; the products
still agree with the interpreter, and LLVM emits the prefetch instructions. No timing
here: tvm_bridge/prefetch.py cites what was measured."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
import tvm

import egad
from egad.tvm_bridge import build, prefetch, schedule
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.targets import resolve
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_prim_funcs

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def weight_gradient(x, delta):
    return x.T @ delta


def projection(x, w):
    return x @ w


def prefetches(func) -> list[str]:
    return re.findall(r"T\.prefetch\(.*\)", func.script())


def host_lines_a_tile() -> int:
    """Cache lines of one float32 column tile (MATMUL_VECTORS_PER_TILE vectors)."""
    vector_bytes = schedule._vector_bits(resolve("llvm").tvm_target) // 8
    return max(schedule.MATMUL_VECTORS_PER_TILE * vector_bytes // prefetch.CACHE_LINE_BYTES, 1)


def test_a_pack_of_many_rows_prefetches_the_rows_ahead_within_the_buffer():
    """x.T @ delta over 512 rows of delta (a weight gradient): each column tile's pack
    reads one tile of each of the 512 rows, and prefetches each of its cache lines
    PACK_PREFETCH_ROWS rows ahead, the row index clamped to the last row."""
    x, delta = f32(512, 128), f32(512, 256)
    (func,) = pipeline_prim_funcs(egad.trace(weight_gradient, x, delta)).values()
    found = prefetches(func)
    assert len(found) == host_lines_a_tile()
    for call in found:
        assert f"+ T.int64({prefetch.PACK_PREFETCH_ROWS})" in call and "T.int64(511)" in call, call
    program = egad.trace(weight_gradient, x, delta)
    assert_trees_close(build(program, cache=BuildCache(None))(x, delta), egad.interpret(program, x, delta), 1e-4,
                       "weight gradient")


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

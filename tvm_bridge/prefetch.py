"""Software prefetch of the rows a matmul's packing loop copies (tvm_bridge/schedule.py
packs B's panel for each column tile into a local buffer).

A pack reads one column tile of B (32 floats, two cache lines) from each row of a
depth panel. When B has long rows (an LSTM's gradient of the gates, 2048 x 1024: a row
is one 4 KiB page) each of those reads is on another page, where the hardware
prefetchers stop, so the pack waits on memory for every row while the cores' FMA units
idle. The pack's row loop here prefetches the row PACK_PREFETCH_ROWS ahead of the one
it copies. Measured on 2 Zen 4 cores (GFlop/s, before -> after): (2048 x 128)^T @
(2048 x 1024) 196 -> 199-202, (2048 x 256)^T @ (2048 x 1024) 197 -> 201-204; the
products that pack short rows unchanged.

TVM's schedule primitives cannot add a statement that is not a block, so this rewrites
the scheduled function: `tirx.prefetch` (LLVM's llvm.prefetch) before the body of the
pack's row loop.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .tir_blocks import moves_data

PACK_PREFETCH_ROWS = 16
MIN_PACKED_ROWS = 4 * PACK_PREFETCH_ROWS
MAX_LINES_A_ROW = 2
CACHE_LINE_BYTES = 64
_INDEX = "int64"  # the scheduled loops' variables (TVM's Relax lowering makes int64 loops)


def prefetch_packed_rows(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with each packing loop prefetching the source rows it copies next."""
    prefetches = {}
    _find_packs(func.body, [], prefetches)
    if not prefetches:
        return func
    return func.with_body(_insert(func.body, prefetches))


def _find_packs(stmt, loops: list, prefetches: dict) -> None:
    """Record, for each pack's row loop, the prefetches to put before its body."""
    if isinstance(stmt, tirx.For):
        _find_packs(stmt.body, [*loops, stmt], prefetches)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _find_packs(child, loops, prefetches)
    elif isinstance(stmt, s_tir.SBlockRealize):
        if _is_pack(stmt.block, loops):
            row_loop, statements = _prefetches(stmt, loops)
            if statements:
                prefetches[row_loop] = statements
        else:
            _find_packs(stmt.block.body, loops, prefetches)
    elif isinstance(stmt, s_tir.SBlock):
        _find_packs(stmt.body, loops, prefetches)


def _is_pack(block, loops: list) -> bool:
    """A block copying a global buffer into a local one, a vector at a time, under a
    loop over many of the source's rows."""
    return (moves_data(block) and len(block.reads) == 1 and len(block.writes) == 1
            and block.reads[0].source.scope() == "global" and block.writes[0].source.scope() == "local"
            and len(loops) >= 2 and loops[-1].kind == tirx.ForKind.VECTORIZED
            and loops[-2].kind == tirx.ForKind.SERIAL and _worth_prefetching(loops[-2], loops[-1], block))


def _worth_prefetching(row_loop, vector, block) -> bool:
    """Many rows (a few, a product's short depth, are in cache), each read in a few
    cache lines (the hardware prefetchers follow a longer run along a row)."""
    if not (isinstance(row_loop.extent, tirx.IntImm) and isinstance(vector.extent, tirx.IntImm)):
        return False
    vector_bytes = int(vector.extent) * tvm.DataType(block.reads[0].source.dtype).bits // 8
    return int(row_loop.extent) >= MIN_PACKED_ROWS and vector_bytes <= MAX_LINES_A_ROW * CACHE_LINE_BYTES


def _prefetches(realize, loops: list) -> tuple:
    """(the pack's row loop, a prefetch of each cache line of the vector it reads
    PACK_PREFETCH_ROWS trips of that loop ahead)."""
    block = realize.block
    read = block.reads[0]
    vector, row_loop = loops[-1], loops[-2]
    bindings = {iter_var.var: value for iter_var, value in zip(block.iter_vars, realize.iter_values)}
    ahead = {vector.loop_var: tirx.const(0, _INDEX),
             row_loop.loop_var: row_loop.loop_var + tirx.const(PACK_PREFETCH_ROWS, _INDEX)}
    start = [_substitute(_substitute(axis.min, bindings), ahead) for axis in read.region]
    if any(index is None for index in start):
        return row_loop, []
    element_bytes = tvm.DataType(read.source.dtype).bits // 8
    vector_bytes = int(vector.extent) * element_bytes
    statements = []
    shape = read.source.shape
    for line in range(0, vector_bytes, CACHE_LINE_BYTES):
        index = [*start[:-1], start[-1] + tirx.const(line // element_bytes, _INDEX)]
        # within the buffer: the last rows' prefetches would point past its end, and an
        # address past the end is undefined to LLVM even where nothing reads it
        index = [tirx.Min(at, extent - tirx.const(1, _INDEX)) for at, extent in zip(index, shape)]
        address = tirx.address_of(tirx.BufferLoad(read.source, index))
        # (address, 0: read, 3: keep in every cache level, 1: data cache)
        statements.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0, 3, 1)))
    return row_loop, statements


_AFFINE = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)


def _substitute(expr, values: dict):
    """`expr` (a block's index: loop variables, constants and integer arithmetic) with
    `values` for its variables; None for an index of another kind (no prefetch then).
    TVM 0.27 exposes no Substitute to Python."""
    if expr is None or isinstance(expr, tirx.IntImm):
        return expr
    if isinstance(expr, tirx.Var):
        return next((value for var, value in values.items() if var.same_as(expr)), expr)
    if isinstance(expr, _AFFINE):
        a, b = _substitute(expr.a, values), _substitute(expr.b, values)
        return None if a is None or b is None else type(expr)(a, b)
    return None


def _insert(stmt, prefetches: dict):
    """`stmt` with `prefetches[loop]` before the body of each of those loops."""
    if isinstance(stmt, tirx.For):
        body = _insert(stmt.body, prefetches)
        statements = next((found for loop, found in prefetches.items() if loop.same_as(stmt)), None)
        if statements is not None:
            body = tirx.SeqStmt([*statements, body])
        if body.same_as(stmt.body):
            return stmt
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, tirx.SeqStmt):
        seq = [_insert(child, prefetches) for child in stmt.seq]
        return stmt if all(new.same_as(old) for new, old in zip(seq, stmt.seq)) else tirx.SeqStmt(seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = _insert(stmt.block, prefetches)
        return stmt if block.same_as(stmt.block) else s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, block)
    if isinstance(stmt, s_tir.SBlock):
        body = _insert(stmt.body, prefetches)
        if body.same_as(stmt.body):
            return stmt
        return s_tir.SBlock(stmt.iter_vars, stmt.reads, stmt.writes, stmt.name_hint, body, stmt.init,
                            stmt.alloc_buffers, stmt.match_buffers, stmt.annotations)
    return stmt

"""Software prefetch of the rows a matmul's packing loop copies (tvm_bridge/schedule.py
packs B's panel for each column tile into a local buffer, then computes with it).

A pack reads one column tile of B (32 floats, two cache lines) from each row of a
depth panel. When B has long rows (an LSTM's gradient of the gates, 2048 x 1024: a row
is one 4 KiB page) each of those reads is on another page, where the hardware
prefetchers stop, so the pack waits on memory for every row while the FMA units idle.
Here, where a pack reads a few lines from each of many rows:

- while the register tiles compute with one pack, they prefetch the rows of the next
  (the next column tile's, or the next depth panel's), a share of them each row tile,
  so that it finds them in cache (B just written by a loop, as the gradient above,
  comes from memory);
- the pack itself prefetches the row PACK_PREFETCH_ROWS ahead of the one it copies
  (a thread's first tile, or a pack with no row tiles after it).

Measured on 2 Zen 4 cores: the pack's own prefetch, GFlop/s before -> after: (2048 x
128)^T @ (2048 x 1024) 196 -> 199-202, (2048 x 256)^T @ (2048 x 1024) 197 -> 201-204;
both, the LSTM's gradient (B=32, H=256, T=64), interleaved on quiet runs: 27.35, 27.69,
27.18 ms with the pack's own -> 27.01, 26.98, 26.99 with both; the products that pack
short rows are left alone.

TVM's schedule primitives cannot add a statement that is not a block, so this rewrites
the scheduled function: `tirx.prefetch` (LLVM's llvm.prefetch) at the start of the
loops' bodies.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .tir_blocks import moves_data

PACK_PREFETCH_ROWS = 16
MIN_PACKED_ROWS = 4 * PACK_PREFETCH_ROWS
MAX_LINES_A_ROW = 2
CACHE_LINE_BYTES = 64
_KEEP_IN_EVERY_LEVEL = 3  # llvm.prefetch's locality: prefetcht0 on x86


def prefetch_packed_rows(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with each pack of many rows prefetching the rows it copies next, and the
    row tiles computing after it prefetching the next pack's."""
    prefetches = {}
    _find_packs(func.body, [], prefetches)
    if not prefetches:
        return func
    return func.with_body(_insert(func.body, prefetches))


def _find_packs(stmt, loops: list, prefetches: dict) -> None:
    """Record, for the loops of each pack worth it, the prefetches to put first in
    their bodies."""
    if isinstance(stmt, tirx.For):
        _find_packs(stmt.body, [*loops, stmt], prefetches)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _find_packs(child, loops, prefetches)
    elif isinstance(stmt, s_tir.SBlockRealize):
        if _is_pack(stmt.block, loops):
            for loop, statements in (_ahead_in_pack(stmt, loops), _next_tile_in_row_tiles(stmt, loops)):
                if statements:
                    prefetches[loop] = statements
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


def _ahead_in_pack(realize, loops: list) -> tuple:
    """(the pack's row loop, prefetches of the row PACK_PREFETCH_ROWS trips ahead)."""
    vector, row_loop = loops[-1], loops[-2]
    ahead = {row_loop.loop_var: row_loop.loop_var + _const(PACK_PREFETCH_ROWS, row_loop.loop_var)}
    return row_loop, _row_prefetches(realize, vector, ahead)


def _next_tile_in_row_tiles(realize, loops: list) -> tuple:
    """(the loop over row tiles computing with the pack, prefetches of the rows the
    next trip of the loop holding both packs (the next column tile, or the next depth
    panel) reads: trip r of R prefetches rows [r, r + 1) * rows / R), or (None, [])
    where no loop follows the pack under the one holding it."""
    if len(loops) < 3:
        return None, []
    holder, row_loop, vector = loops[-3], loops[-2], loops[-1]
    after = holder.body.seq if isinstance(holder.body, tirx.SeqStmt) else []
    if len(after) < 2 or not after[0].same_as(row_loop):
        return None, []
    row_tiles = after[1]
    if not (isinstance(row_tiles, tirx.For) and isinstance(row_tiles.extent, tirx.IntImm)):
        return None, []
    rows = int(row_loop.extent)
    per_trip = -(-rows // int(row_tiles.extent))
    statements = []
    trip = row_tiles.loop_var
    for k in range(per_trip):
        row = tirx.Min(trip * _const(per_trip, trip) + _const(k, trip), _const(rows - 1, trip))
        next_tile = {row_loop.loop_var: row, holder.loop_var: holder.loop_var + _const(1, holder.loop_var)}
        found = _row_prefetches(realize, vector, next_tile)
        if not found:
            return None, []
        statements += found
    return row_tiles, statements


def _row_prefetches(realize, vector, values: dict) -> list:
    """A prefetch of each cache line of the vector the pack reads, at `values` of its
    loop variables (its first lane), each index within the source buffer: the last
    rows' prefetches would point past its end, undefined to LLVM even where nothing
    reads it. [] where an index is not plain integer arithmetic."""
    block = realize.block
    read = block.reads[0]
    bindings = {iter_var.var: value for iter_var, value in zip(block.iter_vars, realize.iter_values)}
    values = {**values, vector.loop_var: _const(0, vector.loop_var)}
    start = [_substitute(_substitute(axis.min, bindings), values) for axis in read.region]
    if any(index is None for index in start):
        return []
    element_bytes = tvm.DataType(read.source.dtype).bits // 8
    statements = []
    for line in range(0, int(vector.extent) * element_bytes, CACHE_LINE_BYTES):
        index = [*start[:-1], start[-1] + _const(line // element_bytes, start[-1])]
        index = [tirx.Min(at, (extent - 1).astype(at.ty.dtype)) for at, extent in zip(index, read.source.shape)]
        address = tirx.address_of(tirx.BufferLoad(read.source, index))
        # (address, 0: a read, locality, 1: the data cache)
        statements.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0,
                                                         _KEEP_IN_EVERY_LEVEL, 1)))
    return statements


def _const(value: int, like):
    """An integer constant of the type of the index expression `like`."""
    return tirx.const(value, like.ty.dtype)


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

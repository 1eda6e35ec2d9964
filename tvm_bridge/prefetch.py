"""Software prefetch in CPU kernels, where the hardware prefetchers fall behind: the
rows a matmul's pack copies, and the rows a loop body's next trip reads.

**Packs** (`prefetch_packed_rows`, the matmul rule's finishing step in
tvm_bridge/schedule.py, which packs B's panel for each column tile into a local
buffer, then computes with it). A pack reads one column tile of B (32 floats, two cache
lines) from each row of a depth panel. When B has long rows (an LSTM's gradient of the
gates, 2048 x 1024: a row is one 4 KiB page) each of those reads is on another page,
where the hardware prefetchers stop, so the pack waits on memory for every row while
the FMA units idle. Where a pack reads a few lines from each of many rows:

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

**The next trip** (`prefetch_next_trip`, a module pass after the kernels are
scheduled): a loop body's kernels that read a stack's row at the trip's counter (an
input projection's `P[t]`, the forward's residuals in the reverse loop) prefetch the
row the next trip reads (t + 1, or t - 1 in a loop running in reverse: each body is
marked with its step, COUNTER_STEP_ATTR). Those rows were written long before and come
from memory. The LSTM's gradient, interleaved on quiet runs (ms, without -> with):
29.44 -> 28.40, 26.74 -> 26.63, 27.96 -> 27.47, 28.62 -> 28.14; its `rules=()`
build (tapes, not stacks) unchanged.

TVM's schedule primitives cannot add a statement that is not a block, so both rewrite
scheduled functions: `tirx.prefetch` (LLVM's llvm.prefetch) first in a loop's body,
every index kept within its buffer.
"""
from __future__ import annotations

import collections

import tvm
from tvm import relax, s_tir, tirx

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
    for realize, loops in _realizes(func.body):
        if _is_pack(realize.block, loops):
            for loop, statements in (_ahead_in_pack(realize, loops), _next_tile_in_row_tiles(realize, loops)):
                if statements:
                    prefetches.setdefault(loop, []).extend(statements)
    return func.with_body(_insert(func.body, prefetches)) if prefetches else func


def _realizes(stmt, loops: list = ()):
    """(each block realize in `stmt`, the loops around it, outermost first), through
    loops, sequences and blocks (no other statement holds a scheduled kernel's blocks)."""
    if isinstance(stmt, tirx.For):
        yield from _realizes(stmt.body, [*loops, stmt])
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            yield from _realizes(child, loops)
    elif isinstance(stmt, s_tir.SBlockRealize):
        yield stmt, list(loops)
        yield from _realizes(stmt.block.body, loops)
    elif isinstance(stmt, s_tir.SBlock):
        yield from _realizes(stmt.body, loops)


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
    return row_loop, _vector_prefetches(realize, realize.block.reads[0], vector, ahead)


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
        found = _vector_prefetches(realize, realize.block.reads[0], vector, next_tile)
        if not found:
            return None, []
        statements += found
    return row_tiles, statements


def _vector_prefetches(realize, read, vector, values: dict) -> list:
    """A prefetch of each cache line of the vector a block reads from region `read`, at
    `values` of the variables (and loads) in its index, from its first lane; each index
    kept within the buffer: the last rows' prefetches would point past its end,
    undefined to LLVM even where nothing reads it. [] where an index is not plain
    integer arithmetic."""
    values = {**values, vector.loop_var: _const(0, vector.loop_var)}
    start = [_substitute(_substitute(axis.min, _bindings(realize)), values) for axis in read.region]
    if not start or any(index is None for index in start):
        return []
    element_bytes = tvm.DataType(read.source.dtype).bits // 8
    statements = []
    for line in range(0, int(vector.extent) * element_bytes, CACHE_LINE_BYTES):
        index = [*start[:-1], start[-1] + _const(line // element_bytes, start[-1])]
        index = [tirx.Min(tirx.Max(at, _const(0, at)), (extent - 1).astype(at.ty.dtype))
                 for at, extent in zip(index, read.source.shape)]
        address = tirx.address_of(tirx.BufferLoad(read.source, index))
        # (address, 0: a read, locality, 1: the data cache)
        statements.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0,
                                                         _KEEP_IN_EVERY_LEVEL, 1)))
    return statements


def _bindings(realize) -> dict:
    """{a block's iteration variable: what the realize binds it to}."""
    return {iter_var.var: value for iter_var, value in zip(realize.block.iter_vars, realize.iter_values)}


def _const(value: int, like):
    """An integer constant of the type of the index expression `like`."""
    return tirx.const(value, like.ty.dtype)


# the integer arithmetic of indices, and what each computes (`_integer`)
_EVALUATED = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
              tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b, tirx.Min: min, tirx.Max: max}
_AFFINE = tuple(_EVALUATED)


def _substitute(expr, values: dict):
    """`expr` (a block's index: loop variables, scalar loads, constants and integer
    arithmetic) with `values` for its variables and for the scalar loads of the buffers
    among its keys; None for an index of another kind (no prefetch then). TVM 0.27
    exposes no Substitute to Python."""
    if expr is None or isinstance(expr, tirx.IntImm):
        return expr
    if isinstance(expr, tvm.ir.TensorLoad):
        return _value_of(expr.source, values, expr) if len(expr.indices) == 0 else None
    if isinstance(expr, tirx.Var):
        return _value_of(expr, values, expr)
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


# ---------------------------------------------------------------- the next trip's rows

RAISE_ERRORS = False  # tests set it: a kernel the pass fails on raises, instead of going without
FAILED: collections.Counter[str] = collections.Counter()  # kernels left without, by name
COUNTER_STEP_ATTR = "egad.counter_step"  # on a `for` body (tvm_bridge/lower.py): +1 or -1 a trip
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@tvm.transform.module_pass(opt_level=0, name="egad.PrefetchNextTrip")
def prefetch_next_trip(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """A loop body's kernels that read rows of a stack at the trip's counter (`xs[t]`,
    a stacked residual in the reverse loop) prefetch the row the next trip reads, as
    they read theirs. Those rows were written long before (the input projection, the
    forward's residuals) and come from memory; the rows of one trip, a few KiB each, are
    read in runs the hardware prefetchers follow only once started, at every row.
    Kernels a body calls with its counter are found from the bodies' calls; a kernel
    called with counters that step differently is left alone."""
    steps = _counter_arguments(mod)
    for global_var, func in list(mod.functions_items()):
        found = steps.get(global_var.name_hint)
        if isinstance(func, tirx.PrimFunc) and found is not None:
            position, step = found
            try:
                mod[global_var] = _prefetch_next_trip(func, func.params[position], step)
            except Exception:  # noqa: BLE001 - a prefetch only speeds a kernel up: never fail the build for one
                FAILED[global_var.name_hint] += 1
                if RAISE_ERRORS:
                    raise
    return mod


def _counter_arguments(mod: tvm.IRModule) -> dict:
    """{kernel name: (the parameter a body passes its counter to, its step)} over the
    `call_tir`s of the bodies marked with COUNTER_STEP_ATTR; a kernel called otherwise
    too (another position or step) is left out."""
    found, conflicting = {}, set()
    for _, func in mod.functions_items():
        if not (isinstance(func, relax.Function) and func.attrs is not None and COUNTER_STEP_ATTR in func.attrs):
            continue
        counter, step = func.params[1], int(func.attrs[COUNTER_STEP_ATTR])  # params: invoke, counter, ...
        for block in func.body.blocks:
            for binding in block.bindings:
                call = binding.value
                if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
                    continue
                args = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else []
                for position, arg in enumerate(args):
                    if arg.same_as(counter):
                        name = call.args[0].name_hint
                        if found.setdefault(name, (position, step)) != (position, step):
                            conflicting.add(name)
    return {name: value for name, value in found.items() if name not in conflicting}


def _prefetch_next_trip(func: tirx.PrimFunc, counter, step: int) -> tirx.PrimFunc:
    """`func` with, first in the loop around each vectorized read of a buffer at an index
    involving `counter[()]`, a prefetch of each line of that vector at `counter[()] +
    step`: each region once, where it is first read, and only where it lies within
    the buffer (a block of a concatenation lists every piece's read, each but its own
    under a condition)."""
    prefetches, regions = {}, set()
    for realize, loops in _realizes(func.body):
        if len(loops) < 2 or loops[-1].kind != tirx.ForKind.VECTORIZED:
            continue
        for read in realize.block.reads:
            if read.source.same_as(counter) or not any(_reads(axis.min, counter) for axis in read.region):
                continue
            region = _region(realize, read, loops, counter)
            if region is None or region in regions:
                continue  # read under a condition elsewhere (a piece of a concatenation), or again
            regions.add(region)
            load = tirx.BufferLoad(counter, [])
            statements = _vector_prefetches(realize, read, loops[-1], {counter: load + _const(step, load)})
            prefetches.setdefault(loops[-2], []).extend(statements)
    prefetches = {loop: statements for loop, statements in prefetches.items() if statements}
    return func.with_body(_insert(func.body, prefetches)) if prefetches else func


def _region(realize, read, loops: list, counter) -> tuple | None:
    """(buffer, the first element read, the last) for a read under `loops` (the loops
    at their first and last trips, the counter at 0); None where the read leaves the
    buffer there or an index or extent is not plain integer arithmetic."""
    index = [_substitute(axis.min, _bindings(realize)) for axis in read.region]
    ends = []
    for trip in (lambda first, extent: first, lambda first, extent: first + extent - 1):
        at = {}
        for loop in loops:
            first, extent = _integer(loop.min, {}), _integer(loop.extent, {})
            if first is None or extent is None:
                return None
            at[loop.loop_var] = trip(first, extent)
        ends.append([_integer(axis, {**at, counter: 0}) for axis in index])
    shape = [_integer(extent, {}) for extent in read.source.shape]
    if any(value is None or size is None or not 0 <= value < size
           for end in ends for value, size in zip(end, shape)):
        return None
    return read.source.name, tuple(ends[0]), tuple(ends[1])


def _integer(expr, values: dict) -> int | None:
    """The value of an integer index at `values` of its variables and scalar loads."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tvm.ir.TensorLoad) and len(expr.indices) == 0:
        return _value_of(expr.source, values, None)
    if isinstance(expr, tirx.Var):
        return _value_of(expr, values, None)
    evaluate = _EVALUATED.get(type(expr))
    if evaluate is None:
        return None
    a, b = _integer(expr.a, values), _integer(expr.b, values)
    return None if a is None or b is None else evaluate(a, b)


def _value_of(key, values: dict, missing):
    """`values`' value for a variable or a scalar buffer (TVM objects compare by
    `same_as`, not by hash), else `missing`."""
    return next((value for var, value in values.items() if var.same_as(key)), missing)


def _reads(expr, buffer) -> bool:
    """Whether the index `expr` loads from `buffer`."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return expr.source.same_as(buffer)
    if isinstance(expr, _AFFINE):
        return _reads(expr.a, buffer) or _reads(expr.b, buffer)
    return False

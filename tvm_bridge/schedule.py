"""egad's CPU schedules: the Relax pipeline for llvm targets and the rules that
schedule its PrimFuncs.

TVM's stock CPU build leaves every PrimFunc as legalization wrote it, one serial
scalar loop nest per op (a 32x512x1024 matmul runs ~150x slower than numpy, DESIGN §7).
`relax_pipeline(target)` is TVM's cpu_generic pipeline with egad's fusion passes
(tvm_bridge/fusion.py) and one pass added after FuseOps/FuseTIR, so that it sees the
fused PrimFuncs. That pass tries the rules of `SCHEDULE_RULES` in order on each
PrimFunc; each rule recognises its kind of function by looking at the blocks (their
iterator kinds and the buffers they touch), never at the function's name:

- `elementwise-parallel-vector`: only injective blocks. Inlined into one loop nest
  per output; the inner loop vectorized when its extent is static and divides into
  vectors (else left serial for LLVM's loop vectorizer, which handles tails), the
  outer loops fused into one parallel loop when there is work enough to share
  (fewer elements than that run serial, and more where an element is only moved).
  A block that picks one of several pieces by its innermost index (a concatenation,
  its operands' computations fused in) gets one vector loop per piece instead; one
  that reads an input across its rows (a transpose) runs in square tiles of vectors.
- `matmul-tiled-packed`: one contraction block C[b, i, j] += A[b, i, k] * B[b, k, j]
  in any operand layout (transposed operands included), with injective producers and
  elementwise epilogues around it. A rows x 2-vector register tile (4 rows with 16
  vector registers, 8 with AVX-512's 32) accumulates in a local buffer over the depth;
  B's panel for each column tile is packed once into a contiguous local buffer (from
  128 rows, or 8 when B is read transposed; fewer rows read B in place); many rows are
  cut into blocks of A that every column tile reads while they are in cache (one
  block of a small A is walked whole by each column tile; an A read across its rows,
  a weight gradient's x^T, is packed into row-tile order once per depth panel);
  parallel over column tiles (or row blocks); the epilogue runs in the tile's write-back.
- `reduction-parallel-spatial`: other reductions (sum/max/... over some axes) with
  injective blocks around them. Parallel over the spatial part; when the reduction
  runs over an outer axis, the contiguous spatial axis goes innermost, vectorized, in
  blocks of several vectors per task (a run of cache lines from every row).

A PrimFunc no rule recognises, or too small to gain anything, is left unscheduled
(correct, slow). A rule that raises leaves its PrimFunc as it was and the build goes
on; `RULE_COUNTS` counts what applied and what failed, and `RAISE_RULE_ERRORS = True`
(the tests set it) re-raises instead. Every scheduled PrimFunc carries the attribute
`egad.schedule_rule` with the rule name.

Tails: a split that does not divide puts a predicate in the loop body. Vector loops
are only made from static extents they divide; matmul tiles are chosen to divide the
static sizes, and a remaining row tail (a prime or symbolic row count) costs about 2x
on the matmul, because LLVM does not hoist the per-row condition out of the depth loop.

Threads: TVM's pool is separate from OpenBLAS's; running both multi-threaded in one
process oversubscribes the cores (benchmarks pin OpenBLAS to one thread). TVM's pool
defaults to half the hardware threads, so on a 2-core machine `parallel` loops run
on one thread unless TVM_NUM_THREADS says otherwise.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.relax.backend.utils import BackendDispatcher
from tvm.s_tir.dlight.analysis import SBlockInfo, get_sblock_info, normalize_prim_func
from tvm.target.codegen import target_has_features
from tvm.tirx.analysis import undefined_vars

from . import fusion, gpu, reshape_views, rows_in_place, vm_checks
from .prefetch import prefetch_next_trip, prefetch_packed_rows
from .tir_blocks import moves_data, sblocks

RULE_COUNTS: collections.Counter[str] = collections.Counter()
RAISE_RULE_ERRORS = False

# Below this many loop iterations in a whole PrimFunc, scheduling it costs build time
# (mostly shape and index arithmetic on a few elements) and gains nothing at run time.
MIN_ITERATIONS_TO_SCHEDULE = 256
# Below this many loop iterations a parallel launch costs more than it saves.
PARALLEL_MIN_ITERATIONS = 1 << 14
# ... and below this many for an elementwise loop nest that does little per element (a
# copy, a concatenation, an add: at most LIGHT_ELEMENT_OPS operations besides its index
# arithmetic), which runs at memory speed. 2 Zen 5 cores, serial -> parallel, float32:
# a concatenation into 32 x 1024 (an LSTM's four gate gradients, every reverse step)
# 1.7 -> 3.2 us, into 128 x 1024 7.8 -> 11.0 us; an add of 32 x 1024 1.9 -> 1.9 us,
# of 64 x 1024 4.4 -> 2.4 us. (A sigmoid of 64 x 256 already gains: 27 -> 15 us.)
PARALLEL_MIN_LIGHT_ITERATIONS = 1 << 16
# ... and below this many, summed over the nests, for nests merged row by row
# (`_merge_row_nests`): the rows of an LSTM's forward step (7 nests of 32 x 256: every
# gate with its sums inlined, c, tanh(c) and h, one kernel) run in parallel, a kernel's
# two nests of that size serial. On 2 Zen 4 cores, the LSTM gradient of
# benchmarks/optimizer.py (T=64) took ~2 ms less with the step's rows parallel; 2^14
# also made rules=()'s per-gate kernels of 2 nests parallel, and them ~1.5 ms slower.
# (2^16 left the forward step serial once its gates' sums were inlined: 13 nests became 7.)
PARALLEL_MIN_MERGED_ITERATIONS = 1 << 15
# Columns per task of a sum over rows ([64, 32, 1024] summed to [1024], an LSTM's bias
# gradient, 2 Zen 5 cores): one vector (16 floats) per task read one cache line every
# 4 KiB, 272 us; 16 vectors and 4 tasks, 43 us. [2048, 256] to [256]: 28 us with one
# vector, 12 us with 4 vectors (4 tasks), 18 us with 16 (one task, serial).
COLUMN_BLOCK_VECTORS = 16
COLUMN_BLOCKS = 4
LIGHT_ELEMENT_OPS = 4
# Register tile of the matmul micro-kernel: rows x (vectors per row) accumulators, the
# other vector registers holding B's vectors and A's broadcast. Row tiles by preference,
# by the target's vector registers (`VectorLanes.registers`). 16 (AVX2): at most 8 x 2,
# 4 x 2 measured as fast as 6 x 2 on 32x512x1024. 32 (AVX-512): 8 x 2, 16 accumulators,
# keeps both FMA units busy where 4 x 2 (8 accumulators) waited on their latency; on
# 2 Zen 5 cores, GFlop/s 4 x 2 -> 8 x 2: an LSTM's weight gradient (256 x 2048) @ (2048 x
# 256) 319 -> 464, its step product (32 x 1024) @ (1024 x 256) 344 -> 391, its input
# projection (2048 x 128) @ (128 x 1024) 425 -> 476 (4 x 4 tiles were as fast on these,
# 4x slower on 128 columns: two column tiles).
MATMUL_ROW_TILES = {16: (4, 6, 5, 7, 3, 8), 32: (8, 4, 6, 5, 7, 3)}
MATMUL_VECTORS_PER_TILE = 2
# Reduction depth per packed B panel: keeps the panel (depth x tile columns) in L1/L2.
MATMUL_MAX_DEPTH_PER_PANEL = 512
# Packing B costs one pass over B; it pays off once enough rows reuse each panel. A B
# read along its columns (not transposed) is packed from 128 rows on: unpacked was
# faster below (2 Zen 5 cores, 8-row tiles: 16 rows 1.5x, 32 rows 1.2x, an LSTM step's
# (32 x 1024) @ (1024 x 256) 45.0 -> 38.5 us; 64 rows as fast), packed above (128 rows
# 1.1x). A transposed B is packed from MATMUL_MIN_ROWS_TO_PACK rows on (unpacked, each
# vector of a tile gathers across rows of B: 32 rows 4x slower).
MATMUL_MIN_ROWS_TO_PACK = 8
MATMUL_MIN_ROWS_TO_PACK_CONTIGUOUS = 128
# Rows of A per block: a block (its rows x one depth panel) stays in L2 while every
# column tile reads it. Without blocks each column tile streamed all of A from memory.
# Measured on 2 threads (GFlop/s, before -> after; numpy on one thread ~90): an RNN's
# input projection over T=1024 steps of 32 rows, (32768 x 128) @ (128 x 1024), 57-63 ->
# 139-141; its batched weight gradient, einsum("tbi,tbj->ij") over T=1024, B=32,
# 256 x 256, 54 -> 102-110. A block holds about MATMUL_BLOCK_ELEMENTS of A, in
# MATMUL_BLOCK_ROWS rows at least and at most (512 rows at depth 128, 256 at 512).
# All of A in one block is walked whole by each column tile (one parallel loop for the
# whole product) only up to MATMUL_WALKED_A_ELEMENTS; a larger one keeps the depth
# panels outside the column tiles, so that each panel of A is read from L2 by every
# column tile and B is packed once. 2 Zen 5 cores, 32768-element blocks and any A walked
# -> these two (ms): an LSTM's weight gradient over T=64, (2048 x 256)^T @ (2048 x 1024),
# 2.47 -> 2.36; over T=1024, 48.1 -> 40.7; an RNN's over T=1024 (256 columns) 13.0 ->
# 10.8; (2048 x 256) @ (512 x 256)^T 1.37 -> 1.13; an LSTM step's products unchanged.
MATMUL_BLOCK_ELEMENTS = 131072
MATMUL_BLOCK_ROWS = (128, 512)
MATMUL_WALKED_A_ELEMENTS = 131072
# Many rows and a short depth (no depth panels), as an RNN's input projection: within a
# block, a row tile runs over the column tiles of a group before the next row tile, so
# that it writes its rows along them. With each column tile walking all rows of the
# block, every write-back of a register tile wrote 8 rows, each on another page, that no
# prefetcher had brought in. Groups of column tiles (not all columns) keep blocks x
# groups parallel iterations, and B's panel for a group small. 2 Zen 4 cores, GFlop/s,
# before -> after: (2048 x 128) @ (128 x 1024) 177-181 -> 195-200, (8192 x 128) @ (128 x
# 1024) 175-179 -> 186-196, at depth 256 194-199 -> 204-207, at 512 205-208 -> 206-213
# (all columns in one group: 190-199, 196, 198-201, 192-201).
MATMUL_COLUMN_TILES_PER_GROUP = 8
# With depth panels outside the column tiles (a weight gradient, x^T @ dG over every
# step: A is read across its rows), A's panel is copied once per panel into row-tile
# order (`_pack_rows_operand`). 2 Zen 3 cores (AVX2), ms, read in place -> packed, side
# by side: (2048 x 256)^T @ (2048 x 1024) 10.0 -> 8.1 (from an A packed before the
# call: 7.9), (2048 x 128)^T @ (2048 x 1024) 5.3 -> 4.3 (3.9); the LSTM gradient of
# benchmarks/optimizer.py (T=64) 1.5-3.6 ms faster.
MATMUL_PACK_ROWS_READ_ACROSS = True


@dataclass(frozen=True)
class ScheduleRule:
    """One kind of PrimFunc and how to schedule it. `apply(sch, lanes_of)` returns
    False, before changing anything, when the function is not of its kind; `finish`,
    if any, rewrites the scheduled function where schedule primitives cannot."""
    name: str
    apply: Callable[[s_tir.Schedule, "VectorLanes"], bool]
    finish: Callable[[tirx.PrimFunc], tirx.PrimFunc] | None = None


# ---------------------------------------------------------------- the pipeline

def relax_pipeline(target) -> tvm.transform.Pass | None:
    """The Relax pipeline egad builds with for `target`: TVM's default pipeline for its
    backend (cpu_generic for llvm, tvm_bridge/gpu.py's choice for GPUs) with egad's
    fusion passes, and egad's kernel scheduling after fusion (`schedule_prim_funcs` on
    the CPU, then loop bodies' kernels prefetching their next trip's rows,
    tvm_bridge/prefetch.py; guarded dlight rules on GPUs), loop bodies' stacked rows
    written in place (tvm_bridge/rows_in_place.py), the reshapes a function returns made views
    (tvm_bridge/reshape_views.py), and no parameter checks in the region functions
    (tvm_bridge/vm_checks.py); None (TVM's default) for other targets.
    Example: `tvm.compile(mod, target, relax_pipeline=relax_pipeline(target) or "default")`."""
    resolved = _as_target(target)
    if resolved.kind.name == "llvm":
        scheduling = tvm.transform.Sequential([schedule_prim_funcs(resolved), prefetch_next_trip])
        backend, name = cpu_generic, "egad.CPUPipeline"
    elif BackendDispatcher.is_gpu_target(resolved):  # "gpu" among its keys, as TVM decides
        backend, scheduling, name = gpu.backend(resolved), gpu.schedule_kernels(), "egad.GPUPipeline"
    else:
        return None

    @tvm.transform.module_pass(opt_level=0, name=name)
    def pipeline(mod: tvm.IRModule, _context) -> tvm.IRModule:
        with resolved:
            passes = (fusion.fusion_passes(resolved, backend)
                      + [scheduling, rows_in_place.write_rows_in_place, reshape_views.reshape_outputs_as_views]
                      + backend.dataflow_lower_passes(resolved)
                      + backend.finalize_passes(resolved)
                      + [vm_checks.drop_region_parameter_checks])
            return tvm.transform.Sequential(passes)(mod)

    return pipeline


def schedule_prim_funcs(target) -> tvm.transform.Pass:
    """A module pass scheduling every PrimFunc with the first rule of SCHEDULE_RULES
    that recognises it."""
    lanes_of = VectorLanes(_vector_bits(_as_target(target)))

    @tvm.transform.module_pass(opt_level=0, name="egad.ScheduleForCPU")
    def schedule(mod: tvm.IRModule, _context) -> tvm.IRModule:
        scheduled = {}
        for global_var, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and not _is_scheduled(func):
                new_func = schedule_prim_func(func, lanes_of)
                initialized = initialize_before_reducing(new_func if new_func is not None else func)
                if initialized is not None or new_func is not None:
                    scheduled[global_var] = initialized or new_func
        for global_var, func in scheduled.items():
            mod[global_var] = func
        return mod

    return schedule


def schedule_prim_func(func: tirx.PrimFunc, lanes_of: "VectorLanes") -> tirx.PrimFunc | None:
    """`func` scheduled by the first rule that recognises it; None when none does, when
    it is too small to gain anything, or when the rule that did raised (all counted
    in RULE_COUNTS)."""
    iterations = iteration_count(func.body)
    if iterations is not None and iterations < MIN_ITERATIONS_TO_SCHEDULE:
        RULE_COUNTS["too-small"] += 1
        return None
    for rule in SCHEDULE_RULES:
        sch = s_tir.Schedule(func)
        try:
            applied = rule.apply(sch, lanes_of)
        except Exception:  # a failed schedule must not fail the build: keep the loop nest as it was
            RULE_COUNTS[f"failed:{rule.name}"] += 1
            if RAISE_RULE_ERRORS:
                raise
            return None
        if applied:
            RULE_COUNTS[rule.name] += 1
            scheduled = sch.mod["main"]
            if rule.finish is not None:
                scheduled = _finished(rule, scheduled)
            return scheduled.with_attrs({"tirx.is_scheduled": True, "egad.schedule_rule": rule.name})
    RULE_COUNTS["unrecognised"] += 1
    return None


def _finished(rule: ScheduleRule, scheduled: tirx.PrimFunc) -> tirx.PrimFunc:
    """`rule.finish(scheduled)`; `scheduled` as it is where that raised (counted in
    RULE_COUNTS): a finishing step only refines a schedule that is complete without it."""
    try:
        return rule.finish(scheduled)
    except Exception:  # noqa: BLE001 - as for a rule: never fail the build for a refinement
        RULE_COUNTS[f"failed:{rule.name}.finish"] += 1
        if RAISE_RULE_ERRORS:
            raise
        return scheduled


def initialize_before_reducing(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """`func` with every reduction's initial value written before its reduction loops
    (None where no block still initializes inside them). TVM runs a block's `init` in
    the reduction's first trip, so over an axis empty at run time (a symbolic T of 0)
    the output kept whatever memory held: `v @ v` of an empty v was 4.7e-310, `any`
    over an empty axis True. The rules above decompose the reductions they schedule;
    this catches the rest (kernels too small to schedule, or no rule's)."""
    if not any(block.init is not None for block in sblocks(func.body)):
        return None  # most kernels: nothing to do, and no Schedule made for them
    sch = s_tir.Schedule(func)
    changed = False
    for block in _blocks_initialized_inside(sch):
        loop = _first_reduction_loop(sch, block)
        if loop is None:
            continue
        try:
            sch.decompose_reduction(block, loop)
        except Exception:  # noqa: BLE001 - a block TVM cannot split keeps its init (as before)
            continue
        changed = True
    return sch.mod["main"].with_attrs(dict(func.attrs or {})) if changed else None


def _blocks_initialized_inside(sch) -> list:
    """The blocks that still write their initial value inside their loops (`init`)."""
    return [sch.get_sblock(block.name_hint) for block in sblocks(sch.mod["main"].body) if block.init is not None]


def _first_reduction_loop(sch, block):
    """The outermost loop of `block` that a reduction iterator of it walks, if any."""
    realize = _sblock_realize(sch, block)
    reducing = set()
    for iter_var, value in zip(realize.block.iter_vars, realize.iter_values):
        if iter_var.iter_type == tirx.IterVar.CommReduce:
            reducing |= set(undefined_vars(value))
    return next((loop for loop in sch.get_loops(block) if sch.get(loop).loop_var in reducing), None)


def iteration_count(stmt) -> int | None:
    """How many times the innermost statements of a TIR body run, summed over its loop
    nests; None when a loop extent is symbolic."""
    if isinstance(stmt, tirx.For):
        inner = iteration_count(stmt.body)
        if inner is None or not isinstance(stmt.extent, tirx.IntImm):
            return None
        return int(stmt.extent) * inner
    if isinstance(stmt, tirx.SeqStmt):
        counts = [iteration_count(child) for child in stmt.seq]
        return None if None in counts else sum(counts)
    if isinstance(stmt, tirx.IfThenElse):
        counts = [iteration_count(branch) for branch in (stmt.then_case, stmt.else_case) if branch is not None]
        return None if None in counts else max(counts)
    if isinstance(stmt, s_tir.SBlockRealize):
        return iteration_count(stmt.block)
    body = getattr(stmt, "body", None)
    return iteration_count(body) if isinstance(body, tirx.Stmt) else 1


# ---------------------------------------------------------------- rule: matmul

@dataclass
class MatmulAxes:
    """The iterators of a contraction block by role: `batch` in all three buffers (or
    of extent 1), `rows` in the output and one operand, `columns` in the output and
    the other operand (the one holding the output's innermost axis), `depth` reduced."""
    batch: list
    rows: list
    columns: list
    depth: list
    columns_operand: int  # read index of the operand holding the column axes
    batch_of_columns_operand: list

    def loops(self, sch, block) -> dict:
        """The loop of each role's iterators, looked up afresh (inlining invalidates
        earlier loop handles)."""
        loop_of = {iter_info.var: iter_info.loop_rv for iter_info in get_sblock_info(sch, block).iters}
        return {role: [loop_of[var] for var in getattr(self, role)] for role in ("batch", "rows", "columns", "depth")}


def schedule_matmul(sch: s_tir.Schedule, lanes_of: "VectorLanes") -> bool:
    """C[b, i, j] += A[b, i, k] * B[b, k, j]: tile, pack B, vectorize j, parallel."""
    blocks = normalize_prim_func(sch)
    if blocks is None or any("O" in info.dom_kind() for info in blocks):
        return False
    reductions = [info for info in blocks if not _is_injective_block(sch, info.block_rv)]
    if len(reductions) != 1:
        return False
    main = reductions[0]
    axes = matmul_axes(sch, main)
    if axes is None:
        return False
    _inline_layout_producers(sch, main.block_rv)
    _inline_epilogue_chain(sch, main.block_rv)
    others = [block for block in _blocks_at_root(sch) if not sch.get(block).same_as(sch.get(main.block_rv))]
    output = sch.get(main.block_rv).writes[0].source
    tiles = _tile_matmul(sch, main.block_rv, axes, lanes_of(output.dtype), MATMUL_ROW_TILES[lanes_of.registers])
    readers = [block for block in others if _reads_buffer(sch, block, output)]
    for block in others:
        if block in readers and _is_pointwise_on(sch, block, output):
            _schedule_epilogue(sch, block, tiles, lanes_of(output.dtype), only_reader=len(readers) == 1)
        else:  # after the whole product, at the root
            _parallel_vectorize(sch, block, lanes_of)
    sch.decompose_reduction(main.block_rv, tiles.first_depth_loop)
    return True


def matmul_axes(sch: s_tir.Schedule, info: SBlockInfo) -> MatmulAxes | None:
    """The roles of a block's loops if it is a contraction of two operands read and
    written at single points, else None."""
    block = sch.get(info.block_rv)
    if len(block.reads) != 2 or len(block.writes) != 1:
        return None
    read_vars = [_point_access_vars(region) for region in block.reads]
    output_vars = _point_access_vars(block.writes[0])
    if None in read_vars or output_vars is None:
        return None
    innermost = block.writes[0].region[-1].min
    columns_operand = 0 if innermost in read_vars[0] and innermost not in read_vars[1] else 1
    columns_vars_set, rows_vars_set = read_vars[columns_operand], read_vars[1 - columns_operand]
    axes = MatmulAxes([], [], [], [], columns_operand, [])
    for iter_info in info.iters:
        var = iter_info.var
        in_rows, in_columns, in_output = var in rows_vars_set, var in columns_vars_set, var in output_vars
        if _is_unit(iter_info.dom) or (iter_info.kind == "S" and in_rows and in_columns and in_output):
            axes.batch.append(var)
            if in_columns:
                axes.batch_of_columns_operand.append(var)
        elif iter_info.kind == "S" and in_rows and in_output and not in_columns:
            axes.rows.append(var)
        elif iter_info.kind == "S" and in_columns and in_output and not in_rows:
            axes.columns.append(var)
        elif iter_info.kind == "R" and in_rows and in_columns and not in_output:
            axes.depth.append(var)
        else:
            return None
    if not (axes.rows and axes.columns and axes.depth):
        return None
    return axes


@dataclass
class MatmulTiles:
    outer: object  # the (batch x column tile) loop an epilogue can go under
    first_depth_loop: object  # where the reduction's init goes
    write_back: object  # the block copying register accumulators out, if any


def _tile_matmul(sch, block, axes: MatmulAxes, lanes: int, row_tile_choices: tuple[int, ...]) -> MatmulTiles:
    """Loops (batch x column tiles) [depth panels] row tiles, depth, rows, columns:
    a rows x columns register tile accumulates over the depth; B's panel for a column
    tile (and depth panel) is packed once and reused by every row tile. Many rows are
    cut into blocks (`_row_tiles_per_block`), outermost, then [depth panels,] column
    tiles: a block's panel of A is read by every column tile while it is in cache.
    With depth panels, fewer rows make one block, so that each panel of A, too, is
    read by every column tile before the next (not every panel once per column tile).
    Without, the column tiles of a block go in groups, each row tile over a group's
    (`_column_group`), so that it writes along its rows."""
    loops = axes.loops(sch, block)
    # A tile that straddles two values of an outer row (or column) loop is wrong: the
    # local accumulator is compacted to each tile's region, and the write-back of a
    # straddling tile covers the whole outer slice, so it writes rows of the next
    # tile that are not computed yet. Several row loops fuse into one only when the
    # tile divides the innermost; otherwise the outer ones iterate like batch loops.
    loops["rows"], outer_rows = _tileable(sch, loops["rows"], lambda n: _row_tile(n, row_tile_choices))
    loops["columns"], outer_columns = _tileable(sch, loops["columns"], lambda n: _column_tile(n, lanes))
    loops["batch"] += outer_rows + outer_columns
    sch.reorder(*loops["batch"], *loops["columns"], *loops["rows"], *loops["depth"])
    columns, rows, depth = (_fuse(sch, loops[role]) for role in ("columns", "rows", "depth"))
    batch = _fuse(sch, loops["batch"]) if loops["batch"] else None
    column_count, row_count, depth_count = (_extent(sch, loop) for loop in (columns, rows, depth))

    column_tile = _column_tile(column_count, lanes)
    column_outer, column_inner = sch.split(columns, [None, column_tile])
    row_tile = _row_tile(row_count, row_tile_choices)
    row_outer, row_inner = sch.split(rows, [None, row_tile])
    panel_depth = _panel_depth(depth_count)
    row_tiles = _extent(sch, row_outer)
    row_block = None
    tiles_per_block = _row_tiles_per_block(panel_depth or depth_count, row_tile)
    if row_tiles is not None and row_tiles > tiles_per_block and row_tiles % tiles_per_block == 0:
        row_block, row_outer = sch.split(row_outer, [None, tiles_per_block])
    elif row_tiles is not None and panel_depth is not None:  # one block
        row_block, row_outer = sch.split(row_outer, [1, None])
    depth_outer, depth_inner = sch.split(depth, [None, panel_depth]) if panel_depth is not None else (None, depth)
    panels = [depth_outer] if depth_outer is not None else []
    # all of A in one block that is small enough for every column tile to walk it whole
    single_block = (row_block is not None and _extent(sch, row_block) == 1
                    and (row_count is None or depth_count is None
                         or row_count * depth_count <= MATMUL_WALKED_A_ELEMENTS))
    many_blocks = row_block is not None and not single_block
    grouped = _column_group(sch, column_outer) if many_blocks and not panels else None
    if grouped is not None:  # each row tile walks along its rows, over the column tiles of a group
        column_group, column_outer = grouped
        sch.reorder(row_block, column_group, row_outer, column_outer, depth_inner, row_inner, column_inner)
        outer_loops = [row_block, column_group]
    elif many_blocks:  # a block's depth panel of A stays in cache across the column tiles
        sch.reorder(row_block, *panels, column_outer, row_outer, depth_inner, row_inner, column_inner)
        outer_loops = [row_block] if panels else [row_block, column_outer]
    elif single_block:
        # all of A is one block (a few rows): each column tile walks the depth panels itself, so one
        # parallel loop over the column tiles holds the whole product (panels outside it started and
        # joined the threads once per panel, and once more to zero the output)
        sch.reorder(row_block, column_outer, *panels, row_outer, depth_inner, row_inner, column_inner)
        outer_loops = [row_block, column_outer]
    else:
        sch.reorder(column_outer, *panels, row_outer, depth_inner, row_inner, column_inner)
        outer_loops = [column_outer]
    outer_loops = ([batch] if batch is not None else []) + outer_loops
    outer = sch.fuse(*outer_loops) if len(outer_loops) > 1 else outer_loops[0]
    # with depth panels outside them, the column tiles stay a loop of their own, not fused into `outer`
    inner_columns = column_outer if row_block is not None and not single_block and panels else None
    # B's panel for one column tile (and depth panel): packed under the inner of the two loops
    pack_at = inner_columns if inner_columns is not None else (depth_outer or outer)

    # Packing needs a static panel (a local buffer cannot have a symbolic size).
    if column_count is not None and depth_count is not None and _worth_packing(sch, block, axes, row_count):
        _pack_columns_operand(sch, block, axes, pack_at)
    # with depth panels outside the column tiles (a weight gradient), each column tile reads the panel of A
    if (inner_columns is not None and MATMUL_PACK_ROWS_READ_ACROSS and row_count is not None
            and row_count % row_tile == 0 and _rows_read_across(sch, block, axes)):
        _pack_rows_operand(sch, block, axes, depth_outer, row_tile)
    write_back = None
    if depth_outer is None:
        write_back = _accumulate_locally(sch, block, row_outer, lanes)
    _parallel_matmul(sch, outer, row_outer, column_count, column_tile, row_count, depth_count, inner_columns)
    sch.unroll(row_inner)
    sch.vectorize(column_inner)
    return MatmulTiles(outer, depth_outer if depth_outer is not None else depth_inner, write_back)


def _column_group(sch, column_outer) -> tuple | None:
    """(groups, column tiles in a group) of MATMUL_COLUMN_TILES_PER_GROUP tiles, when
    they divide the column tiles into two groups or more, else None."""
    tiles = _extent(sch, column_outer)
    per_group = MATMUL_COLUMN_TILES_PER_GROUP
    if tiles is None or tiles < 2 * per_group or tiles % per_group:
        return None
    return tuple(sch.split(column_outer, [None, per_group]))


def _row_tiles_per_block(depth: int | None, row_tile: int) -> int:
    """Row tiles in one block of A: about MATMUL_BLOCK_ELEMENTS at this depth."""
    low, high = MATMUL_BLOCK_ROWS
    rows = min(max(MATMUL_BLOCK_ELEMENTS // depth, low), high) if depth else low
    return max(1, rows // row_tile)


def _tileable(sch, loops: list, tile_of) -> tuple[list, list]:
    """(loops to fuse and tile, outer loops to iterate outside the tiles): all of
    them when the tile of their fused extent divides the innermost one's extent or is
    a multiple of it (no tile straddles), else only the innermost."""
    if len(loops) <= 1:
        return loops, []
    inner = _extent(sch, loops[-1])
    fused = _product([_extent(sch, loop) for loop in loops])
    tile = tile_of(fused) if fused is not None else None
    if inner is not None and tile is not None and (inner % tile == 0 or tile % inner == 0):
        return loops, []
    return loops[-1:], loops[:-1]


def _accumulate_locally(sch, block, row_outer, lanes: int):
    """Accumulate a register tile in a local buffer written back after the depth loop.
    LLVM keeps a local tile in registers even when a row tail puts the updates under
    a condition, which it cannot do for the output buffer itself."""
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, row_outer, preserve_unit_loops=True)
    _vectorize_innermost(sch, write_back, lanes)
    return write_back


def _schedule_epilogue(sch, block, tiles: MatmulTiles, lanes: int, only_reader: bool):
    """An elementwise epilogue runs in the write-back of each register tile when it
    inlines there, else per column tile after the depth loop. Only the product's one
    reader inlines: TVM lets a reader inline while another reads the product too, the
    write-back then computes the first instead of the product, and the other reads a
    product nothing writes (`tanh(y)` and `sigmoid(y)` of one `y = x @ W + b`: the
    build failed, "matmul_intermediate is used before its definition")."""
    if only_reader and tiles.write_back is not None and _try(sch.reverse_compute_inline, block):
        return
    sch.reverse_compute_at(block, tiles.outer, preserve_unit_loops=True)
    _vectorize_innermost(sch, block, lanes)


def _row_tile(row_count: int | None, choices: tuple[int, ...]) -> int:
    """Rows per register tile: all of a few rows, else the first of `choices` that
    divides the row count (a tail would put every update under a condition)."""
    if row_count is not None and row_count <= max(choices):
        return row_count
    for tile in choices:
        if row_count is not None and row_count % tile == 0:
            return tile
    return choices[0]


def _column_tile(column_count: int | None, lanes: int) -> int:
    """Columns per register tile: MATMUL_VECTORS_PER_TILE vectors, the whole of a
    narrow output, or one vector when that divides the columns and two do not (a
    predicate on the vector lanes makes TVM scalarize the tile)."""
    preferred = lanes * MATMUL_VECTORS_PER_TILE
    if column_count is None:
        return preferred
    if column_count <= preferred:
        return column_count
    for tile in (preferred, lanes):
        if column_count % tile == 0:
            return tile
    return preferred


def _panel_depth(depth_count: int | None) -> int | None:
    """Depth of one packed panel: a divisor of a long static depth (a split that does
    not divide would put a predicate in the reduction), None for no split."""
    if depth_count is None or depth_count <= MATMUL_MAX_DEPTH_PER_PANEL:
        return None
    for panel in range(MATMUL_MAX_DEPTH_PER_PANEL, 63, -1):
        if depth_count % panel == 0:
            return panel
    return None


def _worth_packing(sch, block, axes: MatmulAxes, row_count: int | None) -> bool:
    """Pack B for this many rows (None: symbolic, maybe many)? From
    MATMUL_MIN_ROWS_TO_PACK_CONTIGUOUS rows when B is read along its columns (its
    innermost axis is the output's), from MATMUL_MIN_ROWS_TO_PACK when read across."""
    if row_count is None:
        return True
    innermost = sch.get(block).reads[axes.columns_operand].region[-1].min
    contiguous = isinstance(innermost, tirx.Var) and innermost.same_as(axes.columns[-1])
    return row_count >= (MATMUL_MIN_ROWS_TO_PACK_CONTIGUOUS if contiguous else MATMUL_MIN_ROWS_TO_PACK)


def _pack_columns_operand(sch, block, axes: MatmulAxes, at_loop):
    """Copy the B panel of each tile into a local [batch, depth, columns] buffer, so
    the micro-kernel reads it with unit stride whatever B's layout (transposed B
    included) and without the cache-set conflicts of B's long row stride."""
    order = axes.batch_of_columns_operand + axes.depth + axes.columns
    block_vars = [iter_var.var for iter_var in sch.get(block).iter_vars]
    index_map = tirx.IndexMap(block_vars, order, None)
    pack = sch.reindex_cache_read(block, axes.columns_operand, "local", index_map)
    sch.compute_at(pack, at_loop, preserve_unit_loops=True)
    _read_contiguously(sch, pack)


def _rows_read_across(sch, block, axes: MatmulAxes) -> bool:
    """A (the rows operand) read across its rows, A[k, i] (a weight gradient's x^T), by
    one row iterator, one depth iterator, and no batch."""
    if len(axes.rows) != 1 or len(axes.depth) != 1 or axes.batch:
        return False
    innermost = sch.get(block).reads[1 - axes.columns_operand].region[-1].min
    return isinstance(innermost, tirx.Var) and innermost.same_as(axes.rows[0])


def _pack_rows_operand(sch, block, axes: MatmulAxes, at_loop, row_tile: int):
    """Copy A's depth panel into a buffer [row tiles, depth, rows of a tile], once per
    panel, in parallel over the row tiles: every column tile then reads a row tile's
    panel as one contiguous run, where it read a few elements from each of the
    panel's rows (one cache line a row, the rows 1 KiB apart for 256 of them, in few
    cache sets)."""
    (rows,) = axes.rows
    order = [tirx.floordiv(rows, row_tile)] + axes.depth + [tirx.floormod(rows, row_tile)]
    block_vars = [iter_var.var for iter_var in sch.get(block).iter_vars]
    pack = sch.reindex_cache_read(block, 1 - axes.columns_operand, "global", tirx.IndexMap(block_vars, order, None))
    sch.compute_at(pack, at_loop, preserve_unit_loops=True)
    rows_loop, depth_loop = sch.get_loops(pack)[-2:]  # the pack's iterators, in the order A reads them
    if _loop_bound_to(sch, pack, [rows_loop], sch.get(pack).reads[0].region[-1].min) is None:
        rows_loop, depth_loop = depth_loop, rows_loop
    tile_loop, in_tile = sch.split(rows_loop, [None, row_tile])
    sch.reorder(tile_loop, depth_loop, in_tile)
    sch.parallel(tile_loop)
    sch.vectorize(in_tile)


def _read_contiguously(sch, pack):
    """Order a pack block's loops so the innermost walks the source's innermost axis;
    vectorize it when the packed buffer is contiguous along it too."""
    pack_block = sch.get(pack)
    count = len(pack_block.iter_vars)
    loops = sch.get_loops(pack)[-count:]
    source_innermost = pack_block.reads[0].region[-1].min
    target_innermost = pack_block.writes[0].region[-1].min
    bound = _loop_bound_to(sch, pack, loops, source_innermost)
    if bound is None:
        return
    sch.reorder(*[loop for loop in loops if not loop.same_as(bound)], bound)
    if _loop_bound_to(sch, pack, [bound], target_innermost) is not None and _extent(sch, bound) is not None:
        sch.vectorize(bound)


def _parallel_matmul(sch, outer, row_outer, column_count, column_tile, row_count, depth_count,
                     inner_columns=None):
    """Parallel over the outer tiles (column tiles, or row blocks) when there are
    several, else over the column tiles inside the depth panels (`inner_columns`),
    else over row tiles."""
    work = _product([column_count, row_count, depth_count])
    if work is not None and work < PARALLEL_MIN_ITERATIONS:
        return
    outer_count = _extent(sch, outer)
    if outer_count is None or outer_count >= 4:
        sch.parallel(outer)
    elif inner_columns is not None and (_extent(sch, inner_columns) or 2) >= 2:
        sch.parallel(inner_columns)
    elif (_extent(sch, row_outer) or 2) >= 2:
        sch.parallel(row_outer)


def _inline_layout_producers(sch, block):
    """Inline producers that only move data (transpose, reshape, broadcast) into the
    contraction: the pack then does the transposing. Producers that compute stay
    separate, since the contraction reads each input element many times."""
    for producer in sch.get_producers(block):
        if moves_data(sch.get(producer)):
            _try(sch.compute_inline, producer)


def _inline_epilogue_chain(sch, block):
    """Inline the elementwise epilogue (bias add, activation) into one block per output,
    with the injective blocks before the contraction that only the epilogue reads (FuseOps
    puts `a + b` of `a + b + x @ W` there): the epilogue could not be placed under the
    tile loop while a producer of it runs outside."""
    blocks = _blocks_at_root(sch)
    main = sch.get(block)
    position = next(index for index, other in enumerate(blocks) if sch.get(other).same_as(main))
    epilogue_inputs = [other for other in blocks[:position] if _is_injective_block(sch, other)
                       and not any(sch.get(consumer).same_as(main) for consumer in sch.get_consumers(other))]
    _inline_injective(sch, epilogue_inputs + [other for other in blocks[position + 1:]
                                              if _is_injective_block(sch, other)])


# ---------------------------------------------------------------- rule: reduction

def schedule_reduction(sch: s_tir.Schedule, lanes_of: "VectorLanes") -> bool:
    """Reductions with injective blocks around them: each remaining loop nest
    parallel over its spatial part."""
    blocks = normalize_prim_func(sch)
    if blocks is None or any("O" in info.dom_kind() for info in blocks):
        return False
    injective = [info.block_rv for info in blocks if _is_injective_block(sch, info.block_rv)]
    if len(injective) == len(blocks):
        return False
    _inline_injective(sch, injective)
    roots = _blocks_at_root(sch)
    alone = sum(not _is_injective_block(sch, block) for block in roots) == 1
    for block in _merge_row_nests(sch, roots, lanes_of):
        if _is_injective_block(sch, block):
            _parallel_vectorize(sch, block, lanes_of)
        else:
            _schedule_reduction_block(sch, block, lanes_of, alone)
    return True


def _schedule_reduction_block(sch, block, lanes_of, alone: bool = False):
    """Spatial loops outside, reduction loops inside. When the input's innermost axis
    is spatial (a sum over rows), that axis goes innermost, below the reduction, and
    is vectorized: each vector lane accumulates its own column."""
    info = get_sblock_info(sch, block)
    spatial = [iter_info for iter_info in info.iters if iter_info.kind == "S"]
    reduced = [iter_info for iter_info in info.iters if iter_info.kind == "R"]
    if not reduced:  # normalize_prim_func dropped a unit reduction axis: nothing to decompose
        _parallel_vectorize(sch, block, lanes_of)
        return
    # a reduction of several values at once (argmax's index and value) is left unvectorized
    # across outputs: TVM vectorized its let-bound update wrongly (argmax over axis 0 of a
    # (50, 3) array gave one index for every column)
    several_values = len(sch.get(block).writes) > 1
    vector_axis = None if several_values else _contiguous_spatial_axis(sch, block, spatial)
    lanes = lanes_of(sch.get(block).writes[0].source.dtype)
    outer_spatial = [it.loop_rv for it in spatial if it is not vector_axis]
    reduced_loops = [it.loop_rv for it in reduced]
    # a reduction to one value (a loss) only when it is the function's one reduction: TVM's
    # rfactor fails an internal check on it when the function holds a second. Serial, its
    # adds wait on each other: a sum of 32 x 256 products took 7.5 us
    several_outputs = any(not (isinstance(it.dom, int) and it.dom == 1) for it in spatial)
    if vector_axis is None and (several_outputs or alone) and _reduces_contiguously(sch, block, reduced, lanes):
        _reduce_in_vector_lanes(sch, block, outer_spatial, reduced_loops, lanes)
        return
    if vector_axis is not None and vector_axis.dom >= 2:
        others = _product([it.dom for it in spatial if it is not vector_axis])
        width = _column_block(vector_axis.dom, lanes, others)
        vector_outer, vector_inner = sch.split(vector_axis.loop_rv, [None, width])
        sch.reorder(*outer_spatial, vector_outer, *reduced_loops, vector_inner)
        outer_spatial.append(vector_outer)
        sch.vectorize(vector_inner)
    else:
        sch.reorder(*outer_spatial, *reduced_loops)
    if outer_spatial:
        fused = _fuse(sch, outer_spatial)
        if _worth_parallel(_product([it.dom for it in info.iters])):
            sch.parallel(fused)
    sch.decompose_reduction(block, reduced_loops[0])


def _column_block(extent: int, lanes: int, other_outputs: int | None) -> int:
    """Columns per task of a sum over rows (the innermost axis spatial, below the
    reduction): up to COLUMN_BLOCK_VECTORS vectors, so that each row is read in a run
    of cache lines rather than one line (a vector) every row-stride, while leaving at
    least COLUMN_BLOCKS tasks (with the other outputs) to run in parallel."""
    narrow = _vector_width(extent, lanes)
    if extent % lanes:
        return narrow
    # the other outputs are tasks too: the columns make up the rest (symbolic ones: enough already)
    blocks_wanted = -(-COLUMN_BLOCKS // other_outputs) if other_outputs else 1
    for vectors in range(COLUMN_BLOCK_VECTORS, 1, -1):
        width = vectors * lanes
        if extent % width == 0 and extent // width >= blocks_wanted:
            return width
    return narrow


def _reduces_contiguously(sch, block, reduced, lanes: int) -> bool:
    """Whether the innermost reduced iterator walks the innermost axis of the block's
    largest input, with a static extent of whole vectors (a row sum of a row-major
    matrix, a softmax's denominator)."""
    reads = [region for region in sch.get(block).reads if len(region.region) > 0]
    if not reads or lanes < 2 or sch.get(block).init is None:
        return False
    largest = max(reads, key=lambda region: len(region.region))
    last = reduced[-1]
    return (largest.region[-1].min.same_as(last.var) and isinstance(last.dom, int)
            and last.dom >= 2 * lanes and last.dom % lanes == 0)


def _reduce_in_vector_lanes(sch, block, outer_spatial, reduced_loops, lanes: int):
    """A reduction along the contiguous axis: each of `lanes` partial results
    accumulates every lanes-th element (rfactor), so the loads and the inlined
    expression (an exp, a product) run in vectors; the partials are then reduced per
    output. Parallel over the outputs. Sums are reassociated: the rounding differs
    from a serial sum in the last bits."""
    sch.reorder(*outer_spatial, *reduced_loops)
    _, lane = sch.split(reduced_loops[-1], [None, lanes])
    partial = sch.rfactor(lane, factor_axis=len(sch.get(block).writes[0].region))
    depth = len(outer_spatial)
    if depth:  # the partials' reduction per output, under the same outer loops, fused into one
        sch.reverse_compute_at(block, sch.get_loops(partial)[depth - 1], preserve_unit_loops=True)
        fused = _fuse(sch, sch.get_loops(partial)[:depth])
        if _worth_parallel(_product([_extent(sch, loop) for loop in sch.get_loops(partial)])):
            sch.parallel(fused)  # before decompose_reduction: parallel wants complete blocks
    sch.vectorize(sch.get_loops(partial)[-1])
    first_reduced = 1 if depth else 0
    sch.decompose_reduction(partial, sch.get_loops(partial)[first_reduced])
    sch.decompose_reduction(block, sch.get_loops(block)[first_reduced])


def _contiguous_spatial_axis(sch, block, spatial):
    """The spatial iterator indexing the innermost axis of the block's largest input,
    if that axis is static."""
    reads = [region for region in sch.get(block).reads if len(region.region) > 0]
    if not reads:
        return None
    largest = max(reads, key=lambda region: len(region.region))
    innermost = largest.region[-1].min
    for iter_info in spatial:
        if innermost.same_as(iter_info.var) and isinstance(iter_info.dom, int):
            return iter_info
    return None


# ---------------------------------------------------------------- rule: elementwise

def schedule_elementwise(sch: s_tir.Schedule, lanes_of: "VectorLanes") -> bool:
    """Only injective blocks: inline into one loop nest per output, then parallel
    outer loops and a vectorized inner loop."""
    blocks = normalize_prim_func(sch)
    if not blocks or not all(_is_injective_block(sch, info.block_rv) for info in blocks):
        return False
    _inline_injective(sch, [info.block_rv for info in blocks])
    for block in _merge_row_nests(sch, _blocks_at_root(sch), lanes_of):
        _parallel_vectorize(sch, block, lanes_of)
    return True


# The kinds exclude each other (only injective blocks / one contraction / other
# reductions); the commonest, elementwise, goes first because each try analyses the
# function afresh.
SCHEDULE_RULES = (
    ScheduleRule("elementwise-parallel-vector", schedule_elementwise),
    ScheduleRule("matmul-tiled-packed", schedule_matmul, finish=prefetch_packed_rows),
    ScheduleRule("reduction-parallel-spatial", schedule_reduction),
)


# ---------------------------------------------------------------- shared helpers

def _merge_row_nests(sch, blocks: list, lanes_of: "VectorLanes") -> list:
    """Run consecutive elementwise nests of one shape row by row in one loop: a kernel
    with several outputs (tvm_bridge/output_fusion.py), or keeping an intermediate too
    large to copy into reads at several points, made a pass over memory for each
    nest; merged, a row of each stays in L1 between them. Each run of two or more is
    scheduled here: the rows parallel when there is work enough, each nest's row
    vectorized. Returns the blocks left to schedule one by one (`blocks` otherwise)."""
    left, run = [], []
    for block in [*blocks, None]:
        if block is not None and _row_mergeable(sch, block, run):
            run.append(block)
            continue
        if len(run) >= 2:
            _schedule_merged_rows(sch, run, lanes_of)
        else:
            left += run
        run = [block] if block is not None and _row_mergeable(sch, block, []) else []
        if block is not None and not run:
            left.append(block)
    return left


def _row_mergeable(sch, block, run: list) -> bool:
    """Whether `block` can join `run`: an elementwise nest whose iterators are its
    loops in order (static extents, two loops at least), that writes its output at its
    iterators, of the run's extents, reading what the run writes only at the point it
    writes itself, and without the forms `_parallel_vectorize` schedules specially
    (selects of pieces, reads across rows)."""
    if not _is_injective_block(sch, block):
        return False
    loops = sch.get_loops(block)
    extents = [_extent(sch, loop) for loop in loops]
    realize = _sblock_realize(sch, block)
    statement = sch.get(block)
    if len(loops) < 2 or None in extents or len(realize.iter_values) != len(loops) \
            or not all(value.same_as(sch.get(loop).loop_var) for value, loop in zip(realize.iter_values, loops)):
        return False
    store = statement.body
    iterators = [iter_var.var for iter_var in statement.iter_vars]
    at_iterators = isinstance(store, tirx.BufferStore) and len(store.indices) == len(iterators) and all(
        isinstance(index, tirx.Var) and index.same_as(iterator) for index, iterator in zip(store.indices, iterators))
    if not at_iterators or len(statement.writes) != 1:
        return False
    row, column = iterators[0], iterators[-1]
    if any(_is_select(node) or _reads_across_rows(node, row, column)
           for node in _expression_nodes(store.value, into_loads=False)):
        return False
    if not run:
        return True
    if extents != [_extent(sch, loop) for loop in sch.get_loops(run[0])]:
        return False
    written = [sch.get(other).writes[0].source for other in run]
    return all(_is_pointwise_on(sch, block, buffer) for buffer in written if _reads_buffer(sch, block, buffer))


def _schedule_merged_rows(sch, run: list, lanes_of: "VectorLanes") -> None:
    rows = sch.merge(*[sch.get_loops(block)[0] for block in run])
    iterations = _product([_extent(sch, loop) for loop in sch.get_loops(run[0])]) * len(run)
    for block in run:
        _vectorize_innermost(sch, block, lanes_of(sch.get(block).writes[0].source.dtype))
    if iterations >= PARALLEL_MIN_MERGED_ITERATIONS:
        sch.parallel(rows)


class VectorLanes:
    """How many elements of a dtype fill one vector register of the target, and how
    many vector registers it has: 32 with AVX-512 (zmm0-31), else 16 (AVX2's and SSE's
    ymm/xmm0-15; a 128-bit target of another kind is assumed to have as few)."""

    def __init__(self, vector_bits: int):
        self.vector_bits = vector_bits
        self.registers = 32 if vector_bits >= 512 else 16

    def __call__(self, dtype) -> int:
        bits = tvm.DataType(str(dtype)).bits
        return max(self.vector_bits // max(bits, 8), 1)


def _parallel_vectorize(sch, block, lanes_of: VectorLanes):
    """Fuse a loop nest's outer loops into one parallel loop and vectorize the inner."""
    loops = sch.get_loops(block)
    if not loops:
        return
    dtype = sch.get(block).writes[0].source.dtype
    iterations = _product([_extent(sch, loop) for loop in loops])
    if _partition_pieces(sch, block, lanes_of(dtype), iterations):
        return
    if _tile_transposed_reads(sch, block, lanes_of(dtype), iterations):
        return
    inner = _vectorize_innermost(sch, block, lanes_of(dtype))
    loops = sch.get_loops(block)
    # the innermost loop stays innermost: vectorized, or serial for LLVM's loop vectorizer
    outer_loops = loops[:-1] if len(loops) > 1 else ([] if inner is not None else loops)
    if outer_loops and _worth_parallel_nest(iterations, _element_ops(sch.get(block)) <= LIGHT_ELEMENT_OPS):
        sch.parallel(_fuse(sch, outer_loops))


def _tile_transposed_reads(sch, block, lanes: int, iterations: int | None) -> bool:
    """A nest that reads some input across its rows (a transpose: the output's
    innermost index walks a non-innermost axis of the input, and the input's innermost
    axis follows the next loop out) runs in square tiles of `lanes` x `lanes`: the
    `lanes` rows of the input a vector reads are the same for the tile's `lanes` output
    rows, and each row's cache line holds all of their elements (untiled, every vector
    read `lanes` lines and used one element of each). The tiles are parallel when there
    is work enough. False, with nothing changed, when the nest is not of that form or
    its two inner extents are not whole tiles."""
    store = sch.get(block).body
    loops = sch.get_loops(block)
    if not isinstance(store, tirx.BufferStore) or len(loops) < 2 or lanes < 2 \
            or tvm.DataType(str(store.buffer.dtype)).bits < 8:  # bool vectors: see _vectorize_innermost
        return False
    outer, inner = loops[-2], loops[-1]
    if any(extent is None or extent % lanes for extent in (_extent(sch, outer), _extent(sch, inner))):
        return False
    row, column = _iterator_bound_to(sch, block, outer), _iterator_bound_to(sch, block, inner)
    if row is None or column is None or not any(
            _reads_across_rows(node, row, column) for node in _expression_nodes(store.value, into_loads=False)):
        return False
    row_outer, row_inner = sch.split(outer, [None, lanes])
    column_outer, column_inner = sch.split(inner, [None, lanes])
    sch.reorder(row_outer, column_outer, row_inner, column_inner)
    sch.vectorize(column_inner)
    tiles = sch.get_loops(block)[:-2]
    if _worth_parallel_nest(iterations, _element_ops(sch.get(block)) <= LIGHT_ELEMENT_OPS):
        sch.parallel(_fuse(sch, tiles))
    return True


def _reads_across_rows(node, row, column) -> bool:
    """Whether `node` loads an input whose innermost index depends on `row` and not on
    `column`, while an index before it depends on `column`."""
    if not isinstance(node, tvm.ir.expr.TensorLoad) or len(node.indices) < 2:
        return False

    def uses(index, var) -> bool:
        return any(found.same_as(var) for found in _expression_nodes(index))

    *leading, last = node.indices
    return uses(last, row) and not uses(last, column) and any(uses(index, column) for index in leading)


def _partition_pieces(sch, block, lanes: int, iterations: int | None) -> bool:
    """A block whose value picks one of several pieces by comparing its innermost
    iterator with constants (`if_then_else(768 <= j, .., if_then_else(512 <= j, ..))`: a
    concatenation, with each operand's computation fused in) computes, vectorized, every
    piece for every element and selects. Its innermost loop is split into vectors and
    partitioned at the pieces' bounds instead, so that each part computes its own piece
    (the lowering's simplifier drops the conditions each part decides). The loops
    outside are parallel when there is work enough. False, with nothing changed, when
    the block is not of that form or a bound does not fall between two vectors."""
    store = sch.get(block).body
    if not isinstance(store, tirx.BufferStore):
        return False
    iterator, bounds = None, set()
    for node in _expression_nodes(store.value):
        if _is_select(node):
            found = _bound_compared(node.args[0])
            if found is None or (iterator is not None and not found[0].same_as(iterator)):
                return False
            iterator = found[0]
            bounds.add(found[1])
    loops = sch.get_loops(block)
    bound = _iterator_bound_to(sch, block, loops[-1])
    if iterator is None or bound is None or not bound.same_as(iterator):
        return False  # the pieces are not cut along the innermost loop alone
    extent = _extent(sch, loops[-1])
    width = _vector_width(extent, lanes) if extent is not None else 1
    bounds = sorted(b for b in bounds if 0 < b < (extent or 0))
    if width < 2 or not bounds or any(b % width for b in bounds):
        return False
    light = _element_ops(sch.get(block)) <= LIGHT_ELEMENT_OPS
    vectors, _ = sch.split(loops[-1], [None, width])
    starts = [0, *bounds]
    sizes = [(stop - start) // width for start, stop in zip(starts, starts[1:])]
    for part in sch.loop_partition(vectors, [*sizes, None]):
        (piece,) = sch.get_child_blocks(part)
        sch.vectorize(sch.get_loops(piece)[-1])
    outer = loops[:-1]  # (the partition made new blocks: `block` is gone, the loops outside it stay)
    if outer and _worth_parallel_nest(iterations, light):
        sch.parallel(_fuse(sch, outer))
    return True


def _bound_compared(condition):
    """(variable, constant) for `c <= v`, `v >= c`, `v < c` or `c > v`, else None."""
    a, b = getattr(condition, "a", None), getattr(condition, "b", None)
    if isinstance(condition, (tirx.LE, tirx.GT)) and isinstance(a, tirx.IntImm) and isinstance(b, tirx.Var):
        return b, a.value + (1 if isinstance(condition, tirx.GT) else 0)
    if isinstance(condition, (tirx.GE, tirx.LT)) and isinstance(a, tirx.Var) and isinstance(b, tirx.IntImm):
        return a, b.value
    return None


_ELEMENT_OP_TYPES = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.Max, tirx.Min, tirx.Select,
                     tvm.ir.expr.Call)


def _element_ops(block) -> int:
    """Operations a block computes per element, its loads' index arithmetic and its
    selections (a concatenation's `if_then_else`) left out; a block that is not one
    store counts as heavy."""
    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return LIGHT_ELEMENT_OPS + 1
    return sum(isinstance(node, _ELEMENT_OP_TYPES) and not _is_select(node)
               for node in _expression_nodes(store.value, into_loads=False))


def _is_select(node) -> bool:
    return isinstance(node, tvm.ir.expr.Call) and getattr(node.op, "name", "") == "prim.if_then_else"


def _worth_parallel_nest(iterations: int | None, light: bool) -> bool:
    """Whether a loop nest of `iterations` elements gains from a parallel launch; a
    light one (LIGHT_ELEMENT_OPS) needs more of them."""
    return _worth_parallel(iterations) and (not light or iterations is None
                                            or iterations >= PARALLEL_MIN_LIGHT_ITERATIONS)


def _vectorize_innermost(sch, block, lanes: int):
    """Vectorize the innermost loop of `block` when its extent is static: whole if
    short, else in vectors that divide it (no tail predicate). A symbolic extent is
    left to LLVM's loop vectorizer, which handles the tail. Returns the vector loop."""
    if tvm.DataType(str(sch.get(block).writes[0].source.dtype)).bits < 8:
        return None  # bool vectors have no byte-addressable layout in memory
    inner = sch.get_loops(block)[-1]
    extent = _extent(sch, inner)
    if extent is None or extent < 2:
        return None
    width = _vector_width(extent, lanes)
    if width < 2:
        return None
    if width < extent:
        inner = sch.split(inner, [None, width])[1]
    sch.vectorize(inner)
    return inner


def _vector_width(extent: int, lanes: int) -> int:
    """Elements per vector loop for a static extent: all of a short loop, else the
    largest divisor not above `lanes`."""
    if extent <= lanes:
        return extent
    for width in range(lanes, 1, -1):
        if extent % width == 0:
            return width
    return 1


def _worth_parallel(iterations: int | None) -> bool:
    return iterations is None or iterations >= PARALLEL_MIN_ITERATIONS


def _blocks_at_root(sch) -> list:
    """The blocks of the root scope in program order (each in its own loop nest while
    nothing has been computed at another block's loops)."""
    return list(sch.get_child_blocks(sch.get_sblock("root"))) if _has_root(sch) else []


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
    except Exception:  # a PrimFunc without the implicit root block
        return False
    return True


def _is_injective_block(sch, block) -> bool:
    """Only spatial iterators and no init. (normalize_prim_func drops unit iterators,
    so its SBlockInfo calls a reduction over an axis of extent 1 injective.)"""
    statement = sch.get(block)
    return statement.init is None and all(iter_var.iter_type == tirx.IterVar.DataPar
                                          for iter_var in statement.iter_vars)


def _inline_injective(sch, blocks) -> None:
    """Inline injective blocks into their consumers, or else into an injective
    producer, until nothing more inlines. Never into a reduction: TVM's
    reverse_compute_inline into a block with an init (a unit-extent reduction)
    applies the consumer to the init as well."""
    remaining = list(blocks)
    progress = True
    while progress:
        progress = False
        for block in list(remaining):  # one pass inlines all it can: a pass per block was quadratic
            consumers, producers = sch.get_consumers(block), sch.get_producers(block)
            inlined = (not _would_copy_expression(sch, block, consumers) and _try(sch.compute_inline, block)) or (
                all(_is_injective_block(sch, producer) and len(sch.get_consumers(producer)) == 1
                    for producer in producers)  # (TVM would drop a buffer another consumer reads)
                and not any(_would_copy_expression(sch, producer, [block]) for producer in producers)
                and _try(sch.reverse_compute_inline, block))
            if inlined:
                remaining.remove(block)
                progress = True


def _reads_buffer(sch, block, buffer) -> bool:
    return any(region.source.same_as(buffer) for region in sch.get(block).reads)


def _is_pointwise_on(sch, block, buffer) -> bool:
    """Whether `block` writes one buffer of `buffer`'s shape, reading `buffer` only at the
    point it writes: an epilogue that can run tile by tile. TVM's reverse_compute_at and
    reverse_compute_inline place a consumer's points where the producer's tile reaches
    them; a consumer with more points (the product added into some columns of a larger
    gradient: `zeros(5, 15)` with `h.T @ g` in columns 0-4) would leave the others unwritten."""
    statement = sch.get(block)
    if len(statement.writes) != 1:
        return False
    write = statement.writes[0]
    if not _same_exprs(write.source.shape, buffer.shape):
        return False
    written_at = [axis.min for axis in write.region]
    return all(_point_access_vars(region) is not None and _same_exprs([axis.min for axis in region.region], written_at)
               for region in statement.reads if region.source.same_as(buffer))


def _same_exprs(a, b) -> bool:
    """Whether two lists of TIR expressions (shapes, or a point's indices) are equal."""
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def _point_access_vars(region) -> set | None:
    """The iterator variables a buffer access uses, if it touches a single point."""
    used = set()
    for axis in region.region:
        if not (isinstance(axis.extent, tirx.IntImm) and axis.extent.value == 1):
            return None
        used |= set(undefined_vars(axis.min))
    return used


def _loop_bound_to(sch, block, loops, expression):
    """The loop among `loops` whose variable drives `expression` in `block`'s binding."""
    realize = _sblock_realize(sch, block)
    targets = set(undefined_vars(expression))
    for loop in loops:
        loop_var = sch.get(loop).loop_var
        for iter_var, value in zip(realize.block.iter_vars, realize.iter_values):
            if iter_var.var in targets and loop_var in set(undefined_vars(value)):
                return loop
    return None


def _iterator_bound_to(sch, block, loop):
    """The iterator of `block` bound to `loop`'s variable alone, if any."""
    realize = _sblock_realize(sch, block)
    loop_var = sch.get(loop).loop_var
    return next((iter_var.var for iter_var, value in zip(realize.block.iter_vars, realize.iter_values)
                 if value.same_as(loop_var)), None)


def _sblock_realize(sch, block):
    from tvm.s_tir.dlight.analysis.common_analysis import get_sblockrealize

    return get_sblockrealize(sch, block)


def _is_unit(extent) -> bool:
    return isinstance(extent, int) and extent == 1


def _fuse(sch, loops):
    return loops[0] if len(loops) == 1 else sch.fuse(*loops)


def _extent(sch, loop) -> int | None:
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


def _product(extents) -> int | None:
    total = 1
    for extent in extents:
        if not isinstance(extent, int):
            return None
        total *= extent
    return total


# Inlining a block's expression where it is read twice writes it out twice; along a
# chain of such blocks the copies multiply: a float32 tanh's polynomial reads its input
# five times (tvm_bridge/elementwise.py), and 7 unrolled tanh steps never built.
MAX_COPIED_EXPRESSION = 8  # nodes: an add or a cast is copied, a polynomial is not
# ... where the consumer reads it at several points (concatenate([t, t])): read at one point
# only, however often (a sigmoid's polynomial reads its input 20 times), the copies are
# one value, which LLVM computes once, and inlining saves the block's buffer.
INLINE_READS_AT_ONE_POINT = True
# A block read once by each of two consumers is copied into both, which is cheaper than
# a round trip through memory while the copies are small; but along a chain of them
# (h = sin(h) + cos(h)) each step doubled the kernel: 12 steps took 1.6 s to build, 14
# about 9 s (found by fuzzing). No inlining makes an expression larger than this.
MAX_INLINED_EXPRESSION = 1000  # nodes


def _would_copy_expression(sch, producer, consumers) -> bool:
    """Whether inlining `producer` into `consumers` (either way) writes a large
    expression more than once in one of them, or makes one too large."""
    store = sch.get(producer).body
    if not isinstance(store, tirx.BufferStore):
        return False
    size = len(_expression_nodes(store.value))
    for consumer in consumers:
        consumer_store = sch.get(consumer).body
        if not isinstance(consumer_store, tirx.BufferStore):
            continue
        nodes = _expression_nodes(consumer_store.value)
        loads = [node for node in nodes
                 if isinstance(node, tvm.ir.expr.TensorLoad) and node.source.same_as(store.buffer)]
        if len(nodes) + len(loads) * size > MAX_INLINED_EXPRESSION:
            return True
        at_points = 1 if INLINE_READS_AT_ONE_POINT and _one_point(loads) else len(loads)
        if at_points > 1 and size > MAX_COPIED_EXPRESSION:
            return True
    return False


def _one_point(loads) -> bool:
    """Whether loads of one buffer all read the same element: copies of an expression
    there compute one value, which LLVM computes once."""
    return all(_same_exprs(load.indices, loads[0].indices) for load in loads[1:])


def _expression_nodes(expr, into_loads: bool = True) -> list:
    """Every node of a TIR expression tree (TVM 0.27 has no Python TIR visitor: this
    walks the FFI fields of each node); with `into_loads=False`, not the indices of its
    loads."""
    nodes, stack = [], [expr]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not into_loads and isinstance(node, tvm.ir.expr.TensorLoad):
            continue
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        for field in info.fields if info is not None else ():
            child = getattr(node, field.name, None)
            for item in (child if isinstance(child, tvm_ffi.Array) else (child,)):
                if isinstance(item, tvm.ir.expr.Expr) and not isinstance(item, tvm.ir.Op):
                    stack.append(item)
    return nodes


def _try(primitive, *args) -> bool:
    try:
        primitive(*args)
    except Exception:  # a primitive's preconditions are cheapest checked by trying it
        return False
    return True


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    return func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False))


def matmul_column_tile(target, dtype) -> int:
    """Columns of the matmul micro-kernel's register tile on `target` (an llvm target)
    for `dtype`: MATMUL_VECTORS_PER_TILE vectors (tvm_bridge/pack_weights.py packs
    loop-invariant operands in tiles of this width)."""
    return VectorLanes(_vector_bits(_as_target(target)))(dtype) * MATMUL_VECTORS_PER_TILE


def _vector_bits(target) -> int:
    with target:
        if target_has_features("avx512f"):
            return 512
        if target_has_features("avx2") or target_has_features("avx"):
            return 256
    return 128


def _as_target(target) -> tvm.target.Target:
    return target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)

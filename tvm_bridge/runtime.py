"""Packed functions that compiled programs call back into: the loop drivers and tapes.

Loops run in a *driver* (DESIGN §7, measured here: ~1.6 µs an iteration, memory flat
over 100,000 iterations): the loop body is a Relax function, passed to the driver as
a VM closure, and the driver calls it once per iteration through the VM's
`invoke_closure`. Relax has no tail calls, so a recursive loop would hold a native
stack frame (and its tensors) per iteration; the driver holds one.

Tapes are handles (int64 scalars) into a Python-side table of stacks (`_Tape`).

A packed function must never return one of its own arguments that the VM allocated:
the VM's memory planner may reuse such a buffer once the call has consumed it. Loops
return copies of whatever of their state still is an argument (`_not_arguments`): all
of it after zero trips, a value every trip passed through. Tape handles are the
exception: each is a tensor made here by `tape_alloc`, outside the VM's storage
pool, so push and pop hand the same handle back (making a new one cost ~35 us, the
largest part of a push).

Everything here runs once per iteration or per tape op, so it avoids slow paths:
scalars are read through DLPack (~1 us) rather than `.numpy()` (~14 us).
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import itertools
import json
import math
import sys
import threading

import numpy as np
import tvm
import tvm_ffi
from tvm_ffi import _ffi_api as _ffi

_TAPES: dict[int, "_Tape"] = {}
_TAPE_HANDLE_ADDRESSES: set[int] = set()  # where the live tapes' handle tensors' data are
_tape_ids = itertools.count(1)
# The tapes made by the call running in each thread (the VM calls back into this
# module on the caller's thread), so that a call releases its own, not those of a
# call running beside it in another thread.
_CALL = threading.local()


def _scalar(value) -> int:
    """A scalar tensor's value (a host tensor through DLPack, without a copy)."""
    if not hasattr(value, "numpy"):
        return int(value)
    if value.device.dlpack_device_type() == 1:  # kDLCPU
        return int(np.from_dlpack(value))
    return int(value.numpy())


_NUMPY_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64"}


class _StackedRows:
    """A loop's per-iteration outputs, stacked along a new first axis as they come:
    each row is copied into its place right after its iteration, while it is still
    in cache, and its buffer goes back to the VM's pool at once (stacking all rows
    at the end read them cold: 12.8 ms for 10 MiB of an LSTM's stacked gradients,
    and held every row until then). Host memory comes from `_SPARE_BUFFERS`.

    A body that writes its rows in place (tvm_bridge/rows_in_place.py) gets the
    stacks before its first trip (`allocate`) and each trip's row offsets; a row
    already in its place is not copied (an LSTM's T=64 gradient: 2 of its 512 rows a
    step are still copied, the initial states it stacks)."""

    def __init__(self, trips: int, layout: str):
        self.trips, self.layout = trips, layout
        self.tensors: list | None = None
        # host rows: (where the stack starts, bytes a row, the row's shape) per output,
        # copied with one memmove each (0.9 us a 32 KiB row, against 1.4 us through numpy)
        self.host_rows: list | None = None
        self.offsets: list | None = None  # a body writing its rows in place: each trip's row offsets
        self.stacks: list | None = None  # what it writes them into: the stacks and a spare last row

    def allocate(self, device, values, ahead: bool) -> None:
        """Make the stacks before the first trip, from the layout (static shapes), for a
        body whose kernels write the rows into them (tvm_bridge/rows_in_place.py), each
        with a spare last row: where the last trip of a body writing its next trip's
        rows (`ahead`, a loop running forward) writes them."""
        rows = [((*(_row_dim(d, values) for d in shape),), dtype) for shape, dtype in json.loads(self.layout)]
        self._make(rows, device, spare_row=True)
        sizes = tuple(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in rows)
        self.offsets = _row_offsets(self.trips, sizes, ahead)

    def holds(self, value) -> bool:
        """Whether `value` is a row of a stack a body wrote in place."""
        if self.stacks is None or not isinstance(value, tvm.runtime.Tensor):
            return False
        at = value.data_ptr()
        return any(0 <= at - stack.data_ptr() < _nbytes(stack) for stack in self.stacks)

    def in_place_arguments(self, k: int) -> tuple:
        """What a body writing its rows in place takes after its invariants on row k."""
        return () if self.stacks is None else (*self.stacks, self.offsets[k])

    def _make(self, rows, device, spare_row: bool = False) -> None:
        """The stacks of rows of these (shape, dtype)s (`tensors`, the loop's results),
        and with `spare_row` the allocations they are the first rows of (`stacks`)."""
        allocated = self.trips + spare_row
        if device.dlpack_device_type() == 1 and all(dtype in _NUMPY_DTYPES for _, dtype in rows):
            # host tensors numpy can hold: reused host memory
            views = [_SPARE_BUFFERS.aligned((allocated, *shape), dtype) for shape, dtype in rows]
            stacks = [tvm.runtime.from_dlpack(view) for view in views]
            self.tensors = [tvm.runtime.from_dlpack(view[:self.trips]) for view in views] if spare_row else stacks
            self.host_rows = [(view.ctypes.data, view[0].nbytes, shape) for view, (shape, _) in zip(views, rows)]
        else:
            stacks = [tvm.runtime.empty((allocated, *shape), dtype, device) for shape, dtype in rows]
            self.tensors = [stack._create_view((self.trips, *shape), dtype, 0) for stack, (shape, dtype)
                            in zip(stacks, rows)] if spare_row else stacks
        if spare_row:
            self.stacks = stacks

    def put(self, k: int, row) -> None:
        """Row k of each stack, from the values of `row`."""
        self.put_rows(k, dict(enumerate(row)))

    def in_place(self, k: int, j: int, value) -> bool:
        """Whether `value` is row k of stack j, written there by the body's kernel."""
        return self.stacks is not None and value.data_ptr() == self.stacks[j].data_ptr() + k * _nbytes(value)

    def put_rows(self, k: int, rows: dict) -> None:
        """Row k of the stacks `rows` names ({index: value})."""
        if not rows:
            return
        if self.tensors is None:
            self._make([(tuple(value.shape), str(value.dtype)) for value in rows.values()],
                       next(iter(rows.values())).device)
        if self.host_rows is not None:
            for j, value in rows.items():
                start, size, shape = self.host_rows[j]
                at = start + k * size
                if value.data_ptr() == at:
                    continue  # a kernel wrote it in place
                # a body's rows share one shape and are compact (kernel outputs, compact arguments): never expected
                if value.shape != shape or not value.is_contiguous():
                    raise ValueError(f"egad loop: a stacked row of shape {tuple(value.shape)} "
                                     f"(contiguous: {value.is_contiguous()}) after rows of shape {tuple(shape)}")
                ctypes.memmove(at, value.data_ptr(), size)
        else:
            for j, value in rows.items():
                if not self.in_place(k, j, value):
                    self.tensors[j]._create_view(tuple(value.shape), value.dtype, k * _nbytes(value)).copyfrom(value)

    def result(self, device, values) -> list:
        if self.tensors is None:  # zero rows: the shapes come from the layout (lower.py `_row_layout`)
            return [tvm.runtime.tensor(np.zeros([0, *(_row_dim(d, values) for d in shape)], dtype), device)
                    for shape, dtype in json.loads(self.layout)]
        return self.tensors


@functools.lru_cache(maxsize=256)
def _row_offsets(trips: int, sizes: tuple, ahead: bool) -> list:
    """Per trip k, the shape a body writing its rows in place takes: k * size for each
    stack's row size, then (`ahead`) (k + 1) * size. Made once per loop shape, as a
    ShapeTuple costs ~1-2 us to make."""
    return [tvm.runtime.ShapeTuple([k * size for size in sizes] + [(k + 1) * size for size in sizes if ahead])
            for k in range(trips)]


def _row_dim(dim, values) -> int:
    """A stacked row's dim: static, or read off a value the loop was given."""
    if isinstance(dim, int):
        return dim
    if dim is None:
        raise ValueError("egad loop: a loop that ran no trip stacks rows whose size only its body knows; "
                         "give the rows a static size or one of the loop's inputs' sizes")
    k, axis, less = dim
    return max(int(values[k].shape[axis]) - less, 0)


def _items(array) -> list:
    """The elements of an FFI Array: two FFI calls a value, against ~1.7 us of Python
    indexing helpers per value for `list(array)` (a body returns ~20 values per trip)."""
    get = _ffi.ArrayGetItem
    return [get(array, k) for k in range(_ffi.ArraySize(array))]


def _nbytes(tensor) -> int:
    return math.prod(tensor.shape) * np.dtype(str(tensor.dtype)).itemsize


@tvm_ffi.register_global_func("egad.for_loop", override=True)
def _for_loop(invoke, body, lo, hi, reverse, n_state, ys_layout, rows_in_place, *values):
    """`rows_in_place` (tvm_bridge/rows_in_place.py): 0 where the body takes no stacks,
    else 1 + 2 x a mask. The body takes the stacks and each trip's row offsets after its
    invariants, and its kernels write the rows there; the mask (bit k: row k) names
    those they write there on every trip but the first, which the driver does not fetch
    from the body's results from the third trip on: it checks them on the second, and
    fetches them all where they were not there (a device on which ensure_zero_offset
    copies the view, tvm_bridge/rows_in_place.py)."""
    n_state, rows_in_place = int(n_state), int(rows_in_place)
    state, invariants = list(values[:n_state]), list(values[n_state:])
    lo, hi = _scalar(lo), _scalar(hi)
    device = values[0].device if values else tvm.cpu()
    steps = range(hi - 1, lo - 1, -1) if int(reverse) else range(lo, hi)
    has_ys = ys_layout != "[]"
    stacked = _StackedRows(len(steps), ys_layout)
    if steps:
        # the body returns its next counter last: one counter tensor made here, none per iteration
        counter = _int64_scalar(steps[0], device)
        if rows_in_place:
            stacked.allocate(device, values, ahead=not int(reverse))
    rows = range(len(json.loads(ys_layout))) if rows_in_place >> 1 else range(0)
    in_place = [k for k in rows if rows_in_place >> (k + 1) & 1]
    fetched = [k for k in rows if k not in in_place]
    get = _ffi.ArrayGetItem
    for trip, i in enumerate(steps):
        results = invoke(body, invoke, counter, *state, *invariants, *stacked.in_place_arguments(i - lo))
        if in_place and trip >= 2:
            state = [get(results, k) for k in range(n_state)]
            stacked.put_rows(i - lo, {k: get(results, n_state + k) for k in fetched})
            counter = get(results, n_state + len(rows))
            continue
        out = _items(results)
        state = out[:n_state]
        if trip == 1 and not all(stacked.in_place(i - lo, k, out[n_state + k]) for k in in_place):
            # a device whose views of the stacks are copies (no pointer arithmetic on the host): every row fetched
            in_place, fetched = [], list(rows)
        if has_ys:
            stacked.put(i - lo, out[n_state:-1])
        counter = out[-1]
    ys = stacked.result(device, values) if has_ys else []
    # a state a kernel also wrote as a row lives in a stack: copied, so no result shares another's memory
    state = [_copy(v) if stacked.holds(v) else v for v in _not_arguments(state, values)]
    return tvm_ffi.convert(state + ys)


@tvm_ffi.register_global_func("egad.while_loop", override=True)
def _while_loop(invoke, cond, body, n_state, max_iters, *values):
    """`while cond(state): state = body(state)`, at most `max_iters` trips (-1: no bound)."""
    n_state, max_iters = int(n_state), int(max_iters)
    state = list(values[:n_state])
    invariants = list(values[n_state:])
    trips = 0
    while _scalar(_ffi.ArrayGetItem(invoke(cond, invoke, *state, *invariants), 0)) and trips != max_iters:
        state = _items(invoke(body, invoke, *state, *invariants))
        trips += 1
    return tvm_ffi.convert(_not_arguments(state, values))


def _not_arguments(results: list, arguments) -> list:
    """`results`, each that holds an argument's buffer copied (the state of a loop that
    ran zero times, or a value every trip passed through, or an invariant carried out):
    the VM may reuse an argument's buffer once the call has consumed it. Tape handles
    are handed back as they are (made by tape_alloc, outside the VM's pool)."""
    given = {_address(v) for v in arguments if isinstance(v, tvm.runtime.Tensor)} - _TAPE_HANDLE_ADDRESSES
    return [_copy(v) if isinstance(v, tvm.runtime.Tensor) and _address(v) in given else v for v in results]


def _address(tensor) -> int:
    """Where a tensor's data starts: an argument, a Relax reshape (a view) of it, or the
    same tensor passed through, all start there."""
    return tensor.data_ptr()


def _copy(value):
    """A new tensor with `value`'s contents, on its device (no trip through the host)."""
    copy = tvm.runtime.empty(tuple(value.shape), value.dtype, value.device)
    copy.copyfrom(value)
    return copy


def _handle(number: int):
    return _int64_scalar(number, tvm.cpu())


def _int64_scalar(value: int, device):
    """A 0-d int64 tensor on `device`. On the host, an empty tensor filled through
    DLPack: ~6 us, against ~35 us for tvm.runtime.tensor of a numpy scalar (paid per
    loop and per tape, so per segment of a checkpointed loop)."""
    if device.dlpack_device_type() == 1:  # kDLCPU
        scalar = tvm.runtime.empty((), "int64", device)
        np.from_dlpack(scalar)[()] = value
        return scalar
    return tvm.runtime.tensor(np.asarray(value, "int64"), device)


@tvm_ffi.register_global_func("egad.tape_alloc", override=True)
def _tape_alloc():
    handle = next(_tape_ids)
    tape = _TAPES[handle] = _Tape()
    made = getattr(_CALL, "tapes", None)
    if made is not None:
        made.append(handle)
    tape.handle = _handle(handle)  # kept alive with the tape, so no other tensor takes its address
    _TAPE_HANDLE_ADDRESSES.add(_address(tape.handle))
    return tape.handle


@tvm_ffi.register_global_func("egad.tape_push", override=True)
def _tape_push(handle, value):
    _TAPES[_scalar(handle)].push(value)  # copied: the VM may reuse the value's buffer after the call
    return handle  # made by tape_alloc, not by the VM: safe to hand back


@tvm_ffi.register_global_func("egad.tape_pop", override=True)
def _tape_pop(handle):
    return tvm_ffi.convert([_TAPES[_scalar(handle)].pop(), handle])


@tvm_ffi.register_global_func("egad.tape_push_all", override=True)
def _tape_push_all(*handles_then_values):
    """`tape_push` for several tapes in one call (tvm_bridge/lower.py groups a body's pushes)."""
    count = len(handles_then_values) // 2
    for handle, value in zip(handles_then_values[:count], handles_then_values[count:]):
        _TAPES[_scalar(handle)].push(value)
    return handles_then_values[0]


@tvm_ffi.register_global_func("egad.tape_pop_all", override=True)
def _tape_pop_all(*handles):
    """`tape_pop` for several tapes in one call: the popped values (the handles stay)."""
    return tvm_ffi.convert([_TAPES[_scalar(handle)].pop() for handle in handles])


class _Tape:
    """One tape's rows. Host rows live in 64-byte aligned slabs: a push copies the
    value into the next row (~3 us, against ~8 us for a fresh TVM tensor per row) and
    a pop hands the VM a zero-copy view of it (~1 us). Device rows, and rows whose
    shape or dtype differ from the first, are kept as tensor copies.

    Slabs grow from about FIRST_SLAB_BYTES up to SLAB_BYTES, then stay that size: a
    tape never copies rows to grow. Each new slab holds at most a quarter of the rows
    before it (`GROWTH`), so a tape's unused rows stay under a quarter of its rows
    (plus one first slab): a short tape (a checkpointed segment's, re-made at every
    segment) takes about what its rows need, as the memory budget's plan counts
    (doubling slabs wasted up to half). A slab whose rows are all popped goes back to
    `_SPARE_BUFFERS`, for the next tapes, once the VM drops the rows popped from it.

    A popped view stays valid while the VM holds it (it keeps its slab alive), so a
    push never writes into a slab that has handed out a view: such a slab is replaced
    by a fresh copy of its live rows first."""

    FIRST_SLAB_BYTES = 16 << 10
    SLAB_BYTES = 1 << 20
    GROWTH = 4  # a new slab holds at most 1/GROWTH of the rows before it (and at least a first slab's)

    __slots__ = ("handle", "rows", "copies", "slabs", "handed_out", "shape", "dtype", "stride", "first", "largest",
                 "growth_starts", "rows_before_largest")

    def __init__(self):
        self.handle = None  # the tensor tape_alloc handed out
        self.rows = 0  # rows in the slabs (the copies, once any exist, hold every row)
        self.copies: list | None = None
        self.slabs: list[np.ndarray] = []  # slab k: (first << k or largest, *shape), rows `stride` bytes apart
        self.handed_out: list[bool] = []
        self.shape = self.dtype = None

    def push(self, value):
        if self.copies is None:
            source = np.from_dlpack(value) if value.device.dlpack_device_type() == 1 else None  # kDLCPU
            if source is not None and self._fits(source):
                slab, row = self._locate(self.rows)
                if slab == len(self.slabs):
                    self.slabs.append(self._new_slab(self._capacity(slab)))
                    self.handed_out.append(False)
                elif self.handed_out[slab]:
                    fresh = self._new_slab(self._capacity(slab))
                    fresh[:row] = self.slabs[slab][:row]
                    self.slabs[slab], self.handed_out[slab] = fresh, False
                np.copyto(self.slabs[slab][row, ...], source)  # `...`: a 0-d row is a view too
                self.rows += 1
                return
            self.copies = [self._row_tensor(k) for k in range(self.rows)]
        self.copies.append(_copy(value))

    def pop(self):
        if self.copies is not None:
            return self.copies.pop()
        self.rows -= 1
        row = self._row_tensor(self.rows)
        slab, at = self._locate(self.rows)
        if at == 0:
            # the last slab holds no rows now: it goes back (once the VM drops the row just popped from
            # it), not when the call returns, so a tape shrinks as the adjoint pops it. Binomial checkpoints
            # (egad/ad/binomial.py) count on it; a checkpointed loop makes fresh tapes per segment.
            _SPARE_BUFFERS.watch([self.slabs[slab].base])
            del self.slabs[slab:], self.handed_out[slab:]
        return row

    def _fits(self, source: np.ndarray) -> bool:
        if self.shape is None:
            if not source.nbytes:
                return False  # an empty row has no aligned pointer to share
            self.shape, self.dtype = source.shape, source.dtype
            self.stride = -(-source.nbytes // 64) * 64  # rows start 64-byte aligned
            # slab sizes in rows: first, first, ..., then each a quarter of the rows before it, up to
            # largest, then largest, largest, ...; growth_starts: where each growing slab starts
            self.largest = max(1, self.SLAB_BYTES // self.stride)
            self.first = min(self.largest, max(1, self.FIRST_SLAB_BYTES // self.stride))
            starts = [0]
            while (size := max(self.first, starts[-1] // self.GROWTH)) < self.largest:
                starts.append(starts[-1] + size)
            self.growth_starts, self.rows_before_largest = tuple(starts), starts[-1]
        return source.shape == self.shape and source.dtype == self.dtype

    def _locate(self, k: int) -> tuple[int, int]:
        """(slab, row in it) of the tape's k-th row."""
        if k < self.rows_before_largest:
            slab = bisect.bisect_right(self.growth_starts, k) - 1
            return slab, k - self.growth_starts[slab]
        slab, row = divmod(k - self.rows_before_largest, self.largest)
        return len(self.growth_starts) - 1 + slab, row

    def _capacity(self, slab: int) -> int:
        growing = len(self.growth_starts) - 1
        return self.growth_starts[slab + 1] - self.growth_starts[slab] if slab < growing else self.largest

    def _new_slab(self, rows: int) -> np.ndarray:
        raw = _SPARE_BUFFERS.take(rows * self.stride + 64)
        start = -raw.ctypes.data % 64
        row_strides = np.empty(self.shape, self.dtype).strides  # C-contiguous within a row
        return np.ndarray((rows, *self.shape), self.dtype, buffer=raw, offset=start,
                          strides=(self.stride, *row_strides))

    def _row_tensor(self, k: int):
        slab, row = self._locate(k)
        self.handed_out[slab] = True
        return tvm.runtime.from_dlpack(self.slabs[slab][row, ...])


class _SpareBuffers:
    """Host memory kept for reuse: the slabs of emptied and released tapes, and the
    stacked outputs of loops, once nothing reads them any more. Fresh memory costs a
    page fault per 4 KiB on first touch (~20 us a 32 KiB row, measured: 7x the copy
    itself), reused memory none. Holds at most LIMIT_BYTES. Calls in several threads
    share it, under a lock."""

    LIMIT_BYTES = 256 << 20
    MAX_LENT = 4096  # buffers lent out and watched; beyond, the oldest are left to the garbage collector

    def __init__(self):
        self.free: dict[int, list[np.ndarray]] = {}
        self.bytes = 0
        self.lent: list[np.ndarray] = []  # buffers that tensors handed to the VM may still read
        self.lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A buffer of at least `size` bytes: a spare one of that size, else the smallest
        spare one up to twice as large (a tape's slabs come in many sizes, and the slabs
        a shrinking tape gives back should serve the next tapes), else a fresh one."""
        for attempt in range(2):
            with self.lock:
                if not self.free.get(size):
                    size = min((s for s, spare in self.free.items() if spare and size < s <= 2 * size),
                               default=size)
                spare = self.free.get(size)
                if spare:
                    self.bytes -= size
                    return spare.pop()
            if attempt == 0:
                self.reclaim()  # buffers of tapes emptied earlier in this call, if nothing reads them now
        self._evict(size)
        return np.empty(size, np.uint8)

    def _evict(self, size: int) -> None:
        """Let go of `size` bytes of spare buffers, the largest first: none of them served
        this request, and kept they would add to what the process holds (a shrinking
        tape's slabs come in sizes that later tapes may never ask for)."""
        with self.lock:
            freed = 0
            for spare_size in sorted(self.free, reverse=True):
                spare = self.free[spare_size]
                while spare and freed < size:
                    spare.pop()
                    freed += spare_size
                    self.bytes -= spare_size
                if freed >= size:
                    break

    def aligned(self, shape: tuple, dtype) -> np.ndarray:
        """A 64-byte aligned C-contiguous array (TVM kernels assume the alignment) on a
        buffer that comes back here once no tensor reads it (`reclaim`)."""
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize  # np.prod took 7 us, paid per stacked output of a loop
        raw = self.take(size + 64)
        self.watch([raw])
        return np.ndarray(shape, dtype, buffer=raw, offset=-raw.ctypes.data % 64)

    def watch(self, raws) -> None:
        """Take these buffers back once nothing reads them (`reclaim`)."""
        with self.lock:
            self.lent.extend(raws)
            del self.lent[:-self.MAX_LENT]

    def reclaim(self) -> None:
        """Keep the lent buffers that no array or tensor reads any more."""
        with self.lock:
            lent, self.lent = self.lent, []
        still = []
        for raw in lent:
            # references: `lent`, `raw`, getrefcount's argument; a live view adds one
            (self._keep(raw) if sys.getrefcount(raw) == 3 else still.append(raw))
        with self.lock:
            self.lent[:0] = still

    def clear(self) -> None:
        """Forget every spare buffer."""
        with self.lock:
            self.free, self.bytes, self.lent = {}, 0, []

    def give_back(self, tape: _Tape):
        """Watch the slabs of a released tape, like an emptied one's (`reclaim` keeps
        those that no popped view still reads)."""
        self.watch(slab.base for slab in tape.slabs)

    def _keep(self, raw: np.ndarray) -> None:
        with self.lock:
            if self.bytes + raw.nbytes <= self.LIMIT_BYTES:
                self.free.setdefault(raw.nbytes, []).append(raw)
                self.bytes += raw.nbytes


_SPARE_BUFFERS = _SpareBuffers()


def forget_spare_buffers() -> None:
    """Drop the host buffers kept for reuse (benchmarks/memory.py measures a call's
    memory from none)."""
    _SPARE_BUFFERS.clear()


def start_call() -> list[int]:
    """Record the tapes this thread's call makes from now on (`release_tapes` after it)."""
    _CALL.tapes = []
    return _CALL.tapes


def release_tapes(handles: list[int]):
    """Forget these tapes (after the call that made them returns)."""
    _CALL.tapes = None
    for handle in handles:
        tape = _TAPES.pop(handle)
        _TAPE_HANDLE_ADDRESSES.discard(_address(tape.handle))
        _SPARE_BUFFERS.give_back(tape)
    _SPARE_BUFFERS.reclaim()


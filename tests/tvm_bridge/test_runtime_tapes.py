"""The compiled programs' tapes (tvm_bridge/runtime.py `_Tape`): rows in aligned slabs,
popped as views that no later push may overwrite."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from egad.tvm_bridge import runtime


def tensor(value):
    return tvm.runtime.tensor(np.asarray(value))


@pytest.fixture
def small_slabs(monkeypatch):
    """Slabs of 1, 1, 2, then 4 rows of 3 float32 (padded to 64 bytes; each new slab as
    large as the rows before it), so tests cross slabs."""
    monkeypatch.setattr(runtime._Tape, "FIRST_SLAB_BYTES", 64)
    monkeypatch.setattr(runtime._Tape, "SLAB_BYTES", 4 * 64)
    monkeypatch.setattr(runtime._Tape, "GROWTH", 1)


def test_rows_come_back_last_in_first_out_across_slabs(small_slabs):
    tape = runtime._Tape()
    rows = [np.arange(3, dtype=np.float32) + 10 * k for k in range(8)]
    for row in rows:
        tape.push(tensor(row))
    assert [len(slab) for slab in tape.slabs] == [1, 1, 2, 4]
    for row in reversed(rows):
        popped = tape.pop()
        assert popped.data_ptr() % 64 == 0  # the VM's kernels assume 64-byte aligned buffers
        np.testing.assert_array_equal(popped.numpy(), row)


@pytest.mark.parametrize("row_bytes", [4, 64, 3000, 40_000, 2 << 20])
def test_slabs_grow_by_a_quarter_up_to_their_largest_and_every_row_has_its_own_place(row_bytes):
    tape = runtime._Tape()
    assert tape._fits(np.zeros(row_bytes // 4, np.float32))
    places = [tape._locate(k) for k in range(300)]
    assert len(set(places)) == 300
    capacities = [tape._capacity(slab) for slab in range(places[-1][0] + 1)]
    assert all(row < capacities[slab] for slab, row in places)
    assert places == [(slab, row) for slab, size in enumerate(capacities) for row in range(size)][:300]
    assert capacities[0] * tape.stride <= max(tape.FIRST_SLAB_BYTES, tape.stride)
    assert max(capacities) * tape.stride <= max(tape.SLAB_BYTES, tape.stride)
    starts = np.cumsum([0, *capacities])
    # a short tape wastes little: no slab holds more than a quarter of the rows before it (or a first slab)
    assert all(size <= max(capacities[0], start // tape.GROWTH) or size == max(capacities)
               for size, start in zip(capacities, starts))
    assert capacities == sorted(capacities)


def test_a_push_never_overwrites_a_popped_row_still_held(small_slabs):
    tape = runtime._Tape()
    for k in range(4):
        tape.push(tensor(np.full(3, k, np.float32)))
    held = [tape.pop(), tape.pop()]  # rows 3 and 2, views into the slabs
    tape.push(tensor(np.full(3, 7, np.float32)))  # lands where row 2 was
    tape.push(tensor(np.full(3, 8, np.float32)))
    np.testing.assert_array_equal(held[0].numpy(), np.full(3, 3, np.float32))
    np.testing.assert_array_equal(held[1].numpy(), np.full(3, 2, np.float32))
    assert [tape.pop().numpy()[0] for _ in range(4)] == [8, 7, 1, 0]


def test_a_pushed_value_is_copied():
    tape = runtime._Tape()
    source = tensor(np.ones((2, 2), np.float32))
    tape.push(source)
    np.from_dlpack(source)[...] = 5  # the VM may reuse a value's buffer once the push returned
    np.testing.assert_array_equal(tape.pop().numpy(), np.ones((2, 2), np.float32))


@pytest.mark.parametrize("values", [
    [np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)],  # empty rows: no pointer to share
    [np.ones(3, np.float32), np.ones(4, np.float32), np.ones((), np.float64)],  # shapes and dtypes change
    [np.asarray(1.5), np.asarray(-2.0), np.asarray(3.0)],  # scalars: rows of a slab too
])
def test_rows_of_any_shape_come_back(values):
    tape = runtime._Tape()
    for value in values:
        tape.push(tensor(value))
    for value in reversed(values):
        got = tape.pop().numpy()
        assert got.shape == value.shape and got.dtype == value.dtype
        np.testing.assert_array_equal(got, value)


def _released(rows, keep_popped: bool):
    """A tape of `rows`, all popped (kept or dropped), then released as after a call."""
    handle = int(runtime._tape_alloc().numpy())
    for row in rows:
        runtime._TAPES[handle].push(tensor(row))
    popped = [runtime._TAPES[handle].pop() for _ in rows]
    if not keep_popped:
        popped = None  # the VM dropped them by the time the call returned
    runtime.release_tapes([handle])
    return popped


def test_released_slabs_are_reused_unless_a_popped_row_is_still_held(monkeypatch):
    spare = runtime._SpareBuffers()
    monkeypatch.setattr(runtime, "_SPARE_BUFFERS", spare)
    held = _released([np.full(3, 1.0, np.float32)], keep_popped=True)  # e.g. a result returned to the user
    assert spare.bytes == 0
    _released([np.full(3, 2.0, np.float32)], keep_popped=False)
    assert spare.bytes > 0  # fresh memory costs a page fault per 4 KiB: the next call reuses this
    reused = runtime._Tape()
    reused.push(tensor(np.full(3, 3.0, np.float32)))
    assert spare.bytes == 0
    np.testing.assert_array_equal(held[0].numpy(), np.full(3, 1.0, np.float32))
    np.testing.assert_array_equal(reused.pop().numpy(), np.full(3, 3.0, np.float32))


def test_stacked_loop_outputs_are_in_place_and_their_memory_comes_back_once_unread(monkeypatch):
    """A loop's per-trip outputs go into one aligned buffer as the trips run; once
    nothing reads it after a call, the next call's stacking reuses it (no page faults)."""
    spare = runtime._SpareBuffers()
    monkeypatch.setattr(runtime, "_SPARE_BUFFERS", spare)
    rows = [[tensor(np.full((2, 3), k, np.float32)), tensor(np.int64(k))] for k in range(4)]
    stacked = runtime._StackedRows(4, "")
    for k in (3, 1, 0, 2):  # a reverse loop, say: rows arrive in any order
        stacked.put(k, rows[k])
    values, counters = stacked.result(tvm.cpu(), [])
    assert values.data_ptr() % 64 == 0 and counters.data_ptr() % 64 == 0
    np.testing.assert_array_equal(values.numpy(), np.arange(4, dtype=np.float32)[:, None, None] * np.ones((2, 3)))
    np.testing.assert_array_equal(counters.numpy(), np.arange(4))
    spare.reclaim()
    assert spare.bytes == 0  # both still read
    first = values.data_ptr()
    del counters, stacked
    values_numpy = values.numpy()
    del values
    spare.reclaim()
    assert spare.bytes > 0 and len(spare.lent) == 0
    again = runtime._StackedRows(4, "")
    for k in range(4):
        again.put(k, rows[k])
    assert again.result(tvm.cpu(), [])[0].data_ptr() == first
    np.testing.assert_array_equal(values_numpy[1], np.ones((2, 3)))


def test_a_stacked_row_of_another_shape_is_refused_not_copied_short():
    stacked = runtime._StackedRows(2, "")
    stacked.put(0, [tensor(np.ones((2, 3), np.float32))])
    with pytest.raises(ValueError, match=r"row of shape \(3, 2\) \(contiguous: True\) after rows of shape \(2, 3\)"):
        stacked.put(1, [tensor(np.ones((3, 2), np.float32))])


def test_a_loop_of_zero_trips_stacks_empty_outputs_of_its_layout():
    empty = runtime._StackedRows(0, '[[[2, 3], "float32"], [[], "int64"]]').result(tvm.cpu(), [])
    assert [tuple(t.shape) for t in empty] == [(0, 2, 3), (0,)]
    assert [str(t.dtype) for t in empty] == ["float32", "int64"]


def test_an_emptied_tapes_slabs_serve_the_next_tape_of_the_same_call(monkeypatch, small_slabs):
    """A checkpointed loop makes fresh tapes for every segment it re-runs; each
    segment's slabs must serve the next segment, not wait for the call to return
    (that held every segment's tapes at once: all the memory checkpointing saves)."""
    spare = runtime._SpareBuffers()
    monkeypatch.setattr(runtime, "_SPARE_BUFFERS", spare)
    first = runtime._Tape()
    for k in range(3):  # slabs of 1, 1 and 2 rows
        first.push(tensor(np.full(3, k, np.float32)))
    held_slab = first.slabs[2].base.ctypes.data
    held = first.pop()  # the VM still reads the last row popped...
    first.pop(), first.pop()
    assert first.slabs == [] and spare.bytes == 0
    second = runtime._Tape()
    for k in range(3):
        second.push(tensor(np.full(3, 9, np.float32)))
    assert held.numpy()[0] == 2  # ...so the slab holding it is not handed out again
    assert second.slabs[2].base.ctypes.data != held_slab
    del held
    third = runtime._Tape()
    for k in range(3):
        third.push(tensor(np.full(3, 5 + k, np.float32)))
    # no longer read: reused (for any slab it is large enough for), no fresh memory
    assert held_slab in [slab.base.ctypes.data for slab in third.slabs]
    np.testing.assert_array_equal(third.pop().numpy(), np.full(3, 7, np.float32))


def test_a_spare_buffer_up_to_twice_the_size_serves_and_a_miss_lets_unused_ones_go(monkeypatch):
    spare = runtime._SpareBuffers()
    monkeypatch.setattr(runtime, "_SPARE_BUFFERS", spare)
    buffers = {size: np.empty(size, np.uint8) for size in (1000, 3000, 5000)}
    for raw in buffers.values():
        spare._keep(raw)
    assert spare.take(900).ctypes.data == buffers[1000].ctypes.data  # the smallest that fits
    assert spare.take(2000).ctypes.data == buffers[3000].ctypes.data  # up to twice the size
    assert spare.bytes == 5000
    fresh = spare.take(2400)  # 5000 is more than twice: a fresh buffer, and the unused 5000 goes
    assert fresh.nbytes == 2400 and spare.bytes == 0


def test_a_tape_gives_back_each_slab_as_its_last_row_is_popped(monkeypatch, small_slabs):
    """Binomial checkpoints (egad/ad/binomial.py) hold fewer checkpoints as the
    adjoint sweeps back: a tape's memory must shrink with its rows, not only once
    it is empty."""
    spare = runtime._SpareBuffers()
    monkeypatch.setattr(runtime, "_SPARE_BUFFERS", spare)
    tape = runtime._Tape()
    for k in range(7):  # slabs of 1, 1, 2 and 4 rows
        tape.push(tensor(np.full(3, k, np.float32)))
    assert [len(slab) for slab in tape.slabs] == [1, 1, 2, 4]
    popped = [tape.pop().numpy()[0] for _ in range(4)]  # views dropped at once
    assert popped == [6, 5, 4, 3] and [len(slab) for slab in tape.slabs] == [1, 1, 2]
    spare.reclaim()
    assert spare.bytes >= 4 * 64  # the 4-row slab is spare memory now
    tape.push(tensor(np.full(3, 9, np.float32)))  # a push after pops lands in a fresh slab
    assert [tape.pop().numpy()[0] for _ in range(4)] == [9, 2, 1, 0] and tape.slabs == []

"""Index checks in compiled code: an index out of range raises `IndexOutOfRangeError`,
as in the interpreter, naming the op and the user's source line.

egad/ir/index_ranges.py proves most indices in range at build time (a loop's counter
reading its rows, an argmax's result, constants); what it cannot prove (token ids, a
program's inputs, loop state) is checked where it runs. On the CPU the check is the
small kernel that wraps negative indices anyway: it walks the indices and, on one out
of range, calls back into Python (`egad.index_out_of_range`), which raises. On other
targets the indices live in device memory and a kernel cannot call Python: the check
is a call on the host (`egad.check_indices`, which copies the indices back), and the
index is then wrapped and clamped on the device as before.

The callback cannot raise egad's own error through TVM (the FFI turns exception
classes it does not know into RuntimeError): it raises IndexError with the site, the
index and the axis size in its message; `Compiled.__call__` turns that into
`IndexOutOfRangeError` with the site's op and source line (`out_of_range_error`).
Sites are numbered in `index_sites` order, the same in every program of one
structure, so a module built for one program and reused for another
(tvm_bridge/cache.py) names the other's lines. The packed functions themselves are in
runtime_checks.py, which needs TVM's runtime alone.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import tirx as T

from egad.errors import INDEX_OUT_OF_RANGE_HINT, IndexOutOfRangeError, message
from egad.ir.index_ranges import index_sites
from egad.ir.program import Program

from .runtime_checks import OUT_OF_RANGE

R = relax.op


def found_out_of_range(error: IndexError) -> tuple[int, int, int] | None:
    """(site, index, axis size) when `error` was raised by an index check, else None."""
    match = OUT_OF_RANGE.search(str(error))
    return tuple(int(group) for group in match.groups()) if match else None


def out_of_range_error(program: Program, found: tuple[int, int, int]) -> IndexOutOfRangeError:
    """The error a compiled `program` raises for `found` (from `found_out_of_range`)."""
    site, index, size = found
    op, where = site_of(index_sites(program), site, "index")
    return IndexOutOfRangeError(message(
        f"{op}: index {index} is out of range for an axis of size {size}", where=where,
        instead=INDEX_OUT_OF_RANGE_HINT))


def site_of(sites: list, site: int, unknown: str) -> tuple[str, str]:
    """(the op, where it is in the user's code) of check site `site` among `sites`;
    (`unknown`, "compiled code") for a site not there."""
    if not 0 <= site < len(sites):
        return unknown, "compiled code"
    binding = sites[site]
    return binding.op, f"op {binding.op!r} at {binding.loc.long()}"


def checked_in_kernel(bb: relax.BlockBuilder, index, size, site: int):
    """`index` (an int tensor of any shape) wrapped into [0, size) by a kernel that
    raises on an element outside [-size, size). `size`: an int, or an int64 scalar
    tensor for a symbolic axis."""
    shape = index.ty.shape
    flat = bb.emit(R.reshape(index, [-1]))
    count = flat.ty.shape.values[0]
    dtype = index.ty.dtype
    operands = [flat] if isinstance(size, int) else [flat, size]
    kernel = bb.add_func(_check_kernel(dtype, site, size if isinstance(size, int) else None),
                         f"check_index_{site}")
    checked = bb.emit(relax.call_tir(kernel, operands, relax.TensorType([count], "int64")))
    return bb.emit(R.reshape(checked, shape))


def checked_on_host(bb: relax.BlockBuilder, index, size, site: int) -> None:
    """A host call raising if an element of `index` is outside [-size, size)."""
    size_arg = relax.prim_value(size, "int64") if isinstance(size, int) else size
    bb.emit(relax.Call(relax.ExternFunc("egad.check_indices"),
                       [index, size_arg, relax.prim_value(site, "int64")],
                       ty_args=[relax.TupleType([])]))


def _check_kernel(dtype: str, site: int, size: int | None) -> tvm.tirx.PrimFunc:
    """A serial walk over the indices (a row index, a batch of token ids: few), wrapping
    each and calling back on one out of range; marked scheduled, so the CPU schedule
    rules leave it alone."""
    if size is not None:
        @T.prim_func(private=True, s_tir=True)
        def check(a: T.handle, b: T.handle):
            n = T.int64()
            indices = T.match_buffer(a, (n,), dtype)
            out = T.match_buffer(b, (n,), "int64")
            with T.sblock("root"):  # Relax's pattern analyses expect a root block
                for k in range(n):
                    value = T.Cast("int64", indices[k])
                    if value < T.int64(-size) or value >= T.int64(size):
                        T.evaluate(T.call_packed("egad.index_out_of_range", T.int64(site), value, T.int64(size)))
                    out[k] = T.Select(value < T.int64(0), value + T.int64(size), value)
        return check.with_attr("tirx.is_scheduled", True)

    @T.prim_func(private=True, s_tir=True)
    def check_symbolic(a: T.handle, s: T.Buffer((), "int64"), b: T.handle):
        n = T.int64()
        indices = T.match_buffer(a, (n,), dtype)
        out = T.match_buffer(b, (n,), "int64")
        with T.sblock("root"):
            for k in range(n):
                value = T.Cast("int64", indices[k])
                if value < -s[()] or value >= s[()]:
                    T.evaluate(T.call_packed("egad.index_out_of_range", T.int64(site), value, s[()]))
                out[k] = T.Select(value < T.int64(0), value + s[()], value)
    return check_symbolic.with_attr("tirx.is_scheduled", True)

"""Where each op's Relax lowering is registered (one file per op family, named as
the family in egad/ir/ops.py: elementwise.py, linalg.py, shape.py, ...)."""
from __future__ import annotations

from typing import Callable

from tvm import relax
from tvm import tirx as tir

from egad.ir import shapes

LOWERINGS: dict[str, Callable] = {}


def lowers(*names: str):
    """Register `fn(bb, args, attrs, binding) -> relax expr (or tuple of exprs)` for ops."""
    def register(fn):
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


class FunctionScope:
    """What a lowering may want to know beyond its binding: the symbolic dims
    (name -> tir.Var) of the Relax function being built, so a lowering that creates a
    symbolic shape reuses the function's own variable; and the program's known
    constants (IR var uid -> numpy value, tvm_bridge/lower.py `known_constants`), so a
    lowering can specialize on a constant operand even where decoding hoisted its
    `const` out of the loop that reads it; the indices made ready so far
    (tvm_bridge/index.py), so takes at one index (a loop body's rows at its counter)
    share one small kernel; the program's integer ranges (IR var uid -> Interval,
    egad/ir/index_ranges.py), its index sites (id(binding) -> position), the checks
    run once before a loop rather than once a trip (id(for binding) -> HoistedChecks)
    and the sites they cover, whether an index check can be a kernel (on the CPU)
    or is a host call, and the ops whose values the host checks (reductions without
    identity that may run over an empty axis, integer powers: id(binding) -> site,
    tvm_bridge/host_checks.py)."""

    symbols: dict = {}
    constants: dict = {}
    indices: dict = {}
    ranges: dict = {}
    sites: dict = {}
    hoisted: dict = {}
    hoisted_sites: frozenset = frozenset()
    checks_in_kernels: bool = True
    host_check_sites: dict = {}


def symbol_var(symbols: dict, name: str):
    """The function's tir variable for symbolic dim `name` (made on first use). A
    concatenation's dim `D+c` or `T+U` (egad/ir/shapes.py joined_dim) whose parts the
    function already has is their sum, exactly its length: the shape R.concat infers,
    so that the concatenation and what is built for its dim (a cotangent broadcast to
    `T+U`, a slice of it) are one shape to Relax."""
    if name not in symbols:
        parts = shapes.joined_parts(name)
        if parts and all(isinstance(part, int) or part in symbols for part in parts):
            symbols[name] = sum(part if isinstance(part, int) else symbols[part] for part in parts)
        else:
            symbols[name] = tir.Var("".join(c if c.isalnum() else "_" for c in name), "int64")
    return symbols[name]


def tensor_type(t, symbols: dict):
    """The Relax type of IR tensor type `t`, its symbolic dims the function's (`symbol_var`)."""
    return relax.TensorType([d if isinstance(d, int) else symbol_var(symbols, d) for d in t.shape], t.dtype)


def axis_size(bb, x, x_type, axis: int):
    """The size of one axis: an int when static, else read off the tensor at run time."""
    size = x_type.shape[axis]
    if isinstance(size, int):
        return size
    sizes = bb.emit(relax.op.shape_to_tensor(relax.op.shape_of(x)))
    # a constant, in-range index: "clip" only keeps TVM from warning about "fast" mode
    return bb.emit(relax.op.take(sizes, relax.const(axis, "int64"), axis=0, mode="clip"))

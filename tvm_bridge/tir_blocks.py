"""Walking a TIR function's blocks, for the passes that look inside kernels
(tvm_bridge/schedule.py, tvm_bridge/fusion.py)."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx


def sblocks(stmt):
    """Every SBlock in a TIR statement, outer ones first."""
    if isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            yield from sblocks(child)
    elif isinstance(stmt, tirx.IfThenElse):
        for branch in (stmt.then_case, stmt.else_case):
            if branch is not None:
                yield from sblocks(branch)
    elif isinstance(stmt, s_tir.SBlockRealize):
        yield from sblocks(stmt.block)
    elif isinstance(stmt, s_tir.SBlock):
        yield stmt
        yield from sblocks(stmt.body)
    elif isinstance(getattr(stmt, "body", None), tirx.Stmt):
        yield from sblocks(stmt.body)


def is_pure_read(func) -> bool:
    """A kernel computing nothing: one block, storing a value it loads unchanged (a
    take, a slice, a transpose, a reshape)."""
    if not isinstance(func, tirx.PrimFunc):
        return False
    storing = [block for block in sblocks(func.body) if isinstance(block.body, tirx.BufferStore)]
    return len(storing) == 1 and moves_data(storing[0])


def moves_data(block) -> bool:
    """A block whose body stores a value loaded from one buffer, unchanged."""
    body = block.body
    return isinstance(body, tirx.BufferStore) and isinstance(body.value, tvm.ir.TensorLoad) and block.init is None

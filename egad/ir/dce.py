"""Dead-code elimination: drop bindings whose outputs nothing reads.

Every op is pure (tapes are threaded as values), so a binding is dead exactly when
none of its outputs is read by a later binding or a region result. Regions are
cleaned from the inside out; their params stay (they are part of the signature).
"""
from __future__ import annotations

from .program import Program, Region


def eliminate_dead_code(program: Program) -> Program:
    eliminate_dead_code_in(program.region)
    return program


def eliminate_dead_code_in(region: Region) -> None:
    """Drop `region`'s dead bindings (and those of its sub-regions), in place."""
    live = {v.uid for v in region.results}
    kept = []
    for binding in reversed(region.bindings):
        if not any(v.uid in live for v in binding.outputs):
            continue
        for sub in binding.regions:
            eliminate_dead_code_in(sub)
        live.update(v.uid for v in binding.inputs)
        kept.append(binding)
    region.bindings[:] = reversed(kept)

"""unroll (not written yet): unroll-by-k alternatives of a loop, for the cost model to pick
for short or small-bodied loops, where the per-iteration dispatch of a compiled loop
costs more than the body (DESIGN §5).

An unrolled loop has a new signature (k copies of the body per step, a remainder
loop), so this will be a Python loop transformer that copies the body with its `Arg`s
renamed into a fresh region and unions the new loop's outputs with the old ones.
Until then the family has no rules and the schedule skips it.
"""
from __future__ import annotations

from .registry import family

UNROLL = family("unroll", __doc__, todo="unroll-by-k alternatives with a remainder loop")

"""Loop invariance facts (egad/egraph/analysis.py): the all-loops-at-once fixpoint
against the definition computed one loop at a time, on saturated gradients with
nested loops, branches and rule-made loops."""
from __future__ import annotations

import numpy as np
import pytest

import egad
from egad.egraph import Snapshot, encode, saturate
from egad.egraph.analysis import LOOP_OPS, _invariant_classes_by_loop, _reads
from egad.egraph.enode import ClassId, ENode
from egad.egraph.placement import CONTROL_HEADS, is_effect, local_inputs
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.programs import all_programs


def invariant_one_loop(reads: dict[ClassId, list], loop: int, regions: dict) -> set[ClassId]:
    """The definition, one loop at a time: classes with a node that reads no Arg of
    `loop` or of a region nested in it (a loop node, for its own loop, reads only its
    operands; tape ops never join), as a least fixpoint by plain iteration."""
    def nested(region):
        while region is not None:
            if region == loop:
                return True
            region = regions[region].parent
        return False

    def node_ok(node: ENode, inputs, independent) -> bool:
        if node.head == "Arg":
            return not nested(node.args[0])
        if is_effect(node):
            return False
        if node.head in CONTROL_HEADS and node.args[0] == loop:
            inputs = local_inputs(node)
        return all(c in independent for c in inputs)

    independent: set[ClassId] = set()
    changed = True
    while changed:
        changed = False
        for cid, members in reads.items():
            if cid not in independent and any(node_ok(node, inputs, independent) for node, inputs in members):
                independent.add(cid)
                changed = True
    return independent


NAMES = ["lstm", "attention_decoder", "nest3_ragged", "loop_in_branch", "while_in_fori", "stacked_rnn"]


@pytest.mark.parametrize("name", NAMES)
def test_invariance_of_every_loop_at_once_matches_one_loop_at_a_time(name):
    program = next(p for p in all_programs() if p.name == name)
    args = to_float64(program.make_args(np.random.default_rng(0)))
    gradient = egad.value_and_grad(egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums),
                                   wrt=program.differentiable_argnums)
    encoding = encode(gradient)
    saturate(encoding)  # rule-made nodes and loops (batch-weight-gradient copies) too
    snapshot = Snapshot.of(encoding.egraph)
    reads = {cid: [(node, _reads(node)) for node in members]
             for cid, members in snapshot.nodes.items() if cid.sort == "Term"}
    loops = [r for r, info in encoding.regions.items() if info.op in LOOP_OPS]
    assert loops
    by_loop = _invariant_classes_by_loop(reads, encoding.regions)
    assert sorted(by_loop) == sorted(loops)
    for loop in loops:
        assert by_loop[loop] == invariant_one_loop(reads, loop, encoding.regions), loop

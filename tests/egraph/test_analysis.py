"""The facts rules read (egad/egraph/analysis.py), against their definitions computed
the plain way, on saturated gradients with nested loops, branches and rule-made loops:
loop invariance (all loops at once vs one loop at a time), the boundary reads, the
parameter-derived classes (worklist vs plain iteration), and class types carried over
from an earlier snapshot vs typed afresh."""
from __future__ import annotations

import numpy as np
import pytest

import egad
from egad.egraph import Snapshot, encode, saturate
from egad.egraph.analysis import LOOP_OPS, _reads, analyse
from egad.egraph.class_types import ClassTypes
from egad.egraph.enode import ClassId, ENode
from egad.egraph.placement import CONTROL_HEADS, is_effect, local_inputs
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.programs import all_programs


def least_fixpoint_by_iteration(reads: dict[ClassId, list], node_ok) -> set[ClassId]:
    """The classes with a node that `node_ok(node, inputs, found)` accepts, the set
    `found` grown by sweeping every class until a sweep adds none."""
    found: set[ClassId] = set()
    changed = True
    while changed:
        changed = False
        for cid, members in reads.items():
            if cid not in found and any(node_ok(node, inputs, found) for node, inputs in members):
                found.add(cid)
                changed = True
    return found


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

    return least_fixpoint_by_iteration(reads, node_ok)


NAMES = ["lstm", "attention_decoder", "nest3_ragged", "loop_in_branch", "while_in_fori", "stacked_rnn"]


def parameter_derived_by_iteration(reads: dict[ClassId, list]) -> set[ClassId]:
    """The definition: classes with a node built from `Arg(0, .)` and constants by pure
    single-output ops, iterated until nothing changes."""
    def node_ok(node: ENode, inputs, derived) -> bool:
        if node.head == "Arg":
            return node.args[0] == 0
        if node.head in ("Scalar", "Splat", "Array"):
            return True
        if not node.head.startswith("Op") or is_effect(node) or node.args[0] == "top_k":
            return False
        return all(c in derived for c in inputs)

    return least_fixpoint_by_iteration(reads, node_ok)


def gradient_encoding(name: str):
    """The e-graph of a corpus program's loss and gradient, before any rule ran."""
    program = next(p for p in all_programs() if p.name == name)
    args = to_float64(program.make_args(np.random.default_rng(0)))
    gradient = egad.value_and_grad(egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums),
                                   wrt=program.differentiable_argnums)
    return encode(gradient)


@pytest.mark.parametrize("name", NAMES)
def test_facts_match_their_definitions(name):
    encoding = gradient_encoding(name)
    saturate(encoding)  # rule-made nodes and loops (batch-weight-gradient copies) too
    snapshot = Snapshot.of(encoding.egraph)
    reads = {cid: [(node, _reads(node)) for node in members]
             for cid, members in snapshot.nodes.items() if cid.sort == "Term"}
    loops = [r for r, info in encoding.regions.items() if info.op in LOOP_OPS]
    assert loops
    facts = analyse(encoding, snapshot)
    assert sorted(facts.invariant) == sorted(loops)
    boundary = set()
    for loop in loops:
        independent = invariant_one_loop(reads, loop, encoding.regions)
        assert facts.invariant[loop] == independent, loop
        boundary.update((child, loop) for cid, members in reads.items() if cid not in independent
                        for _, inputs in members for child in inputs if child in independent)
    assert facts.boundary == boundary
    assert facts.parameter_derived == parameter_derived_by_iteration(reads)


@pytest.mark.parametrize("name", ["lstm", "loop_in_branch"])
def test_types_carried_from_an_earlier_snapshot_are_the_types_found_afresh(name):
    """Saturation types each snapshot's new classes only, keeping the types of the
    classes an earlier snapshot had: after a few rounds of rewrites and unions, those
    are the types a fresh pass over the whole snapshot finds."""
    encoding = gradient_encoding(name)
    first = analyse(encoding, Snapshot.of(encoding.egraph))
    assert saturate(encoding).fired()
    snapshot = Snapshot.of(encoding.egraph)
    carried = analyse(encoding, snapshot, previous=first).types
    fresh = ClassTypes(encoding, snapshot).types
    assert set(fresh) & set(first.types) and set(fresh) - set(first.types)  # classes carried, classes new
    assert set(carried) == set(fresh)
    assert all(carried[cid] == fresh[cid] for cid in fresh)


def test_facts_written_as_rows_reach_the_egraph_and_leave_no_file(tmp_path, monkeypatch):
    """update() writes facts as rows over handles (Editor.load_rows, one egglog `input`)
    lifted by the ANALYSES rules: after a run, every typed class has its ShapeOf and
    DTypeOf and every boundary read its InvariantIn, and the row files are gone."""
    import tempfile

    from egad.egraph.analysis import ANALYSES, ANALYSIS_FUNCTIONS, update
    from egad.egraph.edit import Editor
    from egad.ir.types import TensorType

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    encoding = gradient_encoding("lstm")
    for function in ANALYSIS_FUNCTIONS:
        encoding.egraph._callable_to_egg(function)
    snapshot = Snapshot.of(encoding.egraph)
    facts = analyse(encoding, snapshot)
    editor = Editor(encoding.egraph, snapshot, encoding.provenance, encoding.bound)
    assert update(editor, encoding, facts) > 0 and not list(tmp_path.iterdir())
    encoding.egraph.run(ANALYSES.saturate())
    after = Snapshot.of(encoding.egraph)  # no node was added: the classes keep their ids
    shapes = {row[0]: row[1] for row in after.tables["ShapeOf"]}
    dtypes = {row[0]: row[1] for row in after.tables["DTypeOf"]}
    tensors = {cid: t for cid, t in facts.types.items() if isinstance(t, TensorType)}
    assert tensors and set(shapes) == set(dtypes) == set(tensors)
    assert all(dtypes[cid] == t.dtype and len(after.node_of(shapes[cid]).args[0]) == len(t.shape)
               for cid, t in tensors.items())
    assert {(row[0], row[1]) for row in after.tables["InvariantIn"]} == facts.boundary


def test_a_row_with_a_tab_or_a_newline_is_refused():
    from egad.egraph.edit import Editor

    encoding = gradient_encoding("lstm")
    snapshot = Snapshot.of(encoding.egraph)
    editor = Editor(encoding.egraph, snapshot, encoding.provenance, encoding.bound)
    with pytest.raises(ValueError, match="tab or a newline"):
        editor.load_rows("TypedHandle", [(0, "float64\t(4,)")])

"""What rules may assume about an e-class: its type, and which loops it is invariant in.

A rewrite must keep shapes and dtypes: `x + zeros(s) -> x` holds only where x
already has shape s (otherwise the zeros would broadcast x), and `x + x -> x * 2`
needs a `2` of x's dtype. Rules read that from facts in the e-graph:

    shape_of(x) -> Attr     x's shape as an attribute tuple, exactly as `attrs(shape=...)`
                            writes a shape, so `eq(shape_of(y)).to(s)` compares with an
                            attribute `s` matched in the same rule
    dtype_of(x) -> String   "float64", "int64", ...
    rank_of(x)  -> i64      derived from shape_of by the egglog ruleset `ANALYSES`
    invariant_in(x, r)      x is read inside loop region r but reads none of r's Args

The facts are computed in Python from a snapshot, not by egglog rules, so the op
table's shape rules stay the one definition of every op's types:

- Types come from egad/egraph/class_types.py (the shape rules run over the
  snapshot, as decoding types nodes). `type_conflicts` re-derives the type of every
  constant, op node and `Arg` on its own and compares it with its class's, which is
  how the tests catch a rule that changes a shape or a dtype.
- Invariance. In this encoding a loop body refers directly to the outer values it
  reads (encoding.py), so "x is invariant in loop r" is "some node of x's class
  reads, transitively, no `Arg(r, .)`", a least fixpoint per loop. Args of a region
  nested in r (as the program was written) count as reading r, so an inner loop is
  never taken for invariant. The fact is written only at the boundary, for classes a
  node inside r reads, which is where rules ask (`take(X, i) @ U` with X and U read
  from outside the loop).

`analyse(encoding, snapshot, previous)` computes both for a snapshot (typing only the
classes `previous` had not typed), and `update(editor, encoding, facts)` writes the facts
the e-graph does not have yet, in bulk: rows over insertion handles, loaded from a file
and lifted to the classes by the `ANALYSES` rules at the start of the next run. The
schedule calls both before each round of rewrites.
"""
from __future__ import annotations

from egglog import String, Vec, eq, function, i64, relation, rule, ruleset, set_, var

from ..errors import EgadError
from ..ir import ops
from ..ir.types import TensorType
from .attrs import attr_node, attr_value, attrs_value
from .class_types import ClassTypes
from .constants import literal_value
from .edit import Editor
from .enode import ClassId, ENode, children
from .language import Attr, Term, bound
from .placement import CONTROL_HEADS, is_effect, local_inputs, region_results
from .snapshot import Snapshot


@function(egg_fn="ShapeOf", merge=lambda old, new: old)
def shape_of(value: Term) -> Attr:
    """The shape of a value, an `AttrTuple` of `AttrInt` (static) and `AttrStr` (symbolic) dims."""


@function(egg_fn="DTypeOf", merge=lambda old, new: old)
def dtype_of(value: Term) -> String:
    """The dtype of a value."""


@function(egg_fn="RankOf", merge=lambda old, new: old)
def rank_of(value: Term) -> i64:
    """The number of axes of a value."""


invariant_in = relation("InvariantIn", Term, i64, egg_fn="InvariantIn")

# How `update` writes facts in bulk: rows over a class's insertion handle, loaded from a
# file, and lifted to the class by the rules below. A type is named by a key string
# (dtype and shape) whose shape attribute and dtype are set once per key.
typed_handle = relation("TypedHandle", i64, String, egg_fn="TypedHandle")
invariant_handle = relation("InvariantHandle", i64, i64, egg_fn="InvariantHandle")


@function(egg_fn="TypeShape", merge=lambda old, new: old)
def type_shape(key: String) -> Attr:
    """The shape attribute of the type named `key`."""


@function(egg_fn="TypeDType", merge=lambda old, new: old)
def type_dtype(key: String) -> String:
    """The dtype of the type named `key`."""


ANALYSES = ruleset(name="egad-analyses")
_value, _dims = var("value", Term), var("dims", Vec[Attr])
_handle, _key, _region = var("handle", i64), var("key", String), var("region", i64)
_shape, _dtype = var("shape", Attr), var("dtype", String)
ANALYSES.append(rule(eq(shape_of(_value)).to(Attr.tuple_(_dims)), name="rank-of-shape")
                .then(set_(rank_of(_value)).to(_dims.length())))
ANALYSES.append(rule(eq(_value).to(bound(_handle)), typed_handle(_handle, _key), eq(_shape).to(type_shape(_key)),
                     eq(_dtype).to(type_dtype(_key)), name="type-of-handle")
                .then(set_(shape_of(_value)).to(_shape), set_(dtype_of(_value)).to(_dtype)))
ANALYSES.append(rule(eq(_value).to(bound(_handle)), invariant_handle(_handle, _region), name="invariant-of-handle")
                .then(invariant_in(_value, _region)))

ANALYSIS_FUNCTIONS = (shape_of, dtype_of, rank_of, invariant_in, typed_handle, invariant_handle, type_shape,
                      type_dtype)
LOOP_OPS = ("for", "while")


class Facts:
    """Types and loop invariance of the classes of one snapshot."""

    def __init__(self, types: dict[ClassId, object], invariant: dict[int, set[ClassId]],
                 boundary: set[tuple[ClassId, int]], parameter_derived: set[ClassId]):
        self.types = types  # class -> TensorType (or TapeType)
        self.invariant = invariant  # loop region -> classes computable without its Args
        self.boundary = boundary  # (class, r): read inside loop r, invariant in r
        # classes computed from the program's parameters and constants by pure ops alone: safe to
        # compute anywhere (no loop Arg, no tape op, nothing that only a branch computes)
        self.parameter_derived = parameter_derived

    def invariant_in(self, cid: ClassId, region: int) -> bool:
        return cid in self.invariant.get(region, ())


def analyse(encoding, snapshot: Snapshot, previous: Facts | None = None) -> Facts:
    """The facts of `snapshot`. `previous`: the facts of an earlier snapshot of the same
    e-graph, whose class types still hold (an e-class keeps its id and its type until it
    is merged away), so only the classes new since then are typed."""
    types = ClassTypes(encoding, snapshot, known=previous.types if previous is not None else None).types
    reads = {cid: [(node, _reads(node)) for node in members]
             for cid, members in snapshot.nodes.items() if cid.sort == "Term"}
    loops = [r for r, info in encoding.regions.items() if info.op in LOOP_OPS]
    masks = _invariance_masks(reads, encoding.regions, loops)
    invariant: dict[int, set[ClassId]] = {r: set() for r in loops}
    boundary = set()
    for cid, members in reads.items():
        own = masks.get(cid, 0)
        for r in _bits(own, loops):
            invariant[r].add(cid)
        for _, inputs in members:  # (child, r): a node not invariant in r reads a child that is
            for child in inputs:
                outside = masks.get(child, 0) & ~own
                if outside:
                    boundary.update((child, r) for r in _bits(outside, loops))
    return Facts(types, invariant, boundary, _parameter_derived(reads))


def update(editor: Editor, encoding, facts: Facts) -> int:
    """Write the facts the e-graph lacks (types of new classes, new boundary reads);
    returns how many were written. They go in as rows over the classes' insertion
    handles (`TypedHandle`, `InvariantHandle`), read from a file in one command and
    lifted to the classes by the `ANALYSES` rules: a command a fact cost about 0.1 ms,
    and GNMT-lite's gradient writes about ten thousand facts."""
    snapshot = editor.snapshot
    typed = {row[0] for row in snapshot.tables.get("ShapeOf", ())}
    known_invariant = {(row[0], row[1]) for row in snapshot.tables.get("InvariantIn", ())}
    typed_rows, invariant_rows, type_keys = [], [], {}
    for cid, type_ in facts.types.items():
        if cid in typed or not isinstance(type_, TensorType) or cid not in editor.keys:
            continue
        type_key = repr((type_.dtype, tuple(type_.shape)))
        type_keys.setdefault(type_key, type_)
        typed_rows.append((editor.handle(cid).index, type_key))
    for cid, region in facts.boundary - known_invariant:
        if cid in editor.keys:
            invariant_rows.append((editor.handle(cid).index, region))
    for type_key, type_ in type_keys.items():  # a key always names the same type: setting it again changes nothing
        editor.set_value("TypeShape", type_key, attr_node(tuple(type_.shape), encoding.constants))
        editor.set_value("TypeDType", type_key, type_.dtype)
    editor.load_rows("TypedHandle", sorted(typed_rows))
    editor.load_rows("InvariantHandle", sorted(invariant_rows))
    editor.flush()
    return len(typed_rows) + len(invariant_rows)


# --- types -------------------------------------------------------------------------------

def node_type(encoding, snapshot: Snapshot, node: ENode, types: dict) -> TensorType | None:
    """The type a constant or a pure op node computes, if its inputs' types are known
    (None otherwise, and for control, tape and multi-output nodes)."""
    head, args = node.head, node.args
    if head == "Scalar":
        return TensorType((), args[0])
    if head == "Splat":
        return TensorType(attr_value(snapshot.node_of, args[2], encoding.constants), args[0])
    if head == "Array":
        value = literal_value(head, args, encoding.constants)
        return TensorType(value.shape, value.dtype.name)
    if not head.startswith("Op"):
        return None
    name = args[0]
    op = ops.OPS[name]
    if op.family in ("control", "tape") or name == "top_k":
        return None
    inputs = [child for child in children(node) if child.sort == "Term"]
    if any(child not in types for child in inputs):
        return None
    try:
        (type_,) = op.shape_rule([types[c] for c in inputs], attrs_value(snapshot.node_of, args[1],
                                                                         encoding.constants))
    except (EgadError, ValueError):
        return None
    return type_


def type_conflicts(encoding, snapshot: Snapshot) -> list[str]:
    """Every node whose own type differs from its class's type (a rule that changed a
    shape or a dtype); empty when the e-graph is consistent."""
    class_types = ClassTypes(encoding, snapshot)
    types = class_types.types
    conflicts = []
    for cid, members in snapshot.nodes.items():
        if not isinstance(types.get(cid), TensorType):
            continue
        for node in members:
            if node.head == "Arg":
                type_ = class_types.arg_types.get(tuple(node.args))
            else:
                type_ = node_type(encoding, snapshot, node, types)
            if type_ is not None and not type_.same_as(types[cid]):
                conflicts.append(f"{_described(encoding, snapshot, node, types)} computes {type_} "
                                 f"in a class of type {types[cid]}")
    return conflicts


def _described(encoding, snapshot: Snapshot, node: ENode, types: dict) -> str:
    """A node as a reader of rules knows it: `reduce_sum(f64[3], axes=(0,), keepdims=True)`,
    its operands by their types (egglog's class ids mean nothing to them)."""
    if not node.head.startswith("Op"):
        return node.head
    operands = [str(types.get(child, "?")) for child in children(node) if child.sort == "Term"]
    attributes = attrs_value(snapshot.node_of, node.args[1], encoding.constants)
    return f"{node.args[0]}({', '.join(operands + [f'{k}={v!r}' for k, v in attributes.items()])})"


# --- loop invariance ------------------------------------------------------------------------

def _reads(node: ENode) -> list[ClassId]:
    """Every class a node reads, where it is placed and inside its regions."""
    reads = local_inputs(node)
    for _, results in region_results(node):
        reads.extend(results)
    return [c for c in reads if c.sort == "Term"]


def _bits(mask: int, loops: list[int]):
    """The loops whose bits are set in `mask` (bit j: the j-th loop)."""
    while mask:
        low = mask & -mask
        yield loops[low.bit_length() - 1]
        mask ^= low


def _invariance_masks(reads: dict[ClassId, list], regions: dict, loops: list[int]) -> dict[ClassId, int]:
    """For each class, the loops it is invariant in, as a bitmask (bit j for `loops[j]`):
    the classes with a node that reads no Arg of the loop or of a region nested in it (a
    least fixpoint: a class joins once one of its nodes has all its reads in; a loop
    node, for its own loop, reads only its operands, since its results bind the loop's
    Args; tape ops never join). `reads`: class -> [(node, the classes it reads)].

    All loops at once: each class's mask is its nodes' masks ORed, each node's the AND
    of its reads'. One pass instead of one per loop: GNMT-lite's gradient has about 25
    loops, and the per-loop passes were a third of a saturation round."""
    bit = {r: 1 << j for j, r in enumerate(loops)}
    everything = (1 << len(loops)) - 1
    blocked = {}  # region -> the loops an Arg of it depends on: itself and the loops around it
    for region in regions:
        mask, walk = 0, region
        while walk is not None:
            mask |= bit.get(walk, 0)
            walk = regions[walk].parent
        blocked[region] = mask
    masks: dict[ClassId, int] = {}

    def node_mask(node: ENode, inputs: list[ClassId]) -> int:
        if node.head == "Arg":
            return everything & ~blocked.get(node.args[0], 0)
        if is_effect(node):
            return 0  # tape ops stay where the program put them
        mask = everything
        for child in inputs:
            mask &= masks.get(child, 0)
        if node.head in CONTROL_HEADS and node.args[0] in bit:
            own = everything  # for its own loop, a loop node reads only its operands: its results bind the Args
            for child in local_inputs(node):
                own &= masks.get(child, 0)
            mask = (mask & ~bit[node.args[0]]) | (own & bit[node.args[0]])
        return mask

    parents: dict[ClassId, list[tuple[ClassId, ENode, list]]] = {}
    work = []

    def raise_mask(cid: ClassId, node: ENode, inputs: list[ClassId]) -> None:
        raised = masks.get(cid, 0) | node_mask(node, inputs)
        if raised != masks.get(cid, 0):
            masks[cid] = raised
            work.append(cid)

    for cid, members in reads.items():
        for node, inputs in members:
            for child in inputs:
                parents.setdefault(child, []).append((cid, node, inputs))
    for cid, members in reads.items():
        for node, inputs in members:
            raise_mask(cid, node, inputs)
    while work:
        for cid, node, inputs in parents.get(work.pop(), ()):
            raise_mask(cid, node, inputs)
    return masks


def _parameter_derived(reads: dict[ClassId, list]) -> set[ClassId]:
    """Classes with a node built from program parameters (`Arg(0, .)`) and constants by pure
    single-output ops only (a least fixpoint over a worklist of readers, like
    `_invariance_masks`)."""
    derived: set[ClassId] = set()

    def node_ok(node: ENode, inputs: list[ClassId]) -> bool:
        if node.head == "Arg":
            return node.args[0] == 0
        if node.head in ("Scalar", "Splat", "Array"):
            return True
        if not node.head.startswith("Op") or is_effect(node) or node.args[0] in ("top_k",):
            return False
        return all(c in derived for c in inputs)

    readers: dict[ClassId, list[tuple[ClassId, ENode, list]]] = {}
    for cid, members in reads.items():
        for node, inputs in members:
            for child in inputs:
                readers.setdefault(child, []).append((cid, node, inputs))
    work = [cid for cid, members in reads.items() if any(node_ok(node, inputs) for node, inputs in members)]
    derived.update(work)
    while work:
        for cid, node, inputs in readers.get(work.pop(), ()):
            if cid not in derived and node_ok(node, inputs):
                derived.add(cid)
                work.append(cid)
    return derived


__all__ = ["shape_of", "dtype_of", "rank_of", "invariant_in", "ANALYSES", "ANALYSIS_FUNCTIONS", "Facts", "analyse",
           "update", "node_type", "type_conflicts"]

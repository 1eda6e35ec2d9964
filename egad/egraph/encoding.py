"""IR program -> e-graph (DESIGN §5): one e-node per binding, regions without lambda-lifting.

Regions. Each control binding gets a region id `r` (the program itself is region 0).
Inside a loop, `Arg(r, 0)` is the counter of a `for` and `Arg(r, 1 + k)` its k-th
state value; a `while` has `Arg(r, k)` for its state, shared by its condition and
body. Program parameters are `Arg(0, i)`.

Undoing the lambda-lifting. The IR passes every outer value a region reads in as an
explicit parameter (a loop invariant, a branch operand). Here a region parameter that
only carries an outer value in is replaced by that outer value's e-class, so a body
refers directly to what it reads: a branch has no `Arg` at all, a loop has `Arg` only
for what changes per iteration. A node that depends on no `Arg(r, ·)` of a loop is
then loop-invariant by construction and equal to the same computation outside the
loop, and where to place it is decided when decoding (placement.py).

Effects. Tapes are threaded as values (`tape_push` returns the new tape), so their
order is data dependence, kept as is. Allocations are the exception: two empty tapes
of one type would be one e-node, so `NewTape` carries the handle of its binding.
"""
from __future__ import annotations

import dataclasses

from egglog import EGraph

from ..ir import ops
from ..ir.program import ArgSignature, Binding, Program, Region
from ..ir.types import TensorType
from ..pytree import TreeDef
from ..source import SourceLoc
from .attrs import attr_node, attrs_node
from .constants import ConstantTable, literal_node
from .enode import ENode, Handle
from .insertion import insert, new_egraph
from .language import MULTI_OUTPUT_OPS
from .provenance import Provenance, RuleSite

INPUT = RuleSite.here("input")
_OP_HEADS = {0: "Op0", 1: "Op1", 2: "Op2", 3: "Op3"}


@dataclasses.dataclass(frozen=True)
class RegionInfo:
    """What decoding needs to rebuild a region: its control op and IR region names."""

    op: str  # "program" | "for" | "while" | "if" | "switch"
    names: tuple[str, ...]
    parent: int | None = None  # the region its control op is written in (None: the program itself)
    # (rule name, region, the rule's own record): a loop transformer's copy of that region
    # (rules/checkpoint.py finds the forward loop's copy it made, and what it stores, by this)
    copied_from: tuple[str, int, tuple] | None = None


@dataclasses.dataclass(frozen=True)
class Interface:
    """The encoded program's signature, which decoding gives back unchanged."""

    param_types: tuple[TensorType, ...]
    param_hints: tuple[str, ...]
    signature: ArgSignature
    out_tree: TreeDef
    name: str
    loc: SourceLoc


@dataclasses.dataclass
class Encoding:
    """An e-graph holding one program, and the side tables to read it back."""

    egraph: EGraph
    roots: tuple[Handle, ...]  # the program's results
    bound: list  # the node inserted for each handle, in order (one per binding, then results)
    regions: dict[int, RegionInfo]
    constants: ConstantTable
    provenance: Provenance
    interface: Interface


def encode(program: Program) -> Encoding:
    """Insert `program` into a fresh e-graph.

        encoding = encode(egad.trace(f, x))
        encoding.egraph.run(rules)                     # later: rule families (rules/)
        snapshot = Snapshot.of(encoding.egraph)
        decode(encoding, snapshot, extract_inserted(snapshot, encoding.provenance.resolve(snapshot),
                                                    encoding.roots))
    """
    encoder = _Encoder()
    env = {}
    for index, param in enumerate(program.params):
        env[param.uid] = encoder.arg(0, index, param.hint)
    encoder.regions[0] = RegionInfo("program", (program.region.name,))
    roots = tuple(encoder.root(field) for field in encoder.region(program.region, env))
    egraph = new_egraph()
    insert(egraph, list(enumerate(encoder.bound)))
    interface = Interface(tuple(program.param_types), tuple(p.hint for p in program.params), program.signature,
                          program.out_tree, program.name, program.loc)
    return Encoding(egraph, roots, encoder.bound, encoder.regions, encoder.constants, encoder.provenance, interface)


class _Encoder:
    def __init__(self):
        self.bound: list[ENode] = []
        self.regions: dict[int, RegionInfo] = {}
        self.constants = ConstantTable()
        self.provenance = Provenance()
        self.current_region = 0  # whose bindings are being encoded

    def arg(self, region: int, index: int, hint: str) -> ENode:
        node = ENode("Arg", (region, index))
        self.provenance.record(node, INPUT, hints=(hint,))
        return node

    def root(self, field) -> Handle:
        """A program result as a handle: a result that no binding reads (an Arg, a Get)
        is bound to a handle of its own, so it is in the e-graph."""
        if isinstance(field, Handle):
            return field
        self.bound.append(field)
        return Handle(len(self.bound) - 1)

    def region(self, region: Region, env: dict) -> tuple:
        """Encode `region`'s bindings; `env` maps its params' uids to fields. Returns its results."""
        for binding in region.bindings:
            self.binding(binding, env)
        return tuple(env[var.uid] for var in region.results)

    def binding(self, binding: Binding, env: dict) -> None:
        inputs = [env[var.uid] for var in binding.inputs]
        if binding.op in ops.CONTROL_OPS:
            node = self.control(binding, inputs)  # inserts the regions' bindings first
        elif binding.op == "const":
            node = literal_node(binding.attrs["value"], self.constants, lambda shape: attr_node(shape, self.constants))
        elif binding.op == "tape_alloc":
            node = ENode("NewTape", (len(self.bound), attrs_node(binding.attrs, self.constants)))
        elif len(inputs) in _OP_HEADS:
            node = ENode(_OP_HEADS[len(inputs)], (binding.op, attrs_node(binding.attrs, self.constants), *inputs))
        else:
            node = ENode("OpN", (binding.op, attrs_node(binding.attrs, self.constants), tuple(inputs)))
        handle = Handle(len(self.bound))
        self.bound.append(node)
        hints = tuple(var.hint for var in binding.outputs)
        self._record(node, binding, hints)
        if binding.op in MULTI_OUTPUT_OPS:
            for k, var in enumerate(binding.outputs):
                env[var.uid] = ENode("Get", (handle, k))
                self._record(env[var.uid], binding, (var.hint,))
        else:
            (var,) = binding.outputs
            env[var.uid] = handle

    def _record(self, node: ENode, binding: Binding, hints: tuple[str, ...]) -> None:
        self.provenance.record(node, INPUT, binding.loc, hints)

    def control(self, binding: Binding, inputs: list) -> ENode:
        region_id = len(self.regions)
        self.regions[region_id] = RegionInfo(binding.op, tuple(r.name for r in binding.regions), self.current_region)
        outer, self.current_region = self.current_region, region_id
        try:
            return self._control(binding, inputs, region_id)
        finally:
            self.current_region = outer

    def _control(self, binding: Binding, inputs: list, region_id: int) -> ENode:
        attrs = {k: v for k, v in binding.attrs.items() if k != "n_state"}  # n_state = len(inits)
        if binding.op == "for":
            (body,) = binding.regions
            n_state = binding.attrs["n_state"]
            lo, hi, inits, invariants = inputs[0], inputs[1], inputs[2:2 + n_state], inputs[2 + n_state:]
            carried = [self.arg(region_id, k, p.hint) for k, p in enumerate(body.params[:1 + n_state])]
            results = self.region(body, self._params(body, carried + invariants))
            return ENode("For", (region_id, lo, hi, tuple(inits), results, attrs_node(attrs, self.constants)))
        if binding.op == "while":
            cond, body = binding.regions
            n_state = binding.attrs["n_state"]
            inits, invariants = inputs[:n_state], inputs[n_state:]
            carried = [self.arg(region_id, k, p.hint) for k, p in enumerate(body.params[:n_state])]
            (test,) = self.region(cond, self._params(cond, carried + invariants))
            results = self.region(body, self._params(body, carried + invariants))
            return ENode("While", (region_id, tuple(inits), test, results, attrs_node(attrs, self.constants)))
        selector, operands = inputs[0], inputs[1:]
        branches = tuple(self.region(branch, self._params(branch, operands)) for branch in binding.regions)
        if binding.op == "if":
            return ENode("If", (region_id, selector, *branches))
        return ENode("Switch", (region_id, selector, branches))

    @staticmethod
    def _params(region: Region, fields: list) -> dict:
        """A region's environment: its params stand for `fields` (Args, or outer values directly)."""
        return {param.uid: field for param, field in zip(region.params, fields, strict=True)}

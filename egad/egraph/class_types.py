"""The type of every `Term` e-class of a snapshot, by the op table's shape rules.

The cost model needs shapes, and nodes made by rules carry no types; so types are
recomputed here the way decoding computes them: program parameters from the encoded
interface, constants from their values, ops by `OpDef.shape_rule` on their inputs'
types and attributes, a loop's `Arg`s from its initial state, a control node's
outputs as the verifier types them. Every node of a class stands for the same value,
so the first node whose inputs are typed types the class (a worklist over users, so
long chains cost one visit per node). A node whose shape rule refuses its inputs (a
rule that built something ill-typed) leaves its class untyped by it; `node_types`
tells which nodes typed themselves, and an extractor must not pick the others.

A class of a node with several outputs (a loop, `top_k`, `tape_pop`) has a tuple of
types, one per `Get`. Symbolic dims stay symbolic ("T"); the cost model substitutes
guesses for them.
"""
from __future__ import annotations

from collections import defaultdict

from ..errors import EgadError
from ..ir import ops
from ..ir.types import TensorType
from .attrs import attr_value, attrs_value
from .constants import literal_value
from .enode import ClassId, ENode
from .language import MULTI_OUTPUT_OPS, TERM_HEADS
from .placement import local_inputs
from .snapshot import Snapshot

COUNTER = TensorType((), "int64", weak=True)  # a for loop's counter, as the tracer types it


def node_inputs(node: ENode) -> list[ClassId]:
    """Every Term class a node reads, its regions' results included."""
    reads = local_inputs(node)
    if node.head == "For":
        reads += list(node.args[4])
    elif node.head == "While":
        reads += [node.args[2], *node.args[3]]
    elif node.head == "If":
        reads += [*node.args[2], *node.args[3]]
    elif node.head == "Switch":
        reads += [c for results in node.args[2] for c in results]
    elif node.head == "Get":
        reads = [node.args[0]]
    return reads


class ClassTypes:
    """`types[cid]`: the class's type; `attrs(cid)`: an Attrs class decoded (cached).

    `known`: types of classes from an earlier snapshot of the same e-graph (a class keeps
    its id and its type until a union merges it away, and a merge keeps the type). They
    are taken as they are and only the other classes are typed, so `typed_nodes` then
    holds the nodes of those classes only: an extractor must type afresh."""

    def __init__(self, encoding, snapshot: Snapshot, known: dict[ClassId, object] | None = None):
        self.encoding = encoding
        self.snapshot = snapshot
        self.types: dict[ClassId, object] = {}
        if known:
            self.types = {cid: type_ for cid, type_ in known.items() if cid in snapshot.nodes}
        self.typed_nodes: set[ENode] = set()  # nodes whose shape rule accepted their inputs
        self._attrs: dict[ClassId, dict] = {}
        self.arg_types: dict[tuple[int, int], object] = {
            (0, i): t for i, t in enumerate(encoding.interface.param_types)}
        self.control: dict[int, ENode] = {}  # region id -> its (first) control node
        for members in snapshot.nodes.values():
            for node in members:
                if node.head in ("For", "While", "If", "Switch"):
                    self.control.setdefault(node.args[0], node)
        self._solve()

    def attrs(self, cid: ClassId) -> dict:
        if cid not in self._attrs:
            self._attrs[cid] = attrs_value(self.snapshot.node_of, cid, self.encoding.constants)
        return self._attrs[cid]

    def of(self, cid: ClassId):
        try:
            return self.types[cid]
        except KeyError:
            raise EgadError(f"e-class {cid} has no node whose inputs could be typed") from None

    def _solve(self) -> None:
        readers: dict[ClassId, list[tuple[ClassId, ENode]]] = defaultdict(list)
        pending: list[tuple[ClassId, ENode]] = []
        for cid, members in self.snapshot.nodes.items():
            if cid in self.types:  # known: its nodes need not be typed, and nothing waits on it
                continue
            for node in members:
                if node.head not in TERM_HEADS:
                    continue
                for read in self._typing_inputs(node):
                    readers[read].append((cid, node))
                pending.append((cid, node))
        while pending:
            cid, node = pending.pop()
            if node in self.typed_nodes:
                continue
            result = self._type_of(node)
            if result is None:
                continue
            self.typed_nodes.add(node)
            if cid not in self.types:
                self.types[cid] = result
                pending.extend(readers[cid])

    def _typing_inputs(self, node: ENode) -> list[ClassId]:
        if node.head == "Arg":  # typed by its loop's initial state
            loop = self.control.get(node.args[0])
            return local_inputs(loop) if loop is not None and node.args[0] != 0 else []
        if node.head == "While":
            return local_inputs(node)  # its outputs are its state
        return node_inputs(node)

    def _arg_type(self, region: int, index: int):
        """A loop's Args are typed as its initial state (and counter), as decoding types them."""
        if (region, index) not in self.arg_types:
            loop = self.control[region]
            inits = loop.args[3] if loop.head == "For" else loop.args[1]
            state = [self.types[c] for c in inits]
            for k, t in enumerate([COUNTER] + state if loop.head == "For" else state):
                self.arg_types[(region, k)] = t
        return self.arg_types.get((region, index))

    def _type_of(self, node: ENode):
        """The node's type if its inputs are typed and its shape rule accepts them, else None."""
        head, args = node.head, node.args
        if any(c not in self.types for c in self._typing_inputs(node)):
            return None
        if head == "Arg":
            return self._arg_type(args[0], args[1]) if args[0] in self.control or args[0] == 0 else None
        try:
            if head in ("Scalar", "Splat", "Array"):
                shape = attr_value(self.snapshot.node_of, args[2], self.encoding.constants) \
                    if head == "Splat" else None
                value = literal_value(head, args, self.encoding.constants, shape)
                return ops.OPS["const"].shape_rule([], {"value": value})[0]
            if head == "NewTape":
                return ops.OPS["tape_alloc"].shape_rule([], self.attrs(args[1]))[0]
            if head == "Get":
                outputs = self.types[args[0]]
                return outputs[args[1]] if isinstance(outputs, tuple) and args[1] < len(outputs) else None
            if head == "For":
                return self._for_outputs(node)
            if head == "While":
                return tuple(self.types[c].with_weak(False) for c in args[1])
            if head in ("If", "Switch"):
                branches = [args[2], args[3]] if head == "If" else list(args[2])
                return tuple(self.types[c].with_weak(False) for c in branches[0])
            name = args[0]
            outputs = ops.OPS[name].shape_rule([self.types[c] for c in local_inputs(node)], self.attrs(args[1]))
        except (EgadError, KeyError, IndexError, TypeError, ValueError):
            return None  # an ill-typed node: it cannot be extracted
        return tuple(outputs) if name in MULTI_OUTPUT_OPS else outputs[0]

    def _for_outputs(self, node: ENode):
        region, _, _, inits, results, attrs_class = node.args
        n_state = len(inits)
        trip_dim = self.attrs(attrs_class).get("trip_dim")
        if trip_dim is None:
            trip_dim = f"trips{region}"
        state = [self.types[c].with_weak(False) for c in inits]
        ys = [TensorType((trip_dim,) + self.types[c].shape, self.types[c].dtype) for c in results[n_state:]]
        return tuple(state + ys)

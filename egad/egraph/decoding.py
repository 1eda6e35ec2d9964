"""Extraction -> IR program: place nodes, rebuild regions, lambda-lift again, verify.

Each chosen node is emitted in the IR region of the scope placement.py gave it, on
demand and in dependency order (so only what the results need is emitted). When a
region reads a value placed further out, the value is *captured*: the region gets a
parameter for it and its control op passes the outer value in (a loop invariant or a
branch operand), which is the explicit form the IR requires. Captures chain through
nested regions. Output types come from the op table's shape rules, so nodes that
rules create need no type annotations. The result is checked by egad.ir.verify.
"""
from __future__ import annotations

from ..errors import EgadError
from ..ir import ops
from ..ir.program import Binding, Program, Region, Var
from ..ir.types import TensorType
from ..ir.verify import control_result_types, verify
from ..source import UNKNOWN
from .attrs import attr_value, attrs_value
from .constants import literal_value
from .encoding import Encoding
from .enode import ClassId, ENode
from .extraction import Extraction
from .language import MULTI_OUTPUT_OPS
from .placement import WHILE_TEST, Placement, Scope, is_effect, local_inputs, place
from .provenance import Origin
from .snapshot import Snapshot

_COUNTER = TensorType((), "int64", weak=True)  # a for loop's counter, as the tracer types it


def decode(encoding: Encoding, snapshot: Snapshot, extraction: Extraction,
           origins: dict[ENode, Origin] | None = None) -> Program:
    """The program an extraction of `encoding`'s e-graph stands for, verified.
    `origins` (encoding.provenance.resolve(snapshot)) give nodes their source lines and names."""
    if origins is None:
        origins = encoding.provenance.resolve(snapshot)
    decoder = _Decoder(encoding, snapshot, extraction, place(extraction), origins)
    interface = encoding.interface
    params = tuple(Var(t, hint) for t, hint in zip(interface.param_types, interface.param_hints))
    top = _RegionBuilder(decoder, (), 0, None, dict(enumerate(params)))
    results = tuple(top.value(root) for root in extraction.roots)
    names = encoding.regions[0].names
    region = Region(params, top.bindings, results, names[0] if names else "program")
    program = Program(region, interface.signature, interface.out_tree, interface.name, interface.loc)
    return verify(program)


class _Decoder:
    def __init__(self, encoding: Encoding, snapshot: Snapshot, extraction: Extraction, placement: Placement,
                 origins: dict[ENode, Origin]):
        self.encoding = encoding
        self.snapshot = snapshot
        self.choice = extraction.choice
        self.placement = placement
        self.origins = origins
        self.emitted_effects: set[ClassId] = set()

    def origin(self, node: ENode) -> Origin | None:
        return self.origins.get(node)

    def hint(self, node: ENode, k: int = 0) -> str:
        origin = self.origin(node)
        return origin.hints[k] if origin is not None and k < len(origin.hints) else ""

    def attrs(self, cid: ClassId) -> dict:
        return attrs_value(self.snapshot.node_of, cid, self.encoding.constants)

    def region_names(self, region: int, count: int, default: str) -> tuple[str, ...]:
        info = self.encoding.regions.get(region)
        return info.names if info is not None else tuple(f"{default}{k}" for k in range(count))


class _RegionBuilder:
    """The bindings of one IR region, emitted on demand."""

    def __init__(self, decoder: _Decoder, scope: Scope, region: int, parent: "_RegionBuilder | None",
                 args: dict[int, Var]):
        self.decoder = decoder
        self.scope = scope
        self.region = region  # whose Args this region binds
        self.parent = parent
        self.args = args
        self.bindings: list[Binding] = []
        self.values: dict[ClassId, Var | tuple[Var, ...]] = {}  # a multi-output node: its outputs
        self.captures: dict[ClassId, tuple[Var, Var]] = {}  # class -> (outer value, this region's param)

    def value(self, cid: ClassId):
        stack = [cid]
        while stack:
            current = stack[-1]
            if current in self.values:
                stack.pop()
                continue
            node = self.decoder.choice[current]
            if node.head == "Arg" and node.args[0] == self.region:
                self.values[current] = self.args[node.args[1]]
            elif node.head == "Arg" or self.decoder.placement.home(current, self.scope) != self.scope:
                self.values[current] = self._capture(current)
            else:
                reads = [node.args[0]] if node.head == "Get" else local_inputs(node)
                missing = [c for c in reads if c not in self.values]
                if missing:
                    stack.extend(reversed(missing))
                    continue
                self.values[current] = self._emit(current, node)
            stack.pop()
        return self.values[cid]

    def _capture(self, cid: ClassId) -> Var:
        if self.parent is None:
            raise EgadError(f"{self.decoder.choice[cid]} (class {cid}) is placed outside the program")
        outer = self.parent.value(cid)
        inner = Var(outer.type, outer.hint)
        self.captures[cid] = (outer, inner)
        return inner

    def _emit(self, cid: ClassId, node: ENode):
        decoder = self.decoder
        if node.head == "Get":
            return self.values[node.args[0]][node.args[1]]
        if is_effect(node):
            if cid in decoder.emitted_effects:
                raise EgadError(f"decoding would run the tape op {node} twice")
            decoder.emitted_effects.add(cid)
        if node.head in ("For", "While", "If", "Switch"):
            return getattr(self, f"_emit_{node.head.lower()}")(node)
        if node.head in ("Scalar", "Splat", "Array"):
            shape = attr_value(decoder.snapshot.node_of, node.args[2], decoder.encoding.constants) \
                if node.head == "Splat" else None
            value = literal_value(node.head, node.args, decoder.encoding.constants, shape)
            return self._bind(node, "const", [], {"value": value})[0]
        if node.head == "NewTape":
            return self._bind(node, "tape_alloc", [], decoder.attrs(node.args[1]))[0]
        name, attrs_class = node.args[0], node.args[1]
        inputs = [self.values[c] for c in local_inputs(node)]
        outputs = self._bind(node, name, inputs, decoder.attrs(attrs_class))
        return tuple(outputs) if name in MULTI_OUTPUT_OPS else outputs[0]

    def _bind(self, node: ENode, op: str, inputs: list[Var], attrs: dict) -> list[Var]:
        types = ops.OPS[op].shape_rule([v.type for v in inputs], attrs)
        outputs = [Var(t, self.decoder.hint(node, k)) for k, t in enumerate(types)]
        self.bindings.append(Binding(tuple(outputs), op, tuple(inputs), attrs, (), self._loc(node)))
        return outputs

    def _loc(self, node: ENode):
        origin = self.decoder.origin(node)
        return origin.loc if origin is not None else UNKNOWN

    def _child(self, region: int, branch: int, args: dict[int, Var]) -> "_RegionBuilder":
        return _RegionBuilder(self.decoder, self.scope + ((region, branch),), region, self, args)

    def _arg_var(self, region: int, index: int, type_) -> Var:
        arg = ENode("Arg", (region, index))
        origin = self.decoder.origins.get(arg)
        # a rule's new Arg has no user name when no node it copies had one (a counter the old body never read)
        return Var(type_, origin.hints[0] if origin is not None and origin.hints else "")

    def _control(self, node: ENode, op: str, inputs: list[Var], attrs: dict, regions: list[Region],
                 invariants: list[Var]) -> tuple[Var, ...]:
        binding = Binding((), op, tuple(inputs) + tuple(invariants), attrs, tuple(regions), self._loc(node))
        types = control_result_types(binding)
        binding.outputs = tuple(Var(t, self.decoder.hint(node, k)) for k, t in enumerate(types))
        self.bindings.append(binding)
        return binding.outputs

    def _emit_for(self, node: ENode):
        region, lo, hi, inits, results, attrs_class = node.args
        init_vars = [self.values[c] for c in inits]
        counter = self._arg_var(region, 0, _COUNTER)
        state = [self._arg_var(region, 1 + k, v.type) for k, v in enumerate(init_vars)]
        body = self._child(region, 0, dict(enumerate([counter, *state])))
        result_vars = tuple(body.value(c) for c in results)
        outers, (inners,) = _lift([body])
        (name,) = self.decoder.region_names(region, 1, "body")
        regions = [Region((counter, *state, *inners), body.bindings, result_vars, name)]
        attrs = {"n_state": len(inits), **self.decoder.attrs(attrs_class)}
        return self._control(node, "for", [self.values[lo], self.values[hi], *init_vars], attrs, regions, outers)

    def _emit_while(self, node: ENode):
        region, inits, test, results, attrs_class = node.args
        init_vars = [self.values[c] for c in inits]
        builders, outputs = [], []
        for wanted, branch in (([test], WHILE_TEST), (results, 0)):  # placement.py: the test and body apart
            state = [self._arg_var(region, k, v.type) for k, v in enumerate(init_vars)]
            builder = self._child(region, branch, dict(enumerate(state)))
            outputs.append((state, tuple(builder.value(c) for c in wanted)))
            builders.append(builder)
        outers, inners = _lift(builders)
        names = self.decoder.region_names(region, 2, "region")
        regions = [Region((*state, *lifted), builder.bindings, result_vars, name)
                   for (state, result_vars), lifted, builder, name in zip(outputs, inners, builders, names)]
        attrs = {"n_state": len(inits), **self.decoder.attrs(attrs_class)}
        return self._control(node, "while", init_vars, attrs, regions, outers)

    def _emit_if(self, node: ENode):
        region, pred, then, otherwise = node.args
        return self._branches(node, "if", region, pred, [then, otherwise])

    def _emit_switch(self, node: ENode):
        region, index, branches = node.args
        return self._branches(node, "switch", region, index, list(branches))

    def _branches(self, node: ENode, op: str, region: int, selector: ClassId, branches: list) -> tuple[Var, ...]:
        builders, outputs = [], []
        for k, results in enumerate(branches):
            builder = self._child(region, k, {})
            outputs.append(tuple(builder.value(c) for c in results))
            builders.append(builder)
        outers, inners = _lift(builders)
        names = self.decoder.region_names(region, len(branches), "branch")
        regions = [Region(tuple(lifted), builder.bindings, result_vars, name)
                   for result_vars, lifted, builder, name in zip(outputs, inners, builders, names)]
        return self._control(node, op, [self.values[selector]], {}, regions, outers)


def _lift(builders: list[_RegionBuilder]) -> tuple[list[Var], list[list[Var]]]:
    """Lambda-lift the captures of sibling regions (a while's cond and body, a branch
    op's branches), which must share one parameter list: the outer values to pass in,
    and for each region its params for them (fresh, unused ones where it reads none)."""
    captured: dict[ClassId, Var] = {}
    for builder in builders:
        for cid, (outer, _) in builder.captures.items():
            captured.setdefault(cid, outer)
    inners = []
    for builder in builders:
        inners.append([builder.captures[cid][1] if cid in builder.captures else Var(outer.type, outer.hint)
                       for cid, outer in captured.items()])
    return list(captured.values()), inners

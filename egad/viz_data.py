"""The visualiser's data: an optimizer result as plain JSON-able tables (egad/viz.py draws them).

    data = page_data(optimization)        # an egad.optimizer.Optimization with .graph
    data["nodes"][0]                      # {"id": "n0", "class": "c3", "op": "matmul", "cost_us": 1.9,
                                          #  "rule": "input", "site": "...", "extracted": True, ...}
    data["frames"]                        # regions: the program "r0", loops "r3", branches "r5b1"
    data["critical"]                      # per loop: its gradient-critical chain of e-nodes

Frames. An e-class has no region of its own in the e-graph (a loop body refers
directly to outer values), so a class is drawn in the frame of the scope placement
(egraph/placement.py) gives its extracted node, which is where the decoded program
computes it; a class outside the extracted term goes in the innermost loop whose
carried values it can read (or the program's frame).

Costs are the extractor's own (egad/extract.py prices each op by the cost model of
the optimization): one execution's roofline seconds plus dispatch, and how many
times it runs per call (the trip guesses of its loops).

Critical path. For each extracted loop, the longest latency chain from one of its
carried values to its next state, computed the way egad/critical_path.py computes
it on the decoded program (an op costs the longer of its roofline time and the
target's latency; a nested loop or branch, the work of its body), but on the
extracted e-nodes, so that the chain can be highlighted on them.
"""
from __future__ import annotations

import os

import numpy as np

from .egraph.enode import ClassId, ENode, post_order
from .egraph.language import TERM_HEADS
from .egraph.placement import CONTROL_HEADS, LOOP_HEADS, local_inputs, place, region_results
from .ir.types import TapeType

_FREE_OF_COST = ("Arg", "Get", "Scalar", "Splat", "Array")  # no kernel: values, projections, constants


def page_data(optimization) -> dict:
    """Everything the page shows, for an `Optimization` whose `.graph` is set."""
    return _PageData(optimization).build()


class _PageData:
    def __init__(self, optimization):
        from .extract import _Extractor  # the extractor's pricing, so the costs shown are the ones it compared

        self.optimization = optimization
        record = optimization.graph
        self.record = record
        self.snapshot = record.snapshot
        self.choice = record.extraction.choice
        self.original = record.original.choice
        self.origins = record.origins
        self.regions = record.encoding.regions
        self.pricing = _Extractor(record.encoding, record.snapshot, record.cost_model)
        self.target = record.cost_model.target
        self.number = {cid: k for k, cid in enumerate(self.snapshot.nodes)}
        self.control = self._control_nodes()
        self.frames: dict[str, dict] = {}
        self._frame("r0", None, "program", optimization.original.name, None)

    # --- the page -----------------------------------------------------------------------

    def build(self) -> dict:
        class_frames = self._class_frames()
        critical = self._critical_chains()
        critical_nodes = {node for chain in critical for node in chain["enodes"]}
        node_ids: dict[ENode, str] = {}
        classes, nodes = [], []
        for cid, members in self.snapshot.nodes.items():
            if cid.sort != "Term":
                continue
            class_id = self._class_id(cid)
            member_ids = []
            for node in members:
                if node.head not in TERM_HEADS:
                    continue
                node_id = node_ids[node] = f"n{len(node_ids)}"
                member_ids.append(node_id)
                nodes.append(self._node(node, node_id, cid, class_frames[cid], node in critical_nodes))
            if not member_ids:
                continue
            chosen = self.choice.get(cid)
            type_ = self.pricing.types.types.get(cid)
            classes.append({"id": class_id, "frame": class_frames[cid], "nodes": member_ids,
                            "chosen": node_ids.get(chosen) if chosen is not None else None,
                            "type": _type_text(type_), "leaf": all(_is_leaf(node) for node in members)})
        for chain in critical:
            chain["nodes"] = [node_ids[node] for node in chain.pop("enodes") if node in node_ids]
        self._count_frames(classes, {node["id"]: node for node in nodes})
        return {"title": f"egad: {self.optimization.original.name}", "summary": self._summary(),
                "frames": list(self.frames.values()), "classes": classes, "nodes": nodes, "critical": critical,
                "before": str(self.optimization.original), "after": str(self.optimization.program)}

    def _summary(self) -> dict:
        optimization = self.optimization
        before, after = optimization.predicted_before, optimization.predicted_after
        saturation = optimization.saturation
        summary = {
            "families": list(optimization.families),
            "predicted_before_us": before.seconds * 1e6 if before is not None else None,
            "predicted_after_us": after.seconds * 1e6 if after is not None else None,
            "tape_bytes": [before.tape_bytes, after.tape_bytes] if before is not None and after is not None else None,
            "fallback": optimization.fallback,
            "extraction_built": optimization.program is not optimization.original,
            "critical_path_report": [str(path) for path in optimization.critical_path],
            "target": self.target.name,
        }
        if saturation is not None:
            summary["saturation"] = {"nodes": saturation.nodes, "classes": saturation.classes,
                                     "rounds": saturation.rounds, "stopped_by": saturation.stopped_by}
            summary["rules"] = [{"name": name, "matches": count, "new_nodes": saturation.new_nodes.get(name, 0),
                                 "extracted": optimization.chosen.get(name, 0)}
                                for name, count in saturation.fired().items()]
        return summary

    def _node(self, node: ENode, node_id: str, cid: ClassId, frame: str, critical: bool) -> dict:
        origin = self.origins.get(node)
        seconds, runs = self._cost(node, cid)
        entry = {"id": node_id, "class": self._class_id(cid), "op": self._op(node, origin), "head": node.head,
                 "cost_us": None if seconds is None else round(seconds * 1e6, 4), "runs": runs,
                 "rule": origin.site.name if origin is not None else "(not recorded)",
                 "site": f"{relative_path(origin.site.file)}:{origin.site.line}"
                 if origin is not None and origin.site.name != "input" else "",  # input: its source line says more
                 "source": str(origin.loc) if origin is not None and origin.loc.line else "",
                 "extracted": self.choice.get(cid) == node, "original": self.original.get(cid) == node,
                 "critical": critical,
                 "inputs": [self._class_id(child) for child in _inputs(node)]}
        if node.head in CONTROL_HEADS:
            entry["region"] = self._region_frame(node)
        return entry

    # --- what a node is and costs -------------------------------------------------------

    def _op(self, node: ENode, origin) -> str:
        head, args = node.head, node.args
        hint = origin.hints[0] if origin is not None and origin.hints and origin.hints[0] else ""
        if head.startswith("Op"):
            return args[0]
        if head == "Arg":
            region, index = args
            kind = "param" if region == 0 else "counter" if index == 0 and self._loop_op(region) == "for" \
                else "carried"
            return f"{kind} {hint or f'{region}.{index}'}"
        if head in ("Scalar", "Splat"):
            value = np.asarray(args[1], "int64").view("float64") if np.dtype(args[0]).kind == "f" else args[1]
            return f"{'const' if head == 'Scalar' else 'splat'} {float(value):g}"
        if head == "Array":
            return f"array #{args[0]}"
        if head == "NewTape":
            return "tape_alloc"
        if head == "Get":
            return f"get {args[1]}"
        return f"{head.lower()} r{args[0]}"

    def _cost(self, node: ENode, cid: ClassId) -> tuple[float | None, float]:
        """(seconds of one execution, dispatch included; runs per call) by the extractor's pricing."""
        runs = self.pricing.weight(self.pricing.readable.get(cid, frozenset()))
        if node.head in _FREE_OF_COST or node.head in CONTROL_HEADS:
            return (0.0 if node.head in _FREE_OF_COST else None), runs
        if node not in self.pricing.nodes.get(cid, ()):
            return None, runs  # its shape rule refused its inputs: the extractor never picks it
        work = self.pricing.op_work(node)
        return work.seconds(self.target) + work.kernels * self.target.dispatch_seconds, runs

    def _latency(self, node: ENode, cid: ClassId, placement) -> float:
        """An op's time on a dependent chain (critical_path.py's pricing)."""
        if node.head in _FREE_OF_COST:
            return 0.0
        if node.head in CONTROL_HEADS:
            seconds, kernels = self._body_work(node, placement)
        elif node not in self.pricing.nodes.get(cid, ()):
            return 0.0
        else:
            work = self.pricing.op_work(node)
            seconds, kernels = work.seconds(self.target), work.kernels
        return max(seconds, self.target.latency_seconds) if kernels else seconds

    def _body_work(self, control: ENode, placement) -> tuple[float, float]:
        """Roofline seconds and kernels of everything placed inside a control node's regions."""
        region = control.args[0]
        inside = [c for c in post_order([c for _, results in region_results(control) for c in results],
                                        lambda c: _inputs(self.choice[c]))
                  if any(step[0] == region for step in placement.scopes.get(c, ((),))[0])]
        seconds = kernels = 0.0
        for cid in inside:
            node = self.choice[cid]
            if node.head.startswith("Op") or node.head == "NewTape":
                if node in self.pricing.nodes.get(cid, ()):
                    work = self.pricing.op_work(node)
                    seconds, kernels = seconds + work.seconds(self.target), kernels + work.kernels
        return seconds, kernels

    # --- regions ------------------------------------------------------------------------

    def _control_nodes(self) -> dict[int, ENode]:
        """Each region's control node: the extracted one, else the first in the e-graph."""
        control = dict(self.pricing.types.control)
        for node in self.choice.values():
            if node.head in CONTROL_HEADS:
                control[node.args[0]] = node
        return control

    def _loop_op(self, region: int) -> str | None:
        info = self.regions.get(region)
        if info is not None:
            return info.op
        node = self.control.get(region)
        return node.head.lower() if node is not None else None

    def _frame(self, frame_id: str, parent: str | None, kind: str, label: str, region: int | None) -> str:
        if frame_id not in self.frames:
            loc, trips, names = "", None, []
            if region is not None:
                node = self.control.get(region)
                origin = self.origins.get(node) if node is not None else None
                loc = str(origin.loc) if origin is not None and origin.loc.line else ""
                trips = self.pricing.trips.get(region)
                info = self.regions.get(region)
                names = list(info.names) if info is not None else []
            self.frames[frame_id] = {"id": frame_id, "parent": parent, "kind": kind, "label": label, "loc": loc,
                                     "trips": trips, "names": names, "region": region}
        return frame_id

    def _scope_frame(self, scope) -> str:
        if not scope:
            return "r0"
        parent = self._scope_frame(scope[:-1])
        region, branch = scope[-1]
        op = self._loop_op(region) or "region"
        if op in ("for", "while"):
            return self._frame(f"r{region}", parent, self._loop_kind(region), f"{self._loop_kind(region)} loop",
                               region)
        label = ("then" if branch == 0 else "else") if op == "if" else f"branch {branch}"
        return self._frame(f"r{region}b{branch}", parent, op, f"{op} ({label})", region)

    def _loop_frame(self, region: int) -> str:
        """The frame of a loop that placement did not place (outside the extracted term)."""
        frame_id = f"r{region}"
        if frame_id not in self.frames:
            outer = self.pricing.parent.get(region)
            parent = self._loop_frame(outer) if outer is not None else "r0"
            kind = self._loop_kind(region)
            self._frame(frame_id, parent, kind, f"{kind} loop", region)
        return frame_id

    def _loop_kind(self, region: int) -> str:
        node = self.control.get(region)
        if node is not None and node.head == "For":
            return "reverse for" if self.pricing.types.attrs(node.args[5]).get("reverse") else "for"
        return self._loop_op(region) or "loop"

    def _region_frame(self, node: ENode) -> str | None:
        """The frame a control node's regions are drawn in (its first branch for if/switch)."""
        region = node.args[0]
        for frame_id in (f"r{region}", f"r{region}b0"):
            if frame_id in self.frames:
                return frame_id
        return None

    def _class_frames(self) -> dict[ClassId, str]:
        placement = place(self.record.extraction)
        self.placement = placement
        frames: dict[ClassId, str] = {}
        for cid in self.choice:
            scopes = placement.scopes.get(cid)
            frames[cid] = self._scope_frame(scopes[0]) if scopes else "r0"
        depth = self.pricing.nest_depth
        for cid in self.snapshot.nodes:
            if cid.sort == "Term" and cid not in frames:
                loops = [r for r in self.pricing.readable.get(cid, ()) if r in depth]
                frames[cid] = self._loop_frame(max(loops, key=depth.get)) if loops else "r0"
        return frames

    def _count_frames(self, classes: list[dict], nodes: dict[str, dict]) -> None:
        """Each frame's own classes, and the e-nodes (extracted, critical) it holds, nested frames included."""
        for frame in self.frames.values():
            frame.update(classes=0, enodes=0, extracted=0, critical=0)
        for entry in classes:
            frame = self.frames[entry["frame"]]
            frame["classes"] += 1
            members = [nodes[node_id] for node_id in entry["nodes"]]
            while frame is not None:
                frame["enodes"] += len(members)
                frame["extracted"] += sum(member["extracted"] for member in members)
                frame["critical"] += sum(member["critical"] for member in members)
                frame = self.frames.get(frame["parent"]) if frame["parent"] else None

    def _class_id(self, cid: ClassId) -> str:
        return f"c{self.number[cid]}"

    # --- critical path ------------------------------------------------------------------

    def _critical_chains(self) -> list[dict]:
        chains = []
        for cid, node in self.choice.items():
            if node.head in LOOP_HEADS:
                chain = self._loop_chain(node)
                if chain is not None:
                    chains.append(chain)
        return sorted(chains, key=lambda chain: -chain["seconds_per_trip"])

    def _loop_chain(self, loop: ENode) -> dict | None:
        """The longest chain from a carried value to its own next value (as
        egad/critical_path.py: tapes are no recurrence)."""
        region = loop.args[0]
        if loop.head == "For":
            results, carried_from = list(loop.args[4][:len(loop.args[3])]), 1  # Arg(r, 0) is the counter
        else:
            results, carried_from = list(loop.args[3]), 0
        chains = [self._chain(region, carried_from + k, result) for k, result in enumerate(results)
                  if not isinstance(self.pricing.types.types.get(result), TapeType)]
        chains = [chain for chain in chains if chain is not None]
        if not chains:
            return None
        seconds, enodes = max(chains, key=lambda chain: chain[0])
        ops = [self._op(node, self.origins.get(node)) for node in enodes if node.head not in _FREE_OF_COST]
        frame = f"r{region}"
        return {"frame": frame if frame in self.frames else "r0", "seconds_per_trip": seconds, "ops": ops,
                "label": f"{self._loop_kind(region)} loop" + (f" at {self.frames[frame]['loc']}"
                                                               if frame in self.frames and self.frames[frame]['loc']
                                                               else ""),
                "enodes": enodes}

    def _chain(self, region, index: int, result: ClassId) -> tuple[float, list] | None:
        """(latency, e-nodes) of the longest chain from the loop's Arg `index` to `result`."""
        depth: dict[ClassId, float] = {}
        came_from: dict[ClassId, ClassId | None] = {}
        for cid in post_order([result], lambda c: local_inputs(self.choice[c]) if self.choice[c].head != "Get"
                              else [self.choice[c].args[0]]):
            node = self.choice[cid]
            if node.head == "Arg":
                if node.args[0] == region and node.args[1] == index:
                    depth[cid], came_from[cid] = 0.0, None
                continue
            reads = [node.args[0]] if node.head == "Get" else local_inputs(node)
            reached = [(depth[c], self.number[c], c) for c in reads if c in depth]
            if not reached:
                continue
            start, _, source = max(reached)
            depth[cid] = start + self._latency(node, cid, self.placement)
            came_from[cid] = source
        if result not in depth:
            return None
        enodes, cid = [], result
        while cid is not None:
            enodes.append(self.choice[cid])
            cid = came_from[cid]
        return depth[result], enodes[::-1]


def _is_leaf(node: ENode) -> bool:
    """A constant or a program parameter: the page draws it beside each of its readers."""
    return node.head in ("Scalar", "Splat", "Array") or (node.head == "Arg" and node.args[0] == 0)


def _inputs(node: ENode) -> list[ClassId]:
    """Every Term class a node reads (its regions' results included)."""
    from .egraph.class_types import node_inputs

    return [c for c in node_inputs(node) if c.sort == "Term"]


def _type_text(type_) -> str:
    if isinstance(type_, tuple):
        return "(" + ", ".join(map(str, type_)) + ")"
    return "" if type_ is None else str(type_)


def relative_path(filename: str) -> str:
    """A rule's file as a user finds it: relative to the egad checkout (or the current
    directory) when inside it, else as given."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for root in (package_root, os.getcwd()):
        try:
            relative = os.path.relpath(filename, root)
        except ValueError:  # another drive
            continue
        if not relative.startswith(".."):
            return relative
    return filename

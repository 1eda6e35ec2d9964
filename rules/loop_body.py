"""Copying a loop's body, for the loop transformers that build a whole alternative loop
(rules/batching.py's `batch-weight-gradient`, rules/checkpoint.py's
`stack-taped-residuals`, `recompute-taped-residuals` and `checkpoint-carried-states`).

A region's body is not a list of bindings in the e-graph: it is the classes that read,
at any depth, an `Arg` of the loop (everything else is read from where it is, since a
body refers directly to outer classes: egad/egraph/encoding.py). `loop_body` walks
those classes from the values the new loop must compute, each through its latest
recorded node (the form the rules have made of it so far; the earliest, as written,
where that would close a cycle), and `copy_body` rebuilds them over the new loop's
`Arg`s.
"""
from __future__ import annotations

from egad.egraph.attrs import attrs_node
from egad.egraph.encoding import RegionInfo
from egad.egraph.enode import ClassId, ENode, children, post_order
from egad.egraph.placement import CONTROL_HEADS

MAX_CYCLE_RETRIES = 8  # walks of a body, each copying as written the classes whose latest node closed a cycle


def loop_body(view, region: int, starts, invariant, leaves=frozenset(), as_written: bool = False):
    """The classes the new loop recomputes: those whose node reads, at any depth, an
    `Arg` of the loop; each with that node, and the loop's Args they read. Each class is
    copied through its latest recorded node (what the rules made of it: a copy made in a
    late round starts fused and batched, not as the program was written), or its
    earliest where the latest would close a cycle or is a control node. Everything else
    they read is read from where it is (classes are values: a forward loop's ys, tape
    and all, is the same value in both loops). A class of `leaves` is in the body but
    not walked: the caller gives its node (`copy_body`'s `seeded`). None for a body the
    copy cannot hold: a control node or a tape allocation in it, an Arg of a region
    nested in the loop, a class with no recorded node, a cycle through earliest nodes.
    `as_written`: every class through its earliest node (the rules then rewrite the
    copy as they did the loop, and both forms stay in its classes)."""
    snapshot, origins = view.snapshot, view.editor.origins
    outer = {0}
    parent = view.encoding.regions[region].parent
    while parent is not None:
        outer.add(parent)
        parent = view.encoding.regions[parent].parent
    chosen: dict[ClassId, ENode | None] = {}
    earliest: set[ClassId] = set()  # classes whose latest node closed a cycle: their earliest is copied

    def node_of(cid: ClassId) -> ENode | None:
        if cid not in chosen:
            recorded = sorted((n for n in snapshot.nodes.get(cid, ()) if n in origins),
                              key=lambda n: origins[n].order)
            # an Arg of another loop is that loop's own name for the value (a rule found a state
            # carried unchanged equal to its initial value): never how this loop's copy reads it
            latest = [n for n in reversed(recorded) if n.head not in CONTROL_HEADS and n.head != "NewTape"
                      and not (n.head == "Arg" and n.args[0] != region)]
            chosen[cid] = (recorded[0] if cid in earliest or as_written or not latest else latest[0]) \
                if recorded else None
        return chosen[cid]

    def term_reads(cid: ClassId) -> list[ClassId]:
        node = node_of(cid)
        if cid in invariant or cid in leaves or node is None:
            return []
        return [c for c in children(node) if c.sort == "Term"]

    for _ in range(MAX_CYCLE_RETRIES):
        cycles: list[ClassId] = []
        order = post_order(starts, term_reads, cycles.append)
        if not cycles or set(cycles) <= earliest or as_written:
            break
        earliest.update(cycles)  # copy those as written, and walk again
        chosen.clear()
    if cycles or any(node_of(cid) is None for cid in order if cid not in invariant and cid not in leaves):
        return None  # a cycle through the earliest nodes, or nothing recorded
    reading: dict[ClassId, bool] = {}  # class -> reads the loop's Args
    for cid in order:
        node = node_of(cid)
        if cid in leaves:
            reading[cid] = True
        elif cid in invariant:
            reading[cid] = False
        elif node.head == "Arg":
            reading[cid] = node == ENode("Arg", (region, node.args[1]))
        else:
            reading[cid] = any(reading[c] for c in children(node) if c.sort == "Term")

    body: dict[ClassId, ENode] = {}
    reads: set[int] = set()
    stack = [c for c in starts if reading[c]]
    while stack:
        cid = stack.pop()
        if cid in body:
            continue
        node = body[cid] = node_of(cid)
        if cid in leaves:
            continue
        if node.head in CONTROL_HEADS or node.head == "NewTape":
            return None
        if node.head == "Arg":
            reads.add(node.args[1])
        for child in children(node):
            if child.sort != "Term":
                continue
            if reading[child]:
                stack.append(child)
            elif node_of(child) is not None and node_of(child).head == "Arg" \
                    and node_of(child).args[0] not in outer | {region}:  # (its own: a state carried unchanged)
                return None  # an Arg of a region nested in the loop, outside its own region
    return body, reads


def copy_region(view, region: int, copied_from: tuple | None = None, inside: int | None = None) -> int:
    """A fresh region id for a copy of `region`, with its op, names and parent, or
    written inside region `inside` instead (`copied_from`: what the copying rule
    records, RegionInfo.copied_from)."""
    regions = view.encoding.regions
    copy = max(regions) + 1
    info = regions[region]
    regions[copy] = RegionInfo(info.op, info.names, info.parent if inside is None else inside, copied_from)
    return copy


def loop_attrs(view, attrs_class: ClassId, trips: int) -> ENode:
    """A copied loop's attributes: the copied loop's, with its own trip count."""
    values = {**view.attrs(attrs_class), "trip_dim": trips}
    values.pop("trip_guess", None)
    return attrs_node(values, view.encoding.constants)


def copy_recorder(view):
    """`record(class, new node, copied node=None)` for `copy_body`: the new node is recorded
    with the source line and names of the class it copies, and credited to the rule that
    made the node it copies (a fused matmul copied into a new loop is still the fusion
    rule's), or to the running transformer for an input node or a node of its own.
    Returns the new node's stable form."""
    origins = view.editor.origins

    def record(cid: ClassId, node: ENode, copied: ENode | None = None):
        origin = origins.get(copied) if copied is not None else None
        site = origin.site if origin is not None and origin.site.name != "input" else view.site
        return view.editor.record(node, site, like=cid)

    return record


def copy_body(body: dict[ClassId, ENode], arg, record, seeded=None, roots=None) -> dict[ClassId, ENode]:
    """Each body class's node rebuilt over the copies of its inputs, `arg(i)` for `Arg(loop, i)`,
    and `seeded[cid]` for a class of `seeded` (loop_body's leaves); each new node passed to
    `record(class, copy, copied node)` (`copy_recorder`) in dependency order (no recursion: a
    body can be a long chain). An argument or a seed that is not a new node (a class, or the
    stable form of a node recorded already) is used as it is. `roots`: copy only the classes
    these read (an unrolled trip copies what its results need), else the whole body."""
    seeded = seeded or {}
    copies: dict[ClassId, ENode] = {}
    roots = body if roots is None else [c for c in roots if c in body]
    for cid in post_order(roots, lambda cid: [] if cid in seeded else [c for c in children(body[cid]) if c in body]):
        node = body[cid]
        if cid in seeded or node.head == "Arg":
            value = seeded[cid] if cid in seeded else arg(node.args[1])
            copies[cid] = record(cid, value) if isinstance(value, ENode) else value
        else:
            copies[cid] = record(cid, ENode(node.head, tuple(_substitute(field, copies) for field in node.args)), node)
    return copies


def copy_loop(view, loop_class: ClassId, loop: ENode, body: dict[ClassId, ENode], results, kept: list[int],
              copied_from: tuple | None = None) -> ENode:
    """`loop` again, over a copy of `body` (a `loop_body` walk): its bounds and attributes,
    the states `kept` (positions in its inits; their Args renumbered, the others dropped)
    and the copies of `results` as its results, in a fresh region (`copy_region`).
    Returns the new loop's stable form, recorded in `loop_class`."""
    region, lo, hi, inits, _, attrs_class = loop.args
    new_region = copy_region(view, region, copied_from)
    renumbered = {0: 0, **{1 + k: 1 + j for j, k in enumerate(kept)}}
    record = copy_recorder(view)
    copies = copy_body(body, lambda index: ENode("Arg", (new_region, renumbered[index])), record)
    return record(loop_class, ENode("For", (new_region, lo, hi, tuple(inits[k] for k in kept),
                                           tuple(copies.get(c, c) for c in results), attrs_class)))


def _substitute(field, copies):
    if isinstance(field, ClassId):
        return copies.get(field, field)
    if isinstance(field, tuple):
        return tuple(_substitute(item, copies) for item in field)
    return field

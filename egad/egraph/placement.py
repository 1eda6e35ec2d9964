"""Where each chosen node is computed: loop-invariant code motion as placement (DESIGN §5).

In the e-graph a region body refers directly to outer values, so a node carries no
scope of its own; decoding decides one. A *scope* is the path of regions from the
program down: `()` is the program, `scope + ((r, k),)` is branch `k` of the control
node with region id `r` placed in `scope`. A loop's body is `(r, 0)`; a `while`'s
condition is `(r, 1)` beside it: the two run apart, so what both use is computed in
each (in the condition, a use inside an `if` must not be computed before the `if`
because the body uses it too: the last test of `i < n and xs[i] > t` would read
xs[n]). Both bind the loop's `Arg`s.

A node is placed as Cranelift's aegraph elaboration places it: where it is needed,
and out of loops.

1. Where it is needed: the deepest scope that contains all its uses (their lowest
   common ancestor), provided every run of that scope reaches a use: a use right
   there, or uses in every branch of an `if`/`switch` placed there. A value both
   branches of an `if` compute is so computed once, before the `if`. When the
   uses do not cover that scope (one branch of a three-way switch, two `if`s in a
   row), the node is placed separately under each child scope holding uses, so
   no run computes a value it does not use: nothing is speculated out of a
   branch, where it might fail (`take` out of range) or waste work.
2. Out of loops: from there, out of every enclosing loop whose `Arg`s it does not
   depend on (the hoist; it stops at a branch). The one speculation kept: a loop
   that runs zero times still computes what was hoisted out of it, unless that can
   raise (an index out of range, a max of nothing: `FALLIBLE_OPS`, what reads one,
   or a branch or loop that computes one), which is hoisted only out of a `for` that
   surely runs (constant bounds lo < hi, or [lo, lo + c): a checkpointed segment), or
   out of a `while`'s condition (it runs once at least).

Control nodes and tape ops are placed once, at the common ancestor; tape ops are
never hoisted (they update a stack in place; an allocation moved out of a loop would
be one stack shared by all iterations), and linear tape threading keeps their uses
on the path where the program had them.

A node's `Arg` dependencies must be in scope where it lands; an extraction that
violates this (a later extractor that is not scope-aware) is refused here.
"""
from __future__ import annotations

import dataclasses

from ..errors import EgadError
from ..ir import ops
from ..ir.index_ranges import INDEX_OPS
from .enode import ClassId, ENode, children, post_order
from .extraction import Extraction

Scope = tuple[tuple[int, int], ...]
CONTROL_HEADS = frozenset({"For", "While", "If", "Switch"})
LOOP_HEADS = frozenset({"For", "While"})
WHILE_TEST = 1  # a while's condition is branch 1 of its region, its body branch 0
FALLIBLE_OPS = frozenset(INDEX_OPS) | {"reduce_max", "reduce_min", "argmax"}  # may raise where they run


@dataclasses.dataclass
class Placement:
    scopes: dict[ClassId, tuple[Scope, ...]]  # where each class's node is computed (a Get: where its node is)
    free_args: dict[ClassId, frozenset[int]]  # regions whose Args the class depends on

    def home(self, cid: ClassId, use: Scope) -> Scope:
        """The placement of `cid` that serves a use in scope `use` (the one enclosing it)."""
        for scope in self.scopes[cid]:
            if use[:len(scope)] == scope:
                return scope
        raise EgadError(f"class {cid} is not placed where scope {use} can read it")


def local_inputs(node: ENode) -> list[ClassId]:
    """The term fields a node reads where it is placed (a control node: not its regions)."""
    if node.head == "For":
        _, lo, hi, inits, _, _ = node.args
        return [lo, hi, *inits]
    if node.head == "While":
        return list(node.args[1])
    if node.head in ("If", "Switch"):
        return [node.args[1]]
    return [child for child in children(node) if child.sort == "Term"]


def region_results(node: ENode) -> list[tuple[int, list[ClassId]]]:
    """(branch index, result classes) of each region of a control node."""
    if node.head == "For":
        return [(0, list(node.args[4]))]
    if node.head == "While":
        return [(0, list(node.args[3])), (WHILE_TEST, [node.args[2]])]
    if node.head == "If":
        return [(0, list(node.args[2])), (1, list(node.args[3]))]
    if node.head == "Switch":
        return [(k, list(results)) for k, results in enumerate(node.args[2])]
    return []


def is_effect(node: ENode) -> bool:
    return node.head == "NewTape" or (node.head.startswith("Op") and node.args[0] in ops.TAPE_OPS)


def place(extraction: Extraction) -> Placement:
    choice = extraction.choice
    order = _post_order(extraction)
    free_args = _free_args(choice, order)
    fallible = _fallible(choice, order)
    runs: set[int] = set()  # for loops sure to run once at least (`surely_runs`)
    uses: dict[ClassId, list[Scope]] = {cid: [] for cid in order}
    for root in extraction.roots:
        uses[root].append(())
    scopes: dict[ClassId, tuple[Scope, ...]] = {}
    region_scopes: dict[int, tuple[Scope, ...]] = {0: ((),)}  # where each region's Args live
    loops: set[int] = set()
    branch_counts: dict[int, int] = {}  # region id of an if/switch -> its number of branches
    projections: dict[ClassId, list[ClassId]] = {}  # node -> its Gets, placed with it
    for cid in reversed(order):  # users before what they use
        node = choice[cid]
        if node.head == "Arg":
            if node.args[0] not in region_scopes:
                raise EgadError(f"extraction reads {node} outside the region that binds it")
            scopes[cid] = region_scopes[node.args[0]]
            continue
        if node.head == "Get":  # a projection is computed with its node
            owner = node.args[0]
            uses[owner].extend(uses[cid])
            projections.setdefault(owner, []).append(cid)
            continue
        if node.head in CONTROL_HEADS or is_effect(node):
            needed = [_common_ancestor(uses[cid])]
        else:
            needed = _covering_scopes(uses[cid], branch_counts)
        hoisted = []
        for where in needed:
            while where and where[-1][0] in loops and where[-1][0] not in free_args[cid] and not is_effect(node):
                region, branch = where[-1]
                if cid in fallible and branch != WHILE_TEST and region not in runs:
                    break  # raising before a loop that runs zero times, what it would never have computed
                where = where[:-1]
            _check_in_scope(cid, node, where, free_args[cid], region_scopes)
            hoisted.append(where)
        scopes[cid] = _outermost(hoisted)
        for getter in projections.get(cid, ()):
            scopes[getter] = scopes[cid]
        for where in scopes[cid]:
            for child in local_inputs(node):
                uses[child].append(where)
        if node.head in CONTROL_HEADS:
            (where,) = scopes[cid]
            region = node.args[0]
            if node.head in LOOP_HEADS:
                loops.add(region)
                if node.head == "For" and _runs_once_at_least(choice, node):
                    runs.add(region)
                region_scopes[region] = tuple(where + ((region, branch),) for branch, _ in region_results(node))
            else:
                branch_counts[region] = len(region_results(node))
            for branch, results in region_results(node):
                for child in results:
                    uses[child].append(where + ((region, branch),))
    return Placement(scopes, free_args)


def _free_args(choice, order) -> dict[ClassId, frozenset[int]]:
    free_args: dict[ClassId, frozenset[int]] = {}
    for cid in order:  # what a class reads before the class
        node = choice[cid]
        if node.head == "Arg":
            free_args[cid] = frozenset({node.args[0]})
            continue
        needed = set().union(*(free_args[c] for c in local_inputs(node)))
        for _, results in region_results(node):
            needed.update(*(free_args[c] for c in results))
        if node.head in CONTROL_HEADS:
            needed.discard(node.args[0])  # its own region's Args are bound inside it
        free_args[cid] = frozenset(needed)
    return free_args


def _fallible(choice, order) -> set[ClassId]:
    """The classes whose computation may raise: a FALLIBLE_OPS op, anything reading one
    (hoisting the reader would take the op out with it), and a branch or loop whose
    regions compute one (hoisted whole out of a loop that runs no trip, it would read
    `xs[j]` that the program never reads)."""
    fallible: set[ClassId] = set()
    for cid in order:  # what a class reads before the class (a region's results before its node)
        node = choice[cid]
        if _is_fallible_op(node) or any(c in fallible for c in local_inputs(node)) \
                or any(c in fallible for _, results in region_results(node) for c in results):
            fallible.add(cid)
    return fallible


def _is_fallible_op(node: ENode) -> bool:
    return node.head.startswith("Op") and node.args[0] in FALLIBLE_OPS


def _runs_once_at_least(choice, loop: ENode) -> bool:
    return surely_runs(loop.args[1], loop.args[2], lambda cid: (choice[cid],))


def surely_runs(lo: ClassId, hi: ClassId, nodes_of) -> bool:
    """Whether a for loop over [lo, hi) runs a trip at least, as its bounds show:
    constants lo < hi, or hi = lo + c for a constant c >= 1 (a segment of a
    checkpointed loop: [k*s, k*s + s)). `nodes_of(class)`: the nodes to look at (an
    extraction's choice, or all of a class's nodes in a snapshot: each is the class)."""
    for hi_node in nodes_of(hi):
        if hi_node.head == "Scalar" and any(n.head == "Scalar" and int(n.args[1]) < int(hi_node.args[1])
                                            for n in nodes_of(lo)):
            return True
        if hi_node.head == "Op2" and hi_node.args[0] == "add" and lo in hi_node.args[2:]:
            step = hi_node.args[3] if hi_node.args[2] == lo else hi_node.args[2]
            if any(n.head == "Scalar" and int(n.args[1]) >= 1 for n in nodes_of(step)):
                return True
    return False


def may_raise(snapshot, cid: ClassId) -> bool:
    """Whether some node of the class, or of a class below it, is a FALLIBLE_OPS op (for
    a rule that would compute the class where the program as written may not)."""
    seen, stack = {cid}, [cid]
    while stack:
        for node in snapshot.nodes.get(stack.pop(), ()):
            if _is_fallible_op(node):
                return True
            for child in children(node):
                if child.sort == "Term" and child not in seen:
                    seen.add(child)
                    stack.append(child)
    return False


def _covering_scopes(uses: list[Scope], branch_counts: dict[int, int]) -> list[Scope]:
    """The fewest scopes that together dominate `uses` and that every run reaching
    them follows to a use (so nothing placed there is speculative)."""
    where = _common_ancestor(uses)
    if _covered(where, uses, branch_counts):
        return [where]
    groups: dict[tuple[int, int], list[Scope]] = {}
    for use in uses:  # none is `where` itself, or it would be covered
        groups.setdefault(use[len(where)], []).append(use)
    return [scope for group in groups.values() for scope in _covering_scopes(group, branch_counts)]


def _covered(where: Scope, uses: list[Scope], branch_counts: dict[int, int]) -> bool:
    """Does every run of `where` reach a use: one in `where` itself, or, for some
    if/switch placed in `where`, a covering use in each of its branches?"""
    below: dict[int, dict[int, list[Scope]]] = {}
    for use in uses:
        if len(use) == len(where):
            return True
        region, branch = use[len(where)]
        below.setdefault(region, {}).setdefault(branch, []).append(use)
    for region, branches in below.items():
        count = branch_counts.get(region)  # None for a loop: its body may not run
        if count is not None and len(branches) == count and all(
                _covered(where + ((region, branch),), branch_uses, branch_counts)
                for branch, branch_uses in branches.items()):
            return True
    return False


def _outermost(scopes: list[Scope]) -> tuple[Scope, ...]:
    """The scopes with no other scope of the list enclosing them (duplicates merged)."""
    kept: list[Scope] = []
    for scope in sorted(set(scopes), key=len):
        if not any(scope[:len(outer)] == outer for outer in kept):
            kept.append(scope)
    return tuple(kept)


def _common_ancestor(scopes: list[Scope]) -> Scope:
    first = scopes[0]
    length = len(first)
    for other in scopes[1:]:
        length = min(length, len(other))
        for depth in range(length):
            if other[depth] != first[depth]:
                length = depth
                break
    return first[:length]


def _check_in_scope(cid, node, where: Scope, free_args, region_scopes) -> None:
    for region in free_args:
        if not any(where[:len(inner)] == inner for inner in region_scopes.get(region, ())):
            raise EgadError(f"extraction picked {node} (class {cid}) where the Args of region {region} are "
                            "out of scope; an extractor must only pick nodes whose Args are in scope at the use")


def _post_order(extraction: Extraction) -> list[ClassId]:
    """Every class reachable from the roots, each after everything it reads (regions too)."""
    choice = extraction.choice

    def reads(cid: ClassId) -> list[ClassId]:
        node = choice[cid]
        return local_inputs(node) + [c for _, results in region_results(node) for c in results]

    def cycle(cid: ClassId):
        raise EgadError(f"the extraction has a cycle through {choice[cid]} (class {cid})")

    return post_order(extraction.roots, reads, cycle)

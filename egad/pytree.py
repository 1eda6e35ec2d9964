"""Pytrees: nested tuples, lists, dicts (and namedtuples, None) with array leaves.

Loop state, branch operands, program arguments and outputs are pytrees. Dicts
flatten in sorted key order, as in JAX, so two dicts with the same keys always
agree.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any


@dataclasses.dataclass(frozen=True)
class TreeDef:
    kind: str  # "leaf" | "none" | "tuple" | "list" | "dict" | "namedtuple"
    meta: Any = None  # dict keys, or the namedtuple class
    children: tuple["TreeDef", ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(child.num_leaves for child in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = [str(c) for c in self.children]
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.meta, inner)) + "}"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        prefix = self.meta.__name__ if self.kind == "namedtuple" else ""
        return prefix + "(" + ", ".join(inner) + ("," if len(inner) == 1 and not prefix else "") + ")"


LEAF = TreeDef("leaf")


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree) -> tuple[list, TreeDef]:
    """Leaves in a stable order and the structure to rebuild the tree."""
    leaves: list = []

    def visit(node) -> TreeDef:
        if node is None:
            return TreeDef("none")
        if _is_namedtuple(node):
            return TreeDef("namedtuple", type(node), tuple(visit(c) for c in node))
        if isinstance(node, tuple):
            return TreeDef("tuple", None, tuple(visit(c) for c in node))
        if isinstance(node, list):
            return TreeDef("list", None, tuple(visit(c) for c in node))
        if isinstance(node, dict):
            try:
                keys = tuple(sorted(node))
            except TypeError:
                keys = tuple(node)
            return TreeDef("dict", keys, tuple(visit(node[k]) for k in keys))
        leaves.append(node)
        return LEAF

    treedef = visit(tree)
    return leaves, treedef


def unflatten(treedef: TreeDef, leaves) -> Any:
    """Rebuild a tree of `treedef`'s structure from its leaves."""
    iterator = iter(leaves)

    def build(node: TreeDef):
        if node.kind == "leaf":
            return next(iterator)
        if node.kind == "none":
            return None
        children = [build(c) for c in node.children]
        if node.kind == "tuple":
            return tuple(children)
        if node.kind == "list":
            return children
        if node.kind == "dict":
            return dict(zip(node.meta, children))
        return node.meta(*children)

    result = build(treedef)
    if next(iterator, _END) is not _END:
        raise ValueError("too many leaves for tree structure")
    return result


_END = object()


def leaf_paths(treedef: TreeDef, root: str = "") -> list[str]:
    """A readable path per leaf (`state[1]['h']`), for naming leaves in errors."""
    paths: list[str] = []

    def visit(node: TreeDef, path: str):
        if node.kind == "leaf":
            paths.append(path or "<value>")
        elif node.kind == "dict":
            for key, child in zip(node.meta, node.children):
                visit(child, f"{path}[{key!r}]")
        elif node.kind == "namedtuple":
            for field, child in zip(node.meta._fields, node.children):
                visit(child, f"{path}.{field}")
        else:
            for index, child in enumerate(node.children):
                visit(child, f"{path}[{index}]")

    visit(treedef, root)
    return paths


def tree_map(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(leaf) for leaf in leaves])


def path_hint(path: str) -> str:
    """A leaf path as a short identifier for printing (`params['W']` -> `params.W`)."""
    dotted = path.replace("][", ".").replace("[", ".").replace("]", "")
    return re.sub(r"[^A-Za-z0-9_.]", "", dotted).strip(".")

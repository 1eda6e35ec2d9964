"""A readable text form of programs: one binding per line, regions indented.

    program loss(%W: f32[4,4], %xs: f32[T,2,4]) {
      %0: i64[] = %xs.shape[0]                               # model.py:12
      %h: f32[2,4] = for(%c0, %0, %h0, %W, %xs) n_state=1 ...  # model.py:14
        body(%i: i64[], %h.1: f32[2,4], %W.1: f32[4,4], %xs.1: f32[T,2,4]):
          ...
          yield %h.2
      return %h
    }
"""
from __future__ import annotations

from . import ops
from .program import Binding, Program, Region, Var

_COMMENT_COLUMN = 64
_HIDDEN_ATTRS = {"value"}  # shown by the op's own pretty form


class _Names:
    """Stable printable names: the user's hint when there is one, else a number."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counter = 0

    def __call__(self, var: Var) -> str:
        if var.uid not in self.names:
            base = var.hint or str(self.counter)
            if not var.hint:
                self.counter += 1
            name, suffix = base, 1
            while name in self.taken:
                name, suffix = f"{base}.{suffix}", suffix + 1
            self.taken.add(name)
            self.names[var.uid] = "%" + name
        return self.names[var.uid]


def format_program(program: Program) -> str:
    names = _Names()
    params = ", ".join(f"{names(p)}: {p.type}" for p in program.params)
    lines = [f"program {program.name}({params}) {{"]
    _format_bindings(program.region, names, lines, indent="  ")
    results = ", ".join(names(v) for v in program.region.results)
    lines.append(f"  return {results}")
    lines.append("}")
    return "\n".join(lines)


def format_region(region: Region) -> str:
    lines: list[str] = []
    _format_region(region, _Names(), lines, indent="")
    return "\n".join(lines)


def _format_region(region: Region, names: _Names, lines: list[str], indent: str):
    params = ", ".join(f"{names(p)}: {p.type}" for p in region.params)
    lines.append(f"{indent}{region.name}({params}):")
    _format_bindings(region, names, lines, indent + "  ")
    lines.append(f"{indent}  yield {', '.join(names(v) for v in region.results)}")


def _format_bindings(region: Region, names: _Names, lines: list[str], indent: str):
    for binding in region.bindings:
        text = indent + format_binding(binding, names)
        lines.append(f"{text:<{_COMMENT_COLUMN}}  # {binding.loc}" if binding.loc.line else text)
        for sub in binding.regions:
            _format_region(sub, names, lines, indent + "  ")


def format_binding(binding: Binding, names) -> str:
    op = ops.OPS[binding.op]
    args = [names(v) for v in binding.inputs]
    attrs = {k: v for k, v in binding.attrs.items() if k not in _HIDDEN_ATTRS or op.pretty is None}
    body = op.pretty(args, binding.attrs) if op.pretty else ops.default_pretty(binding.op)(args, attrs)
    outs = ", ".join(f"{names(v)}: {v.type}" for v in binding.outputs)
    return f"{outs} = {body}"

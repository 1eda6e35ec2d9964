"""Aligned text columns for the command line's reports (`egad rules check`, `egad rules stats`).

    print("\\n".join(text_table([("rule", "matches"), ("mul-one", "3")], right=(1,))))
"""
from __future__ import annotations


def text_table(rows, right=()) -> list[str]:
    """`rows` of strings, the first the header, as lines with each column padded to its
    widest cell; columns whose index is in `right` are right-aligned (numbers)."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) if k in right else cell.ljust(width)
                      for k, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]

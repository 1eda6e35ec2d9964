"""docs/ir.md keeps up with the op table; README snippets run (CONVENTIONS 9)."""
from __future__ import annotations

import pathlib
import re
import runpy

import pytest

from egad.ir.ops import OPS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_op_is_documented():
    text = (ROOT / "docs" / "ir.md").read_text()
    missing = [name for name in OPS if f"| `{name}` |" not in text]
    assert not missing, f"ops missing from docs/ir.md's table: {missing}"


DOCUMENTS = ["README.md", "docs/ad.md", "docs/function.md", "docs/lowering.md", "docs/optimizer.md", "docs/viz.md"]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_python_blocks_in_docs_run(document, tmp_path):
    text = (ROOT / document).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{document} has no python example"
    for k, block in enumerate(blocks):
        script = tmp_path / f"block_{k}.py"
        script.write_text(block)
        runpy.run_path(str(script), run_name="__main__")


def test_demo_matches_plain_numpy(capsys):
    from egad import demo_while as demo

    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "while" in out and "interpreter matches plain numpy" in out

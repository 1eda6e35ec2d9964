"""docs/ir.md keeps up with the op table; README snippets run (CONVENTIONS 9); the
walkthroughs (docs/rules.md) run block by block, shell commands included."""
from __future__ import annotations

import pathlib
import re
import runpy
import shlex

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


# --- walkthroughs: files, Python and `$ egad ...` commands, in order, in one directory -------------

WALKTHROUGHS = ["docs/rules.md"]
_BLOCK = re.compile(r"```(python|console)\n(.*?)```", flags=re.S)
_FILE_MARKER = re.compile(r"# file: (\S+)\n")


def _shape(line: str) -> str:
    """A printed line with its numbers and runs of spaces made uniform: timings vary."""
    return " ".join(re.sub(r"\d+(\.\d+)?", "#", line).split())


def run_console_block(block: str, capsys) -> None:
    """Each `$ egad ARGS` line runs `egad.cli.main(ARGS)`: its exit status must be 0, or
    N where the line ends in `# exits N`, and each line shown under it must be printed."""
    from egad import cli

    commands = re.split(r"^\$ ", block, flags=re.M)[1:]
    assert commands, f"a console block with no `$ egad` command: {block!r}"
    for command in commands:
        line, *shown = command.splitlines()
        line, _, status = line.partition("# exits")
        argv = shlex.split(line)
        assert argv[0] == "egad", f"only egad commands run in docs: {line!r}"
        capsys.readouterr()
        assert cli.main(argv[1:]) == int(status or 0), line
        printed = {_shape(out) for out in capsys.readouterr().out.splitlines()}
        missing = [out for out in shown if out.strip() and _shape(out) not in printed]
        assert not missing, f"`{line.strip()}` did not print {missing}"


@pytest.mark.parametrize("document", WALKTHROUGHS)
def test_walkthroughs_run_block_by_block(document, tmp_path, monkeypatch, capsys):
    """```python blocks that start with `# file: NAME` are written to NAME (the marker
    line left out), other python blocks run, ```console blocks run their commands."""
    monkeypatch.chdir(tmp_path)
    blocks = _BLOCK.findall((ROOT / document).read_text())
    assert blocks, f"{document} has no block"
    for k, (kind, block) in enumerate(blocks):
        marker = _FILE_MARKER.match(block)
        if kind == "console":
            run_console_block(block, capsys)
        elif marker:
            (tmp_path / marker.group(1)).write_text(block[marker.end():])
        else:
            script = tmp_path / f"block_{k}.py"
            script.write_text(block)
            runpy.run_path(str(script), run_name="__main__")

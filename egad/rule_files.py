"""Rule families named on the command line: a default family by name, or a
researcher's own Python file that declares families.

A family file is an ordinary module that declares its families with
`egad.rules.family` and adds rules to them, exactly as the files of rules/ do
(docs/rules.md walks through one):

    from egad.rules import family
    MINE = family("mine", __doc__)
    MINE.rewrites("tanh-is-odd", "tanh(-x) = -tanh(x)", rewrite(op.tanh(op.neg(x))).to(op.neg(op.tanh(x))))

    families = resolve(["algebra", "path/to/mine.py"])   # [algebra, mine]

A file is loaded once per process (a second `resolve` of it returns the same
families), since declaring a family or a rule name twice is an error.
"""
from __future__ import annotations

import pathlib

from .errors import RuleError, RuleFileError, message
from .source import run_user_module

_LOADED: dict[pathlib.Path, list] = {}


def resolve(names) -> list:
    """Family objects for `names`: family names (egad.rules.family_named), paths of
    Python files (each gives the families it declares) or Family objects; in order,
    without repeats."""
    families = []
    for name in names:
        if hasattr(name, "rules"):  # a Family already
            found = [name]
        else:
            found = load_families(name) if is_family_file(name) else [_named(name)]
        for family in found:
            if family not in families:
                families.append(family)
    return families


def load_families(path) -> list:
    """The families the Python file at `path` declares."""
    from . import rules

    path = pathlib.Path(path).resolve()
    if path in _LOADED:
        return _LOADED[path]
    if not path.is_file():
        raise RuleFileError(message(f"{path} is a folder, not a rule family file" if path.is_dir() else
                                    f"no rule family file at {path}",
                                    instead="pass the path of a .py file that declares a family, or a family name "
                                            f"({', '.join(f.name for f in rules.default())})"))
    before = {f.name for f in rules.families()}
    try:
        run_user_module(f"_egad_rule_file_{len(_LOADED)}_{path.stem}", path)
    except RuleError:
        raise  # it names the rule and its line already
    except SystemExit as stop:  # else `egad rules check` ended silently, with the file's status
        raise RuleFileError(message(f"loading the rule family file {path} exited (sys.exit({stop.code!r}))",
                                    where=str(path), instead="a rule family file declares families and rules; "
                                    "guard anything else with `if __name__ == \"__main__\":`")) from None
    except Exception as error:  # noqa: BLE001 - any failure of the user's file is reported as such
        raise RuleFileError(message(
            f"loading the rule family file {path} failed: {type(error).__name__}: {error}",
            where=_line_in(path, error),
            instead="fix the file (run it with python to see the traceback); family and rule names must be new")) \
            from error
    declared = [f for f in rules.families() if f.name not in before]
    if not declared:
        raise RuleFileError(message(f"{path} declares no rule family", where=str(path),
                                    instead='declare one with `MINE = egad.rules.family("mine", __doc__)` and add '
                                            "rules to it (docs/rules.md)"))
    empty = [f.name for f in declared if not f.rules]
    if empty:  # else `egad rules check` found "no counterexample" among no rules
        raise RuleFileError(message(f"{path} declares the families {empty} but no rules in them", where=str(path),
                                    instead="add rules with FAMILY.rewrites(name, why, ...) or @FAMILY.transformer "
                                            "(docs/rules.md)"))
    _LOADED[path] = declared
    return declared


def _line_in(path: pathlib.Path, error: Exception) -> str:
    """`path:line` of the last line of `path` that the error's traceback passes, else `path`."""
    line = getattr(error, "lineno", None) if isinstance(error, SyntaxError) else None
    traceback = error.__traceback__
    while traceback is not None:
        if pathlib.Path(traceback.tb_frame.f_code.co_filename).resolve() == path.resolve():
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return f"{path}:{line}" if line else str(path)


def is_family_file(name) -> bool:
    """Whether `name` stands for a file (a path, or a name ending in .py) rather than a family name."""
    text = str(name)
    return isinstance(name, pathlib.Path) or text.endswith(".py") or "/" in text or pathlib.Path(text).is_file()


def _named(name: str):
    from . import rules

    try:
        return rules.family_named(name)
    except KeyError:
        raise RuleFileError(message(f"no rule family named {name!r}",
                                    instead=f"name one of {', '.join(f.name for f in rules.families())}, "
                                            "or give the path of a .py file that declares one")) from None

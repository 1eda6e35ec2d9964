"""`egad rules list`: every default family and rule, with its file:line and why."""
from __future__ import annotations

import re

from egad import cli, rules


def test_rules_list_names_every_rule_where_it_is_written_and_why(capsys):
    assert cli.main(["rules", "list"]) == 0
    out = capsys.readouterr().out
    for family in rules.default():
        assert re.search(rf"^{family.name}\b", out, flags=re.M), family.name
        for rule in family.rules:
            line = next(line for line in out.splitlines() if line.split()[:1] == [rule.name])
            assert f"rules/{family.name}.py:{rule.site.line}" in line and rule.why in line
    assert "checkpoint (planned:" in out

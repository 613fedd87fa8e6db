"""docs/metrics.md lists every declared metric with the registry's unit and denominator."""

from __future__ import annotations

from pathlib import Path

from shopsimrl.metrics.names import REGISTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _table_rows() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return rows


def test_docs_table_matches_the_registry():
    rows = _table_rows()
    expected = {s.name: (s.unit, s.denominator, s.direction.value) for s in REGISTRY.values()}
    assert rows == expected


def test_docs_list_every_alert_rule():
    from shopsimrl.metrics.alerts import AlertRule

    text = DOC.read_text(encoding="utf-8")
    assert all(f"| `{rule.value}` |" in text for rule in AlertRule)

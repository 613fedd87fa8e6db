"""Skillbank loading: the shipped example loads; every problem of a bad file is reported together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.skills.skillbank import load_skillbank, validate_skillbank

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "skillbank.example.json"


def _chunk(chunk_id: str, text: str = "Do the thing.", **extra):
    return {"logical_chunk_id": chunk_id, "text": text, "provenance": {"source": "seed"}, **extra}


def test_shipped_example_loads_in_order_with_one_inactive_chunk():
    bank = load_skillbank(EXAMPLE)
    assert bank.schema_version == 1
    assert [c.logical_chunk_id for c in bank.chunks] == [
        "read-the-constraints",
        "search-with-filters",
        "verify-before-cart",
        "select-every-option",
        "check-cart-then-checkout",
        "one-call-per-turn",
    ]
    assert bank.active_ids == [
        "read-the-constraints",
        "search-with-filters",
        "verify-before-cart",
        "select-every-option",
        "check-cart-then-checkout",
    ]


def test_texts_for_follows_skillbank_order_not_mask_order():
    bank = validate_skillbank({"schema_version": 1, "chunks": [_chunk("a", "A."), _chunk("b", "B."), _chunk("c", "C.")]})
    assert bank.texts_for(["c", "a"]) == ["A.", "C."]
    assert bank.texts_for([]) == []


def test_texts_for_rejects_inactive_or_unknown_ids():
    bank = validate_skillbank({"schema_version": 1, "chunks": [_chunk("a"), _chunk("b", active=False)]})
    with pytest.raises(KeyError, match=r"mask names chunks that are not active in the skillbank: \['b', 'zz'\]"):
        bank.texts_for(["b", "zz"])


def test_every_problem_is_reported_at_once(tmp_path):
    raw = {
        "schema_version": 2,
        "extra": 1,
        "chunks": [
            _chunk("ok-1"),
            {"logical_chunk_id": "bad id!", "text": "", "provenance": [], "active": "yes", "colour": "red"},
            _chunk("ok-1"),
            {"text": "x" * 4001, "provenance": {"round": 1}},
            "not an object",
        ],
    }
    path = tmp_path / "bank.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as info:
        load_skillbank(path)
    assert info.value.source == str(path)
    assert info.value.problems == [
        "unknown top-level key 'extra'",
        "schema_version: unsupported value 2 (expected 1)",
        "chunks[1]: unknown key 'colour'",
        "chunks[1].logical_chunk_id: 'bad id!' is not a valid id (1-64 characters: letters, digits, '_', '.', '-'; starting with a letter or digit)",
        "chunks[1].text: expected a non-empty string",
        "chunks[1].provenance: expected an object, got list",
        "chunks[1].active: expected true or false, got 'yes'",
        "chunks[2].logical_chunk_id: duplicate id 'ok-1' (first used by chunks[0])",
        "chunks[3].logical_chunk_id: missing",
        "chunks[3].text: 4001 characters, more than the limit of 4000",
        "chunks[3].provenance.source: missing or not a non-empty string",
        "chunks[4]: expected an object, got str",
    ]
    assert str(info.value).startswith(f"invalid configuration in {path} (12 problem(s)):\n  - unknown top-level key")


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_skillbank(tmp_path / "missing.json")
    assert info.value.problems == ["cannot read file: No such file or directory"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1,\n "chunks": [}')
    with pytest.raises(ConfigError) as info:
        load_skillbank(bad)
    assert info.value.problems == ["not valid JSON: Expecting value at line 2 column 13"]


def test_missing_top_level_fields():
    with pytest.raises(ConfigError) as info:
        validate_skillbank({}, "inline")
    assert info.value.problems == ["schema_version: missing", "chunks: missing"]
    with pytest.raises(ConfigError) as info:
        validate_skillbank([], "inline")
    assert info.value.problems == ["top level: expected a JSON object, got list"]

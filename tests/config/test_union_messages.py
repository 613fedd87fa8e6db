"""A value no branch of a union field accepts is one line without pydantic's branch names (config/files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.gate.config import load_gate_config
from shopsimrl.round.config import load_round_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("zero", "design.replicates: Input should be a valid integer or 'power' (got 'zero')"),
        (0, "design.replicates: Input should be greater than or equal to 1 or 'power' (got 0)"),
        (1.5, "design.replicates: Input should be a valid integer or 'power' (got 1.5)"),
    ],
)
def test_a_gate_config_value_no_branch_accepts_is_one_line(value, problem) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_gate_config(REPO / "configs/local/gate.yaml", {"design.replicates": value})
    assert excinfo.value.problems == [problem]


def test_the_round_reports_its_gate_section_the_same_way() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_round_config(REPO / "configs/local/demo_round.yaml", {"gate.design.replicates": "zero"})
    assert excinfo.value.problems == ["gate.design.replicates: Input should be a valid integer or 'power' (got 'zero')"]


def test_a_value_of_one_branchs_type_reports_that_branchs_own_error_beside_other_problems() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_eval_config(None, {"checkpoint": "demo", "mask": ["a", 3], "tasks": "many"})
    assert excinfo.value.problems == [
        "tasks: Input should be a valid integer, unable to parse string as an integer",
        "mask.1: Input should be a valid string",
    ]
    with pytest.raises(ConfigError) as excinfo:
        load_eval_config(None, {"checkpoint": "demo", "mask": 5})
    assert excinfo.value.problems == ["mask: Input should be 'full' or 'none' or a valid list (got 5)"]

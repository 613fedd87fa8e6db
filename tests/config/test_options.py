"""Plugin options: one typed source of defaults, every problem reported at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from shopsimrl.config import QSchedule, load_options_file, options_from_args
from shopsimrl.errors import ConfigError


def test_every_problem_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "shopsim:\n  run_dir: runs/x/train\n  q: {start: 1.5}\n  max_turns: 0\n  rho: {c1: 2.0}\n  typo_key: 1\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as excinfo:
        load_options_file(path)
    problems = excinfo.value.problems
    assert len(problems) == 4
    assert "shopsim.q.start: Input should be less than or equal to 1" in problems
    assert "shopsim.max_turns: Input should be greater than or equal to 1" in problems
    assert "shopsim.typo_key: Extra inputs are not permitted" in problems
    assert any(p.startswith("shopsim.rho: Value error, rho['c1']=2.0 is outside [0, 1]") for p in problems)
    assert str(excinfo.value).startswith(f"invalid configuration in {path} (4 problem(s)):")


def test_missing_section_and_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    path.write_text("other: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="missing top-level key 'shopsim'"):
        load_options_file(path)
    path.write_text("shopsim: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_options_file(path)


def test_options_from_args_validates_once_and_caches() -> None:
    args = SimpleNamespace(shopsim={"run_dir": "runs/g/train", "rho": {"c1": 0.25}})
    options = options_from_args(args)
    assert options.rho_for("c1") == 0.25
    assert options.rho_for("other") == options.default_rho == 0.5
    assert options_from_args(args) is options


def test_args_without_section_explain_the_fix() -> None:
    with pytest.raises(ConfigError, match="pass --custom-config-path"):
        options_from_args(SimpleNamespace())


def test_q_schedule_linear() -> None:
    schedule = QSchedule(start=0.5, end=0.1, steps=4)
    assert [round(schedule.at(s), 6) for s in (0, 2, 4, 10)] == [0.5, 0.3, 0.1, 0.1]
    assert QSchedule(start=0.3).at(99) == 0.3

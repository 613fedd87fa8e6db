"""A key given twice is refused by every config kind's loader, with both lines.

YAML keeps the last value of a key given twice without a word, so `design: {tasks: 20, tasks: 8}`
would run another gate than the one written first. Each loader reads through config/files.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shopsimrl.analyst.config import load_analysis_config, load_round_options
from shopsimrl.config import load_options_file
from shopsimrl.config.round_shop import round_catalog
from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.gate.config import load_gate_config
from shopsimrl.local.config import load_run_config
from shopsimrl.round.config import load_round_config

REPO = Path(__file__).resolve().parents[2]

# (config kind, its loader, a shipped file, a line of it that is given a second time just below)
CASES: list[tuple[str, Callable[[Path], Any], str, str]] = [
    ("gate", load_gate_config, "configs/local/gate.yaml", "  tasks: 20"),
    ("analysis", load_analysis_config, "configs/local/analysis.yaml", "  attempts: 1"),
    ("eval", load_eval_config, "configs/local/eval.yaml", "tasks: 40"),
    ("run", load_run_config, "configs/local/smoke.yaml", "  num_rollout: 1"),
    ("round", load_round_config, "configs/local/demo_round.yaml", "    tasks: 20"),
    ("shopsim options", load_options_file, "configs/shopsim.smoke.yaml", "  max_turns: 12"),
]


def _twice(tmp_path: Path, shipped: str, line: str, key_value: str | None = None) -> tuple[Path, list[str]]:
    """The shipped file with `line` given twice (the second time with another value), and the expected problem."""
    lines = (REPO / shipped).read_text(encoding="utf-8").splitlines()
    index = next(i for i, text in enumerate(lines) if text.split("#")[0].rstrip() == line)
    indent, key = line[: len(line) - len(line.lstrip())], line.strip().split(":")[0]
    lines.insert(index + 1, f"{indent}{key}: {key_value or '2'}")
    path = tmp_path / Path(shipped).name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, [f"line {index + 2}: key '{key}' is given twice (first at line {index + 1})"]


@pytest.mark.parametrize(("kind", "loader", "shipped", "line"), CASES, ids=[case[0] for case in CASES])
def test_a_key_given_twice_is_refused_by_every_config_kind(tmp_path: Path, kind, loader, shipped, line) -> None:
    path, expected = _twice(tmp_path, shipped, line)
    with pytest.raises(ConfigError) as excinfo:
        loader(path)
    assert (excinfo.value.source, excinfo.value.problems) == (str(path), expected)


def test_the_analysts_round_options_file_refuses_a_key_given_twice(tmp_path: Path) -> None:
    shopsim, expected = _twice(tmp_path, "configs/local/smoke.yaml", "  max_turns: 3")
    config = load_analysis_config(REPO / "configs/local/analysis.yaml", {"shopsim_config": str(shopsim)})
    with pytest.raises(ConfigError) as excinfo:
        load_round_options(config)
    assert (excinfo.value.source, excinfo.value.problems) == (str(shopsim), expected)


def test_a_rounds_recorded_catalog_refuses_a_key_given_twice(tmp_path: Path) -> None:
    (tmp_path / "r-round-000").mkdir()
    record = tmp_path / "r-round-000" / "train_config.yaml"
    record.write_text("shopsim:\n  catalog: {seed: 0, num_products: 1000}\n  catalog: {seed: 1}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as excinfo:
        round_catalog(tmp_path, "r-round-000")
    assert (excinfo.value.source, excinfo.value.problems) == (
        str(record), ["line 3: key 'catalog' is given twice (first at line 2)"]
    )

"""Config files that are not what they claim: not UTF-8, a directory, a key given twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shopsimrl.config import load_options_file
from shopsimrl.errors import ConfigError
from shopsimrl.local.commands import train
from shopsimrl.local.config import load_run_config
from shopsimrl.rollout.commands import tasks
from shopsimrl.skills.skillbank import load_skillbank

REPO = Path(__file__).resolve().parents[2]
READERS = [load_run_config, load_options_file, load_skillbank]


@pytest.mark.parametrize("reader", READERS)
def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path, reader) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"shopsim:\n  max_turns: 3 # \xff\xfe latin-1 comment\n")
    with pytest.raises(ConfigError) as excinfo:
        reader(path)
    assert excinfo.value.problems == ["not UTF-8 text: byte 0xff at line 2 (offset 26)"]


@pytest.mark.parametrize("reader", READERS)
def test_a_directory_given_as_config_is_a_config_error(tmp_path: Path, reader) -> None:
    with pytest.raises(ConfigError) as excinfo:
        reader(tmp_path)
    assert (excinfo.value.source, excinfo.value.problems) == (str(tmp_path), ["is a directory, not a config file"])


TWICE = """\
schema_version: 1
run: {group: a, runs_root: runs}
driver:
  num_rollout: 1
  rollout_batch_size: 1
  n_samples_per_prompt: 2
  global_batch_size: 2
  lr: 1.0e-6
  lr: 0.5
shopsim: {max_turns: 3}
run: {group: b}
"""


def test_a_key_given_twice_in_yaml_is_a_config_error_with_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(TWICE)
    with pytest.raises(ConfigError) as excinfo:
        load_run_config(path)
    assert excinfo.value.problems == [
        "line 9: key 'lr' is given twice (first at line 8)",
        "line 11: key 'run' is given twice (first at line 2)",
    ]
    path.write_text("shopsim:\n  max_turns: 3\n  max_turns: 4\n")
    with pytest.raises(ConfigError, match=r"line 3: key 'max_turns' is given twice \(first at line 2\)"):
        load_options_file(path)


def test_yaml_merge_keys_still_override() -> None:
    from shopsimrl.config.files import parse_yaml

    assert parse_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n", "t") == {"base": {"x": 1}, "d": {"x": 2}}


def test_a_key_given_twice_in_a_skillbank_json_is_a_config_error(tmp_path: Path) -> None:
    bank = json.loads((REPO / "configs/skillbank.example.json").read_text())
    text = json.dumps(bank)
    path = tmp_path / "bank.json"
    path.write_text(text.replace('"schema_version": 1', '"schema_version": 1, "schema_version": 1', 1))
    with pytest.raises(ConfigError) as excinfo:
        load_skillbank(path)
    assert excinfo.value.problems == ["key 'schema_version' is given twice in one object"]


def test_cli_reports_each_bad_config_in_one_error_and_exits_1(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(train, ["run", "--config", str(tmp_path)])
    assert result.exit_code == 1
    assert f"Error: invalid configuration in {tmp_path} (1 problem(s)):\n  - is a directory, not a config file\n" == result.output
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x9c")
    result = runner.invoke(tasks, ["export", "--config", str(binary), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1
    assert "not UTF-8 text: byte 0x9c at line 1 (offset 1)" in result.output
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump(yaml.safe_load((REPO / "configs/local/smoke.yaml").read_text())) + "driver: {}\n")
    result = runner.invoke(train, ["smoke", "--config", str(twice)])
    assert result.exit_code == 1
    assert "key 'driver' is given twice" in result.output


def test_a_set_value_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(TWICE.replace("  lr: 0.5\n", "").replace("run: {group: b}\n", ""))
    sets = ["--set", f"run.runs_root={tmp_path}", "--set", "shopsim.catalog={seed: 1, seed: 2}"]
    result = CliRunner().invoke(train, ["run", "--config", str(config), *sets])
    assert result.exit_code == 1
    assert "Error: invalid configuration in --set shopsim.catalog={seed: 1, seed: 2} (1 problem(s)):" in result.output
    assert "line 1: key 'seed' is given twice (first at line 1)" in result.output


def test_a_config_problem_is_one_line_without_pydantics_prefix_or_url(tmp_path: Path) -> None:
    from shopsimrl.evaluation.config import load_eval_config

    path = tmp_path / "eval.yaml"
    path.write_text("schema_version: 1\ncheckpoint: demo\nname: a/b\ntasks: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as excinfo:
        load_eval_config(path)
    assert sorted(excinfo.value.problems) == [
        "name: 'a/b': letters, digits, '.', '_' and '-' only (it names a directory)",
        "tasks: Input should be greater than or equal to 1",
    ]
    assert "errors.pydantic.dev" not in str(excinfo.value)


def test_an_invalid_candidate_pool_is_one_line_per_problem_not_pydantics_text(tmp_path: Path) -> None:
    from shopsimrl.gate.config import GateConfig
    from shopsimrl.gate.stage import run_gate

    pool = tmp_path / "candidate_pool.json"
    pool.write_text(json.dumps({"round": "round-000", "interventions": [], "surprise": 1}), encoding="utf-8")
    config = GateConfig.model_validate({
        "round": "round-000", "runs_root": str(tmp_path / "runs"),
        "inputs": {"checkpoint": str(tmp_path), "candidate_pool": str(pool),
                   "skillbank": str(REPO / "configs" / "skillbank.example.json")}})  # fmt: skip
    with pytest.raises(ConfigError) as excinfo:
        run_gate(config, echo=lambda _: None)
    pool_problems = [p for p in excinfo.value.problems if p.startswith("inputs.candidate_pool")]
    assert pool_problems == [
        f"inputs.candidate_pool: {pool} is not a valid candidate pool: skillbank_sha256: Field required",
        f"inputs.candidate_pool: {pool} is not a valid candidate pool: surprise: Extra inputs are not permitted",
    ]
    assert all("\n" not in p and "errors.pydantic.dev" not in p for p in excinfo.value.problems)

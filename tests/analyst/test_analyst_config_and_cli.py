"""Shipped analysis configs, config errors, the `training` group (and its `train` alias), `make analyze`."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from analyst_helpers import ROOT, write_configs
from click.testing import CliRunner

from shopsimrl.analyst.config import AnalysisConfig, load_analysis_config, load_round_options
from shopsimrl.cli import main
from shopsimrl.errors import ConfigError

EXAMPLE = ROOT / "configs" / "archive" / "trace2skill_online_analysis.example.yaml"
PRODUCTION = ROOT / "configs" / "trace2skill_online_analysis.yaml"
DEMO = ROOT / "configs" / "local" / "analysis.yaml"


@pytest.mark.parametrize("path", [EXAMPLE, DEMO], ids=["example", "demo"])
def test_shipped_configs_load_with_their_round_options(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # paths inside are relative to the repository root, as make runs them
    config = load_analysis_config(path)
    assert load_round_options(config).catalog.num_products > 0


def test_the_production_config_takes_its_round_from_overrides(monkeypatch):
    """What the `analyze` service sets (compose.yaml; tests/ops/test_compose_services.py runs its command)."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as error:
        load_analysis_config(PRODUCTION)
    assert error.value.problems == ["run: Field required", "shopsim_config: Field required"]
    config = load_analysis_config(PRODUCTION, {"run.group": "qwen35-4b-round-001",
                                               "shopsim_config": "configs/shopsim.formal.yaml",
                                               "trial.tokenizer": "checkpoints/qwen35-4b-round-001/hf/rollout-199"})
    assert (config.run.group, config.train_dir) == ("qwen35-4b-round-001", Path("runs/qwen35-4b-round-001/train"))
    assert (config.lessons.backend.value, config.trial.generator.value) == ("llm", "sglang")
    assert load_round_options(config).catalog.num_products > 0


def test_the_example_comments_every_key_and_lists_every_field():
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    keyed = [line for line in lines if re.match(r"^\s*[a-z_]+:", line)]
    uncommented = [line for line in keyed if "#" not in line and not line.rstrip().endswith(":")]
    assert uncommented == []

    def fields(model, prefix=""):
        for name, info in model.model_fields.items():
            sub = info.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                yield from fields(sub, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    def keys(node, prefix=""):
        for name, value in node.items():
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    assert sorted(keys(yaml.safe_load(EXAMPLE.read_text()))) == sorted(fields(AnalysisConfig))


def test_every_problem_of_a_config_is_reported_at_once(tmp_path):
    path = write_configs(tmp_path, trial={"attempts": 1, "min_successes": 2, "generator": "sglang"},
                         lessons={"backend": "oracle"}, extra=1)  # fmt: skip
    with pytest.raises(ConfigError) as error:
        load_analysis_config(path)
    assert error.value.problems == [
        "lessons.backend: Input should be 'rules' or 'llm'",
        "extra: Extra inputs are not permitted",
    ]
    path = write_configs(tmp_path, trial={"attempts": 1, "min_successes": 2, "generator": "sglang"})
    with pytest.raises(ConfigError) as error:
        load_analysis_config(path)
    assert error.value.problems == [
        "trial.min_successes: 2 is more than trial.attempts (1)",
        "trial: generator sglang needs trial.sglang_url and trial.tokenizer",
    ]


def test_training_is_the_group_and_train_still_works():
    runner = CliRunner()
    listed = runner.invoke(main, ["--help"]).output
    assert re.search(r"^\s+training\s", listed, re.M) and not re.search(r"^\s+train\s", listed, re.M)
    for group in ("training", "train"):
        result = runner.invoke(main, [group, "--help"])
        assert result.exit_code == 0
        assert all(name in result.output for name in ("analyze", "analyze-sidecar", "demo", "run", "smoke"))


def test_a_w_and_b_group_of_another_round_is_refused(tmp_path):
    path = write_configs(tmp_path)
    (tmp_path / "runs" / "round-000" / "train").mkdir(parents=True)
    result = CliRunner().invoke(main, ["training", "analyze", str(path), "--wandb", "--wandb-group", "round-001",
                                       "--wandb-mode", "offline", "--wandb-dir", str(tmp_path / "wandb")])  # fmt: skip
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: W&B group 'round-001' (--wandb-group / WANDB_GROUP) is not the round 'round-000' of the config "
        "(run.group); use the same name for both"
    )


def test_a_w_and_b_group_from_the_environment_yields_to_the_round(tmp_path, wandb_offline):
    path = write_configs(tmp_path)
    result = CliRunner().invoke(main, ["training", "analyze", str(path), "--wandb"],
                                env={"WANDB_GROUP": "qwen35-4b-round-000"})  # fmt: skip
    # The note comes first; the stage then stops at the missing training directory (no W&B run).
    assert result.output.splitlines()[0] == (
        "note: WANDB_GROUP='qwen35-4b-round-000' is not the round 'round-000' of the config; "
        "the analysis run goes into 'round-000'"
    )
    assert "no training stage directory" in result.output.splitlines()[-1]


def test_set_gives_the_config_the_round_of_the_environment(tmp_path, wandb_offline):
    """`--set run.group=...` (the analyze service's) makes WANDB_GROUP's round the config's: no note."""
    path = write_configs(tmp_path)
    result = CliRunner().invoke(main, ["training", "analyze", str(path), "--wandb", "--set", "run.group=round-001"],
                                env={"WANDB_GROUP": "round-001"})  # fmt: skip
    assert "is not the round" not in result.output
    assert result.output.splitlines()[-1] == (
        f"Error: {tmp_path / 'runs' / 'round-001' / 'train'}: no training stage directory; run the round's training first")
    bad = CliRunner().invoke(main, ["training", "analyze", str(path), "--set", "run.group"])
    assert bad.exit_code == 2
    assert "'run.group' is not KEY=VALUE (e.g. run.group=qwen35-4b-round-001)" in bad.output


def test_a_train_dir_glob_names_the_newest_run_and_analysis_sits_beside_it(tmp_path):
    for name in ("demo-000-20260101T000000.1Z", "demo-000-20260102T000000.1Z", "demo-000-20251231T000000.1Z"):
        (tmp_path / "runs" / name / "train").mkdir(parents=True)
    path = write_configs(tmp_path, group="demo-000")
    raw = yaml.safe_load(path.read_text())
    raw["run"]["train_dir"] = str(tmp_path / "runs" / "demo-000*" / "train")
    path.write_text(yaml.safe_dump(raw))
    config = load_analysis_config(path)
    assert config.train_dir == tmp_path / "runs" / "demo-000-20260102T000000.1Z" / "train"
    assert config.analysis_dir == tmp_path / "runs" / "demo-000-20260102T000000.1Z" / "analysis"


def _make(*args: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("RUNNER", "WANDB_GROUP", "MAKEFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def test_make_analyze_on_both_runners():
    cli = ".venv/bin/python -m shopsimrl.cli training analyze configs/local/analysis.yaml --wandb"
    assert _make("analyze", "RUNNER=local") == cli
    assert _make("analyze", "RUNNER=local", "ANALYZE_CONFIG=c.yaml").endswith("training analyze c.yaml --wandb")
    assert _make("analyze").endswith("run --rm analyze")

"""Every file under configs/ loads with the loader that reads it, and none is left unclaimed.

A new config file needs a row in LOADERS (torchtune's tests/recipes/test_configs.py does the same
for its recipes). The shell files of the slime launch (`configs/slime/*.env`, `models/*.sh`) are not
YAML: their loader is bash, as the launcher sources them, so they are sourced here the same way
(tests/ops/test_static.py runs shellcheck on them).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from shopsimrl.analyst.config import load_analysis_config
from shopsimrl.config import load_options_file
from shopsimrl.config.files import load_yaml_file, parse_json, read_config_text
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.gate.config import load_gate_config
from shopsimrl.local.config import load_round_train_config, load_run_config
from shopsimrl.round.config import load_round_config
from shopsimrl.skills.candidates import CandidatePool
from shopsimrl.skills.skillbank import load_skillbank

REPO = Path(__file__).resolve().parents[2]


def _candidate_pool(path: Path) -> CandidatePool:
    return CandidatePool.model_validate(parse_json(read_config_text(path), str(path)))


def _slime_shell(path: Path) -> str:
    """Source the file after common.env, as scripts/run_shopsimrl_slime.sh does; its stderr must be empty."""
    script = 'set -e; source configs/slime/common.env; source "$1"'
    result = subprocess.run(["bash", "-c", script, "bash", str(path)], cwd=REPO, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"}, timeout=30, check=False)  # fmt: skip
    assert (result.returncode, result.stderr) == (0, ""), f"{path}: {result.stderr}"
    return result.stdout


def _slime_roles(path: Path) -> list[str]:
    """slime's `--megatron-config-path` file: parsed strictly (duplicate keys refused); every entry names
    a role and its overrides (slime's own parse_megatron_role_args reads it in tests/ops/test_slime_ppo.py)."""
    entries = load_yaml_file(path)["megatron"]
    assert all({"name", "role", "overrides"} <= set(entry) for entry in entries), path
    return [entry["role"] for entry in entries]


# What the compose services set on the production configs, which name no round (compose.yaml).
GROUP = "qwen35-4b-round-000"
SERVICE_SETS = {
    "gate": {"round": GROUP, "inputs.checkpoint": "checkpoints/hf",
             "inputs.candidate_pool": f"runs/{GROUP}/analysis/candidate_pool.json",
             "inputs.proposal_ledger": f"runs/{GROUP}/analysis/proposal_ledger.jsonl"},
    "analysis": {"run.group": GROUP, "shopsim_config": f"runs/{GROUP}/train/shopsim_options.yaml",
                 "trial.tokenizer": "checkpoints/hf"},
    "eval": {"checkpoint": "checkpoints/hf", "group": GROUP},
}  # fmt: skip

# glob (relative to configs/, fnmatch: `*` crosses `/`) -> the loader that reads such a file; first match wins
LOADERS: dict[str, Callable[[Path], Any]] = {
    "local/demo_round.yaml": lambda path: (load_round_config(path), load_round_train_config(path)),  # training demo
    "local/*round.yaml": load_round_config,
    "local/*rounds.yaml": load_round_config,  # the learning profile's chain
    "round.yaml": load_round_config,
    "local/smoke.yaml": load_run_config,
    "local/smoke_ppo.yaml": load_run_config,
    "local/train.yaml": load_run_config,
    "local/learning_run.yaml": load_run_config,
    "local/gate.yaml": load_gate_config,
    "archive/trace2skill_online_gate.example.yaml": load_gate_config,
    "trace2skill_online_gate.yaml": lambda path: load_gate_config(path, SERVICE_SETS["gate"]),
    "local/analysis.yaml": load_analysis_config,
    "archive/trace2skill_online_analysis.example.yaml": load_analysis_config,
    "trace2skill_online_analysis.yaml": lambda path: load_analysis_config(path, SERVICE_SETS["analysis"]),
    "eval.yaml": lambda path: load_eval_config(path, SERVICE_SETS["eval"]),
    "local/eval.yaml": load_eval_config,
    "shopsim.*.yaml": load_options_file,
    "skillbank*.json": load_skillbank,
    "local/gate_candidate_pool.json": _candidate_pool,
    "slime/*.env": _slime_shell,
    "slime/ppo_roles.yaml": _slime_roles,
    "slime/models/*.sh": _slime_shell,
}

SHIPPED = sorted(p.relative_to(REPO / "configs").as_posix() for p in (REPO / "configs").rglob("*") if p.is_file())


def _loader(name: str) -> Callable[[Path], Any] | None:
    return next((loader for pattern, loader in LOADERS.items() if fnmatch(name, pattern)), None)


def test_every_shipped_config_file_has_a_loader() -> None:
    assert [name for name in SHIPPED if _loader(name) is None] == []


def test_every_loader_row_claims_a_shipped_file() -> None:
    assert [pattern for pattern in LOADERS if not any(fnmatch(name, pattern) for name in SHIPPED)] == []


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_config_file_loads(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the files name each other relative to the checkout, as the commands run
    loader = _loader(name)
    assert loader is not None, f"configs/{name}: no loader claims it (add a row to LOADERS)"
    loader(Path("configs") / name)

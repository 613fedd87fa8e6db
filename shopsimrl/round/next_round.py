"""The next round's inputs: `runs/<group>/next_round.json` and `runs/<group>/next_round.yaml`.

The next round continues this one, it does not repeat it. Its config is this round's with:
- the next group (`...-round-000` -> `...-round-001`), hence the next index and new seeds
  (seeds.py derives them from `round.seed` and the index; none is copied);
- this round's final checkpoint (and its hash) as `round.start_checkpoint`, and on the docker
  backend slime's save directory as `round.start_load` (the launcher's START_LOAD);
- the gate's `selected_skillbank.json` as the training skillbank;
- the gate's ledger added to the Analyst's ledger history (a rejected proposal stays rejected);
- `train.warm_start.enabled: false`: the supervised warm start belongs to the first round (a later
  round that wants one says so explicitly), so round N+1's first optimizer step is a GRPO step;
- `tracking:` = the W&B settings this round ran with, so the printed command logs as this one did.

`next_round.json` says what carried over and what changed. The config is validated before either
file is written, and both are written atomically.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.round.config import RoundConfig, next_group, round_config_from_mapping
from shopsimrl.round.manifest import tracking_record, warm_starts
from shopsimrl.round.state import RoundState
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import atomic_write_json, atomic_write_text, file_sha256
from shopsimrl.storage.layout import NEXT_ROUND_CONFIG, NEXT_ROUND_JSON, PROPOSAL_LEDGER_FILE
from shopsimrl.tracking import WandbSettings

NEXT_ROUND_SCHEMA_VERSION = 2
CLI = "python -m shopsimrl.cli"


@dataclass(frozen=True)
class NextRound:
    group: str
    config_path: Path
    manifest_path: Path
    skillbank: Path
    skillbank_sha256: str
    checkpoint: Path
    checkpoint_sha256: str
    backend: str = "local"
    trainer: str = "local"

    @property
    def command(self) -> str:
        cpu = " CPU=1" if self.backend == "docker" and self.trainer == "local" else ""  # the CPU services
        return f"make round RUNNER={self.backend}{cpu} ROUND_CONFIG={self.config_path}"

    @property
    def cli_command(self) -> str:
        return f"{CLI} training round {self.config_path}"


def next_round_mapping(config: RoundConfig, state: RoundState, settings: WandbSettings,
                       tracking: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The next round's config as a mapping (not yet validated). `tracking`: the W&B settings this round
    ran with (its manifest's); default: `settings`."""
    train, gate = state.record("train"), state.record("gate")
    skillbank = gate["outputs"]["selected_skillbank"]
    raw = copy.deepcopy(config.model_dump(mode="json", exclude_none=True))
    raw["round"].update(group=next_group(config.group), start_checkpoint=train["outputs"]["checkpoint"],
                        start_checkpoint_sha256=train["checkpoint_sha256"])  # fmt: skip
    if train.get("save_dir"):
        raw["round"]["start_load"] = train["save_dir"]
    raw["train"].setdefault("shopsim", {})["skillbank"] = skillbank
    if config.trainer == "local":
        raw["train"].setdefault("warm_start", {})["enabled"] = False
    ledger = str(Path(skillbank).parent / PROPOSAL_LEDGER_FILE)
    history = raw["analysis"].setdefault("ledger", {}).setdefault("history", [])
    if ledger not in history:
        history.append(ledger)
    record = tracking or tracking_record(settings)
    raw["tracking"] = {key: record[key] for key in ("enabled", "mode", "project", "entity", "dir") if record.get(key) is not None}
    return raw


def write_next_round(config: RoundConfig, state: RoundState, settings: WandbSettings,
                     tracking: dict[str, Any] | None = None) -> NextRound:  # fmt: skip
    train = state.record("train")
    skillbank = Path(state.record("gate")["outputs"]["selected_skillbank"])
    load_skillbank(skillbank)  # the gate wrote it; refuse to hand on a file the next training cannot read
    raw = next_round_mapping(config, state, settings, tracking)
    config_path = config.round_dir / NEXT_ROUND_CONFIG
    following = round_config_from_mapping(raw, str(config_path))  # ConfigError before anything is written
    result = NextRound(
        group=following.group,
        config_path=config_path,
        manifest_path=config.round_dir / NEXT_ROUND_JSON,
        skillbank=skillbank,
        skillbank_sha256=file_sha256(skillbank),
        checkpoint=Path(train["outputs"]["checkpoint"]),
        checkpoint_sha256=train["checkpoint_sha256"],
        backend=config.backend,
        trainer=config.trainer,
    )
    old_skillbank = config.shopsim().skillbank or ""
    changed = {
        "group": [config.group, following.group],
        "seeds": [config.seeds.as_dict(), following.seeds.as_dict()],
        "start_checkpoint": [config.round.start_checkpoint, str(result.checkpoint)],
        "skillbank": [old_skillbank, str(skillbank)],
        "warm_start": [warm_starts(config), warm_starts(following)],
    }
    carried = {"base_seed": config.round.seed, "backend": config.backend, "tracking": raw["tracking"],
               "analysis_ledger_history": raw["analysis"]["ledger"]["history"]}  # fmt: skip
    header = f"# The next round after {config.group}, written by `shopsimrl training round`. Start it with:\n#   {result.command}\n"
    atomic_write_text(config_path, header + yaml.safe_dump(raw, sort_keys=False))
    atomic_write_json(result.manifest_path, {
        "schema_version": NEXT_ROUND_SCHEMA_VERSION,
        "round": config.group,
        "next_round": following.group,
        "config": str(config_path),
        "skillbank": str(skillbank),
        "skillbank_sha256": result.skillbank_sha256,
        "skillbank_unchanged": file_sha256(old_skillbank) == result.skillbank_sha256 if old_skillbank else False,
        "start_checkpoint": str(result.checkpoint),
        "start_checkpoint_sha256": result.checkpoint_sha256,
        "start_load": raw["round"].get("start_load"),
        "seeds": following.seeds.as_dict(),
        "tracking": raw["tracking"],
        "changed": {key: {"from": old, "to": new} for key, (old, new) in changed.items() if old != new},
        "carried_over": carried,
        "command": result.command,
        "cli_command": result.cli_command,
    })  # fmt: skip
    return result

"""The next round's inputs: `runs/<group>/next_round.json` and `runs/<group>/next_round.yaml`.

The next round is this round's config with the next group (`...-round-000` -> `...-round-001`),
the gate's `selected_skillbank.json` as the training skillbank, this round's final checkpoint (and
its hash) as `round.start_checkpoint`, and the gate's ledger added to the Analyst's ledger history
(a rejected proposal stays rejected). The config is validated before either file is written, and
both are written atomically.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from shopsimrl.rollout.skillbank import load_skillbank
from shopsimrl.round.config import RoundConfig, next_group, round_config_from_mapping
from shopsimrl.round.state import RoundState
from shopsimrl.storage import atomic_write_json, atomic_write_text

NEXT_ROUND_JSON = "next_round.json"
NEXT_ROUND_CONFIG = "next_round.yaml"
NEXT_ROUND_SCHEMA_VERSION = 1
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

    @property
    def command(self) -> str:
        return f"make round RUNNER=local ROUND_CONFIG={self.config_path}"

    @property
    def cli_command(self) -> str:
        return f"{CLI} training round {self.config_path}"


def write_next_round(config: RoundConfig, state: RoundState) -> NextRound:
    train, gate = state.record("train"), state.record("gate")
    skillbank = Path(gate["outputs"]["selected_skillbank"])
    load_skillbank(skillbank)  # the gate wrote it; refuse to hand on a file the next training cannot read
    group = next_group(config.group)
    checkpoint = Path(train["outputs"]["checkpoint"])
    raw = copy.deepcopy(config.model_dump(mode="json"))
    raw["round"].update(group=group, start_checkpoint=str(checkpoint), start_checkpoint_sha256=train["checkpoint_sha256"])
    raw["train"].setdefault("shopsim", {})["skillbank"] = str(skillbank)
    ledger = str(skillbank.parent / "proposal_ledger.jsonl")
    history = raw["analysis"].setdefault("ledger", {}).setdefault("history", [])
    if ledger not in history:
        history.append(ledger)
    config_path = config.round_dir / NEXT_ROUND_CONFIG
    round_config_from_mapping(raw, str(config_path))  # ConfigError before anything is written
    result = NextRound(
        group=group,
        config_path=config_path,
        manifest_path=config.round_dir / NEXT_ROUND_JSON,
        skillbank=skillbank,
        skillbank_sha256=hashlib.sha256(skillbank.read_bytes()).hexdigest(),
        checkpoint=checkpoint,
        checkpoint_sha256=train["checkpoint_sha256"],
    )
    header = f"# The next round after {config.group}, written by `shopsimrl training round`. Start it with:\n#   {result.command}\n"
    atomic_write_text(config_path, header + yaml.safe_dump(raw, sort_keys=False))
    atomic_write_json(result.manifest_path, {
        "schema_version": NEXT_ROUND_SCHEMA_VERSION,
        "round": config.group,
        "next_round": group,
        "config": str(config_path),
        "skillbank": str(skillbank),
        "skillbank_sha256": result.skillbank_sha256,
        "start_checkpoint": str(checkpoint),
        "start_checkpoint_sha256": result.checkpoint_sha256,
        "command": result.command,
        "cli_command": result.cli_command,
    })  # fmt: skip
    return result

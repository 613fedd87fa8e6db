"""One round end to end: train -> analyze -> gate -> next round's inputs -> round report.

    result = run_round(load_round_config("configs/local/demo_round.yaml"), settings=WandbSettings.from_env())

The three stages log into one W&B group, the round's (three runs: job types train, analysis, gate).
Stage completion is recorded atomically in runs/<group>/round_state.json (`RoundState`): a re-run
skips every finished stage and resumes the first unfinished one — the Analyst catches up from its
cards, the gate from its evaluations. An unfinished training cannot be resumed (the local backend
keeps no optimizer state), so its directories are moved aside (`*.unfinished-<utc>`, never deleted)
and the training runs again from the start.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.models.checkpoint import CheckpointError, verify_checkpoint
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.next_round import NextRound, write_next_round
from shopsimrl.round.report import write_round_report
from shopsimrl.round.state import RoundError, RoundState, utc_now
from shopsimrl.storage import atomic_write_text
from shopsimrl.tracking import WandbSettings

Echo = Callable[[str], None]


@dataclass
class RoundResult:
    round_dir: Path
    state: RoundState
    ran: list[str]  # the stages this call ran (the others had finished before)
    next_round: NextRound
    report: Path
    gate_lines: list[str]


def run_round(
    config: RoundConfig,
    *,
    settings: WandbSettings,
    echo: Echo = print,
    on_train_event: Callable[[str, dict[str, Any]], None] | None = None,
    progress: bool = False,
) -> RoundResult:
    """Run (or resume) the round; raises RoundError / CheckpointError / ConfigError naming the path."""
    settings = replace(settings, group=config.group)  # one group per round, whatever the environment said
    round_dir = config.round_dir
    round_dir.mkdir(parents=True, exist_ok=True)
    state = RoundState.load(round_dir, config.group)
    state.check_outputs()
    if config.round.start_checkpoint:
        _verify(config.round.start_checkpoint, config.round.start_checkpoint_sha256, "round.start_checkpoint")
    train_config = config.train_config()
    # The Analyst reads the round's shop (catalog, turns, skillbank) from this copy: one source.
    atomic_write_text(config.train_config_path, yaml.safe_dump(train_config.model_dump(mode="json"), sort_keys=False))
    ran: list[str] = []

    if not state.finished("train"):
        _set_aside_unfinished(train_config.stage_dir, train_config.checkpoint_dir, echo)
        state.start("train")
        state.save()
        echo(f"round {config.group}: stage 1/3 train -> {train_config.stage_dir}")
        from shopsimrl.local.run import run_training

        result = run_training(train_config, settings=settings, echo=echo, on_event=on_train_event)
        if not result.checkpoints:
            raise RoundError(f"{train_config.checkpoint_dir}: the training saved no checkpoint")
        final = result.checkpoints[-1]
        state.finish(
            "train",
            outputs={"metrics": str(train_config.stage_dir / "metrics.jsonl"), "checkpoint": str(final.path)},
            extra={"checkpoint_sha256": final.sha256, "run_id": result.run_id},
        )
        state.save()
        ran.append("train")
    else:
        echo(f"round {config.group}: train finished at {state.record('train')['finished_at']}; not re-run")
    checkpoint = Path(state.record("train")["outputs"]["checkpoint"])
    _verify(str(checkpoint), state.record("train")["checkpoint_sha256"], f"{state.path} (train checkpoint)")

    if not state.finished("analysis"):
        from shopsimrl.analyst.stage import run_analysis

        analysis_config = config.analysis_config(checkpoint)
        state.start("analysis")
        state.save()
        echo(f"round {config.group}: stage 2/3 analysis -> {analysis_config.analysis_dir}")
        analysis = run_analysis(analysis_config, settings=settings, echo=echo)
        directory = analysis.analysis_dir
        state.finish("analysis", outputs={
            "summary": str(directory / "analysis_summary.json"),
            "candidate_pool": str(directory / "candidate_pool.json"),
            "proposal_ledger": str(directory / "proposal_ledger.jsonl"),
        })  # fmt: skip
        state.save()
        ran.append("analysis")
    else:
        echo(f"round {config.group}: analysis finished at {state.record('analysis')['finished_at']}; not re-run")

    gate_lines: list[str] = []
    if not state.finished("gate"):
        from shopsimrl.gate.stage import run_gate

        gate_config = config.gate_config(checkpoint)
        state.start("gate")
        state.save()
        echo(f"round {config.group}: stage 3/3 gate -> {gate_config.gate_dir}")
        gate = run_gate(gate_config, settings=settings, echo=echo, progress=progress)
        gate_lines = gate.lines
        state.finish("gate", outputs={
            "contributions": str(gate.gate_dir / "contributions.json"),
            "selected_skillbank": str(gate.gate_dir / "selected_skillbank.json"),
        })  # fmt: skip
        state.save()
        ran.append("gate")
    else:
        echo(f"round {config.group}: gate finished at {state.record('gate')['finished_at']}; not re-run")

    next_round = write_next_round(config, state)
    report = write_round_report(config, state, next_round, settings)
    return RoundResult(round_dir, state, ran, next_round, report, gate_lines)


def _verify(path: str, expected: str | None, where: str) -> None:
    info = verify_checkpoint(path)  # CheckpointError naming the path: missing, unfinished, changed bytes
    if expected is not None and info.sha256 != expected:
        raise CheckpointError(f"{path}: content hash {info.sha256[:12]} is not the {expected[:12]} recorded in {where}")


def _set_aside_unfinished(stage_dir: Path, checkpoint_dir: Path, echo: Echo) -> None:
    """A killed training left a used run directory (refused by the start-up checks) and maybe
    checkpoints: keep them for the post-mortem, out of the way of the new attempt."""
    suffix = f"unfinished-{utc_now().replace(':', '')}"
    for path in (stage_dir, checkpoint_dir):
        if path.exists():
            target = path.with_name(f"{path.name}.{suffix}")
            os.rename(path, target)
            echo(f"round: an unfinished training left {path}; moved to {target}")

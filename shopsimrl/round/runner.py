"""One round end to end: train -> analyze -> gate -> next round's inputs -> round report.

    result = run_round(load_round_config("configs/local/demo_round.yaml"), settings=WandbSettings.from_env())
    result = run_round(config, settings=settings, backend=DockerBackend(compose="docker compose ..."))

The stages run through a backend (backends.py: in this process, or the compose services); this
module owns what is the same on both. The three stages log into one W&B group, the round's (three
runs: job types train, analysis, gate). Before the first stage the round's inputs are recorded in
runs/<group>/round_manifest.json (manifest.py). Stage completion is recorded atomically in
runs/<group>/round_state.json (`RoundState`): a re-run skips every finished stage and resumes the
first unfinished one — the Analyst catches up from its cards, the gate from its evaluations, a slime
training from its own save directory. An unfinished local training cannot be resumed (the local
backend keeps no optimizer state), so its directories are moved aside (`*.unfinished-<utc>`, never
deleted) and the training runs again from the start. A stage that ends with some of its work failed
(`StageIncomplete`: analysis errors, too many unscorable gate evaluations) or is stopped by a signal
(`StageInterrupted`) raises through here before `finish`, so it stays `running` and a re-run retries it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.models.checkpoint import CheckpointError
from shopsimrl.round.backends import LocalBackend, StageBackend
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.manifest import read_round_manifest, write_round_manifest
from shopsimrl.round.next_round import NextRound, write_next_round
from shopsimrl.round.report import write_round_report
from shopsimrl.round.state import STAGES, RoundState
from shopsimrl.storage import atomic_write_text
from shopsimrl.tracking import WandbSettings

Echo = Callable[[str], None]


@dataclass
class RoundResult:
    round_dir: Path
    state: RoundState
    ran: list[str]  # the stages this call ran (the others had finished before)
    next_round: NextRound | None  # None: a dry run
    report: Path | None
    gate_lines: list[str]


def run_round(
    config: RoundConfig,
    *,
    settings: WandbSettings,
    echo: Echo = print,
    on_train_event: Callable[[str, dict[str, Any]], None] | None = None,
    progress: bool = False,
    backend: StageBackend | None = None,
) -> RoundResult:
    """Run (or resume) the round; raises RoundError / CheckpointError / ConfigError naming the path."""
    backend = backend or LocalBackend()
    dry_run = backend.dry_run
    settings = replace(settings, group=config.group)  # one group per round, whatever the environment said
    round_dir = config.round_dir
    state = RoundState.load(round_dir, config.group)
    state.check_outputs()
    if config.round.start_checkpoint and not dry_run:
        _verify(backend, config.round.start_checkpoint, config.round.start_checkpoint_sha256, "round.start_checkpoint")
    ran: list[str] = []
    manifest: dict[str, Any] = {}
    if not dry_run:
        round_dir.mkdir(parents=True, exist_ok=True)
        # What the round started from: written when it starts, kept when a re-run finds finished work (a
        # resumed round's W&B settings, for one, are what it ran with, not the re-run's).
        manifest = read_round_manifest(round_dir)
        if not manifest or not any(state.finished(stage) for stage in STAGES):
            manifest = write_round_manifest(config, settings)
        # The Analyst (and slime's launcher) read the round's shop from this copy: one source.
        atomic_write_text(config.train_config_path, yaml.safe_dump(config.train_document(), sort_keys=False))

    def begin(stage: str, number: int, where: Path) -> None:
        if not dry_run:
            state.start(stage)
            state.save()
        echo(f"round {config.group}: stage {number}/3 {stage} -> {where} ({backend.name})")

    if not state.finished("train"):
        begin("train", 1, config.train_dir)
        trained = backend.train(config, settings=settings, echo=echo, on_event=on_train_event)
        if dry_run:
            checkpoint = trained.checkpoint
        else:
            extra: dict[str, Any] = {"checkpoint_sha256": trained.sha256, "run_id": trained.run_id,
                                     "warm_start_steps": trained.warm_start_steps}  # fmt: skip
            if trained.save_dir is not None:
                extra["save_dir"] = str(trained.save_dir)
            state.finish("train", outputs={"metrics": str(config.train_dir / "metrics.jsonl"),
                                           "checkpoint": str(trained.checkpoint)}, extra=extra)  # fmt: skip
            state.save()
        ran.append("train")
    else:
        echo(f"round {config.group}: train finished at {state.record('train')['finished_at']}; not re-run")
    if not dry_run:
        checkpoint = Path(state.record("train")["outputs"]["checkpoint"])
        _verify(backend, str(checkpoint), state.record("train")["checkpoint_sha256"], f"{state.path} (train checkpoint)")

    if not state.finished("analysis"):
        directory = round_dir / "analysis"
        begin("analysis", 2, directory)
        backend.analyze(config, checkpoint, settings=settings, echo=echo)
        if not dry_run:
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
        directory = round_dir / "gate"
        begin("gate", 3, directory)
        gate_lines = backend.gate(config, checkpoint, settings=settings, echo=echo, progress=progress)
        if not dry_run:
            state.finish("gate", outputs={
                "contributions": str(directory / "contributions.json"),
                "selected_skillbank": str(directory / "selected_skillbank.json"),
            })  # fmt: skip
            state.save()
        ran.append("gate")
    else:
        echo(f"round {config.group}: gate finished at {state.record('gate')['finished_at']}; not re-run")

    if dry_run:
        return RoundResult(round_dir, state, ran, None, None, gate_lines)
    next_round = write_next_round(config, state, settings, tracking=manifest.get("tracking"))
    report = write_round_report(config, state, next_round, settings)
    return RoundResult(round_dir, state, ran, next_round, report, gate_lines)


def _verify(backend: StageBackend, path: str, expected: str | None, where: str) -> None:
    actual = backend.checkpoint_sha256(Path(path))  # CheckpointError naming the path
    if expected is not None and actual != expected:
        raise CheckpointError(f"{path}: content hash {actual[:12]} is not the {expected[:12]} recorded in {where}")


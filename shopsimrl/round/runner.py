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
from dataclasses import dataclass, field, replace
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
from shopsimrl.storage.layout import (
    CANDIDATE_POOL_FILE,
    CONTRIBUTIONS_FILE,
    METRICS_FILE,
    PROPOSAL_LEDGER_FILE,
    SELECTED_SKILLBANK_FILE,
    SUMMARY_FILE,
)
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

    run = _RoundRun(config, state, backend, settings, echo, on_train_event, progress)
    for number, stage in enumerate(_STAGES, start=1):
        if not state.finished(stage.name):
            where = stage.directory(config)
            if not dry_run:
                state.start(stage.name)
                state.save()
            echo(f"round {config.group}: stage {number}/{len(_STAGES)} {stage.name} -> {where} ({backend.name})")
            outputs, extra = stage.run(run, where)
            if not dry_run:
                state.finish(stage.name, outputs={key: str(path) for key, path in outputs.items()}, extra=extra)
                state.save()
            ran.append(stage.name)
        else:
            echo(f"round {config.group}: {stage.name} finished at {state.record(stage.name)['finished_at']}; not re-run")
        if stage.then is not None:
            stage.then(run)

    if dry_run:
        return RoundResult(round_dir, state, ran, None, None, run.gate_lines)
    next_round = write_next_round(config, state, settings, tracking=manifest.get("tracking"))
    report = write_round_report(config, state, next_round, settings)
    return RoundResult(round_dir, state, ran, next_round, report, run.gate_lines)


@dataclass
class _RoundRun:
    """What the stages of one call share: the round, its backend, and what earlier stages produced."""

    config: RoundConfig
    state: RoundState
    backend: StageBackend
    settings: WandbSettings
    echo: Echo
    on_train_event: Callable[[str, dict[str, Any]], None] | None
    progress: bool
    checkpoint: Path | None = None  # the trained policy the analysis and the gate run on
    gate_lines: list[str] = field(default_factory=list)


Outputs = tuple[dict[str, Path | str], dict[str, Any] | None]  # state outputs, extra state fields


def _train(run: _RoundRun, where: Path) -> Outputs:
    trained = run.backend.train(run.config, settings=run.settings, echo=run.echo, on_event=run.on_train_event)
    run.checkpoint = trained.checkpoint  # a dry run's stand-in; a real run's is read back from the state
    extra: dict[str, Any] = {"checkpoint_sha256": trained.sha256, "run_id": trained.run_id,
                             "warm_start_steps": trained.warm_start_steps}  # fmt: skip
    if trained.save_dir is not None:
        extra["save_dir"] = str(trained.save_dir)
    return {"metrics": where / METRICS_FILE, "checkpoint": trained.checkpoint}, extra


def _trained_checkpoint(run: _RoundRun) -> None:
    """After the training (run now or before): its checkpoint, verified against the recorded hash."""
    record = run.state.record("train")
    if run.backend.dry_run:  # nothing ran: the training's stand-in, or the checkpoint a finished one recorded
        if run.checkpoint is None:
            run.checkpoint = Path(record["outputs"]["checkpoint"])
        return
    run.checkpoint = Path(record["outputs"]["checkpoint"])
    _verify(run.backend, str(run.checkpoint), record["checkpoint_sha256"], f"{run.state.path} (train checkpoint)")


def _analyze(run: _RoundRun, where: Path) -> Outputs:
    assert run.checkpoint is not None  # set after the training stage, which comes first
    run.backend.analyze(run.config, run.checkpoint, settings=run.settings, echo=run.echo)
    return {"summary": where / SUMMARY_FILE, "candidate_pool": where / CANDIDATE_POOL_FILE,
            "proposal_ledger": where / PROPOSAL_LEDGER_FILE}, None  # fmt: skip


def _gate(run: _RoundRun, where: Path) -> Outputs:
    assert run.checkpoint is not None
    run.gate_lines = run.backend.gate(run.config, run.checkpoint, settings=run.settings, echo=run.echo,
                                      progress=run.progress)  # fmt: skip
    return {"contributions": where / CONTRIBUTIONS_FILE, "selected_skillbank": where / SELECTED_SKILLBANK_FILE}, None


@dataclass(frozen=True)
class _Stage:
    """One row of the round: where the stage writes, how it runs, and what follows it even when skipped."""

    name: str
    directory: Callable[[RoundConfig], Path]
    run: Callable[[_RoundRun, Path], Outputs]
    then: Callable[[_RoundRun], None] | None = None


# In run order (state.STAGES); a fourth stage is one more row. The names are round_state.json's keys.
_STAGES = (
    _Stage("train", lambda config: config.layout.train_dir, _train, then=_trained_checkpoint),
    _Stage("analysis", lambda config: config.layout.analysis_dir, _analyze),
    _Stage("gate", lambda config: config.layout.gate_dir, _gate),
)


def _verify(backend: StageBackend, path: str, expected: str | None, where: str) -> None:
    actual = backend.checkpoint_sha256(Path(path))  # CheckpointError naming the path
    if expected is not None and actual != expected:
        raise CheckpointError(f"{path}: content hash {actual[:12]} is not the {expected[:12]} recorded in {where}")


"""Rounds after rounds: `shopsimrl training rounds CONFIG --count N` (`make rounds COUNT=N`).

    results = run_rounds(load_round_config("configs/local/demo_round.yaml"), count=2, settings_for=...)

Round k+1 is the config round k wrote (`runs/<group k>/next_round.yaml`: its final checkpoint, the
skillbank its gate selected, its ledgers as history, new seeds, no warm start, the same tracking).
Every round resumes on its own (round_state.json), so a killed chain re-run with the same command
skips every finished stage of every round and goes on where it stopped. At the end (or after each
round) the cross-round report is rewritten from the files (rounds_report.py).

With the config's `boundary_eval:` every round ends with held-out evaluations under one plan for the
whole chain (boundary.py): the plan is registered before the first round trains (and each later
round's checked against it before that round trains), the evaluations run after the round's gate and
are resumed or skipped like its stages, and the report gets their paired differences.

A dry run (docker backend) prints each round's compose commands; round k+1's config is the one
round k would write, with the outputs it would produce named as placeholders.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopsimrl.round.backends import StageBackend
from shopsimrl.round.boundary import evaluate_boundary, register_boundary_plan
from shopsimrl.round.config import RoundConfig, load_round_config
from shopsimrl.round.next_round import next_round_mapping
from shopsimrl.round.rounds_report import rounds_dir, write_rounds_report
from shopsimrl.round.runner import RoundResult, run_round
from shopsimrl.round.state import RoundState
from shopsimrl.tracking import WandbSettings

Echo = Callable[[str], None]


def run_rounds(
    first: RoundConfig,
    *,
    count: int,
    settings_for: Callable[[RoundConfig], WandbSettings],
    backend: StageBackend,
    echo: Echo = print,
    on_train_event: Callable[[str, dict[str, Any]], None] | None = None,
    progress: bool = False,
) -> tuple[list[tuple[RoundConfig, RoundResult]], Path | None]:
    """Run (or resume) `count` chained rounds from `first`; returns each round with its result, and the report."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    results: list[tuple[RoundConfig, RoundResult]] = []
    evaluated = False  # a boundary evaluation ran in this call (new numbers for the summary run)
    config = first
    for k in range(count):
        echo(f"=== rounds: {k + 1}/{count}: {config.group} ===")
        plan = None
        if config.boundary_eval is not None and not backend.dry_run:  # refused now, not after the training
            plan = register_boundary_plan(rounds_dir(config), config, start_round=first.group)
        result = run_round(config, settings=settings_for(config), echo=echo, on_train_event=on_train_event,
                           progress=progress, backend=backend)  # fmt: skip
        if plan is not None:
            ran = evaluate_boundary(config, result.state, plan, settings=settings_for(config), echo=echo,
                                    progress=progress)  # fmt: skip
            evaluated = evaluated or bool(ran)
        elif config.boundary_eval is not None:
            echo(f"round {config.group}: boundary eval of the final checkpoint (and the chain's start) -> "
                 f"{config.round_dir}/eval/ (dry run: not run)")  # fmt: skip
        results.append((config, result))
        if k + 1 == count:
            break
        if result.next_round is None:  # a dry run: the config round k would write
            config = _planned_next(config, settings_for(config))
        else:
            config = load_round_config(result.next_round.config_path)
    if backend.dry_run:
        return results, None
    return results, write_rounds_report(first, [r.round_dir for _, r in results], settings_for(first),
                                        log_summary=evaluated or any(r.ran for _, r in results))  # fmt: skip


def _planned_next(config: RoundConfig, settings: WandbSettings) -> RoundConfig:
    state = RoundState(config.layout.state, config.group, {
        "train": {"outputs": {"checkpoint": f"<last HF save of {config.checkpoint_dir}>"},
                  "checkpoint_sha256": "0" * 64, "save_dir": str(config.checkpoint_dir)},
        "gate": {"outputs": {"selected_skillbank": str(config.layout.selected_skillbank)}},
    })  # fmt: skip
    planned = f"{config.round_dir}/next_round.yaml (planned)"
    return RoundConfig.parsed(next_round_mapping(config, state, settings), planned)

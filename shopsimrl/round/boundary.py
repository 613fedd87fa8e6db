"""Held-out evaluation at every round boundary of a chain (the round config's `boundary_eval:`).

    plan = register_boundary_plan(first, start_round=first.group)   # runs/<name>-rounds/boundary_eval_plan.json
    evaluate_boundary(config, state, plan, settings=settings)       # runs/<group>/eval/boundary-*/
    results = boundary_results(chain_dir, round_dirs)                 # outcomes and paired differences

One plan for the whole chain: the boundary_eval section (tasks, split, seeds, generator, episode
limits) and the training's catalog, written once at the chain's root; a later round whose plan
differs is refused before it trains, naming every difference, so every evaluation of the chain pairs
with every other episode by episode. Each round's final checkpoint is evaluated with the skillbank its
gate hands on (every active chunk: what the next round starts from); the chain's first round's start
policy (its saved warm start, its start checkpoint, or the shipped demo model) once, with the
round's own skillbank. Each evaluation is `shopsimrl eval`'s (evaluation/stage.py: resumable, its
own W&B run of job type eval in the round's group); a finished one (eval_report.json) is never run
again, so a killed chain resumes without redoing finished evaluations. The paired differences are
evaluation/report.py's `compare` (task-cluster bootstrap interval, sign-flip permutation p).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from shopsimrl.config.files import parse_json, read_config_text
from shopsimrl.errors import ConfigError
from shopsimrl.round.config import RoundConfig, previous_group
from shopsimrl.round.state import RoundError, RoundState
from shopsimrl.stages import register_inputs
from shopsimrl.storage.layout import (
    BOUNDARY_FINAL_EVAL,
    BOUNDARY_PLAN_FILE,
    BOUNDARY_RESULTS_FILE,
    BOUNDARY_START_EVAL,
    EPISODES_FILE,
    EVAL_DIR,
    EVAL_REPORT_FILE,
)
from shopsimrl.tracking import WandbSettings

Echo = Callable[[str], None]
PLAN_SCHEMA_VERSION = 1
RESULTS_SCHEMA_VERSION = 1


def chain_plan(config: RoundConfig) -> dict[str, Any]:
    """What must stay the same for every evaluation of the chain (everything but the checkpoint and skills)."""
    assert config.boundary_eval is not None  # callers check
    resolved = config.boundary_eval_config("<checkpoint>", None, BOUNDARY_FINAL_EVAL)
    return {
        "boundary_eval": config.boundary_eval.model_dump(mode="json"),
        "episode": resolved.episode.model_dump(mode="json"),
        "catalog": resolved.catalog.model_dump(mode="json"),
    }


def register_boundary_plan(chain_dir: Path, config: RoundConfig, *, start_round: str) -> dict[str, Any]:
    """Write the chain's plan (first call) or refuse `config` when its plan differs; returns the stored plan.
    `start_round` (whose start policy is the chain's baseline) is recorded once and never compared: a
    chain continued from a later round keeps the baseline of the chain it continues."""
    path = chain_dir / BOUNDARY_PLAN_FILE
    fresh = {"schema_version": PLAN_SCHEMA_VERSION, "kind": "boundary_eval_plan", "start_round": start_round,
             **chain_plan(config)}  # fmt: skip

    def refuse_change(stored: dict[str, Any], plan: Any, where: str) -> None:
        differences = [f"{key}: stored {stored.get(key)!r}, now {plan.get(key)!r}"
                       for key in ("schema_version", "boundary_eval", "episode", "catalog")
                       if stored.get(key) != plan.get(key)]  # fmt: skip
        if differences:
            raise ConfigError(where, [f"{config.group}'s boundary_eval plan differs from the chain's, so its episodes "
                                      "would not pair with the earlier rounds'", *differences,
                                      "keep the chain's plan, or start a new chain (another round.group name)"])  # fmt: skip

    chain_dir.mkdir(parents=True, exist_ok=True)
    register_inputs(path, fresh, records=chain_dir / BOUNDARY_RESULTS_FILE, compare=refuse_change)
    return parse_json(read_config_text(path), str(path))


def eval_dir(runs_root: Path, group: str, name: str) -> Path:
    return runs_root / group / EVAL_DIR / name


def evaluate_boundary(config: RoundConfig, state: RoundState, plan: dict[str, Any], *, settings: WandbSettings,
                      echo: Echo = print, progress: bool = False) -> list[Path]:  # fmt: skip
    """Run (or resume, or skip when finished) the round's boundary evaluations; returns the directories of
    those this call ran (empty when every one had finished before)."""
    gate = state.record("gate").get("outputs", {})
    train = state.record("train").get("outputs", {})
    if "selected_skillbank" not in gate or "checkpoint" not in train:
        raise RoundError(f"{state.path}: the round has no final checkpoint and selected skillbank to evaluate")
    todo = []
    if config.group == plan["start_round"]:
        todo.append((BOUNDARY_START_EVAL, config.start_policy(), str(config.shopsim().skillbank), "the start policy"))
    todo.append((BOUNDARY_FINAL_EVAL, train["checkpoint"], gate["selected_skillbank"],
                 "the final checkpoint with the skillbank it hands on"))  # fmt: skip
    done = []
    for name, checkpoint, skillbank, what in todo:
        eval_config = config.boundary_eval_config(checkpoint, skillbank, name)
        report = eval_config.eval_dir / EVAL_REPORT_FILE
        if report.is_file():
            echo(f"round {config.group}: boundary eval {name} finished ({report}); not re-run")
        else:
            from shopsimrl.evaluation.stage import run_eval

            echo(f"round {config.group}: boundary eval of {what} ({checkpoint}) -> {eval_config.eval_dir}")
            result = run_eval(eval_config, settings=replace(settings, group=config.group), echo=echo,
                              progress=progress)  # fmt: skip
            for line in result.lines:
                echo(line)
            done.append(eval_config.eval_dir)
    return done


def _finished(directory: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(report, scored records) of a finished evaluation, else None."""
    from shopsimrl.evaluation.plan import KEY_FIELDS
    from shopsimrl.evaluation.runner import EvaluationState, EvaluationStatus
    from shopsimrl.storage import read_jsonl

    report_path = directory / EVAL_REPORT_FILE
    if not report_path.is_file():
        return None
    report = parse_json(read_config_text(report_path), str(report_path))
    episodes = directory / EPISODES_FILE
    keys = {(str(r["episode_id"]),) for r in read_jsonl(episodes).records}
    # The final record of each episode, as the evaluation itself read them (a duplicate after a kill
    # counts once; a retried unscorable episode that scored counts as scored).
    final = EvaluationState.load(episodes, keys, KEY_FIELDS).final
    return report, [r for r in final.values() if r["status"] == EvaluationStatus.SCORED]


def _paired(before: tuple[dict[str, Any], list[dict[str, Any]]] | None,
            after: tuple[dict[str, Any], list[dict[str, Any]]], label: str, plan: dict[str, Any]) -> dict[str, Any] | None:  # fmt: skip
    from shopsimrl.evaluation.report import comparability_problems, compare

    if before is None:
        return None
    problems = comparability_problems(before[0], after[0])
    if problems:  # the chain's plan file makes this unreachable short of hand edits; never pair unpaired episodes
        raise RoundError(f"boundary eval: {label}: the evaluations cannot be paired: {'; '.join(problems)}")
    section = plan["boundary_eval"]
    comparison = compare(before[0], before[1], after[0], after[1], bootstrap_samples=section["bootstrap_samples"],
                         seed=section["seed"])  # fmt: skip
    return {"against": label, **comparison["outcomes"]["success"],
            "reward": comparison["outcomes"]["reward"], "success_discordant": comparison["success_discordant"]}


def _outcomes(report: dict[str, Any], directory: Path) -> dict[str, Any]:
    success = report["outcomes"]["success"]
    return {"eval_dir": str(directory), "checkpoint": report["plan"]["checkpoint"],
            "skillbank": report["plan"]["skillbank"], "successes": success["successes"],
            "episodes": success["episodes"], "success_rate": success["mean"], "wilson_ci": success["wilson_ci"],
            "reward_mean": report["outcomes"]["reward"]["mean"]}  # fmt: skip


def boundary_results(chain_dir: Path, round_dirs: list[Path]) -> dict[str, Any] | None:
    """Each round's held-out outcomes and its paired differences against the round before (the chain's
    start for its first round) and against the start, from the evaluations' files; None without a plan
    (boundary_eval off). A round whose evaluation has not finished has no outcomes (`None`)."""
    plan_path = chain_dir / BOUNDARY_PLAN_FILE
    if not plan_path.is_file():
        return None
    plan = parse_json(read_config_text(plan_path), str(plan_path))
    runs_root = chain_dir.parent
    start_dir = eval_dir(runs_root, plan["start_round"], BOUNDARY_START_EVAL)
    start = _finished(start_dir)
    rows = []
    for round_dir in round_dirs:
        group = round_dir.name
        final_dir = eval_dir(runs_root, group, BOUNDARY_FINAL_EVAL)
        final = _finished(final_dir)
        row: dict[str, Any] = {"round": group, "final": None, "vs_previous": None, "vs_start": None}
        if final is not None:
            before = previous_group(group)
            if group == plan["start_round"] or before is None:
                previous, previous_label = start, f"{plan['start_round']} start"
            else:
                previous = _finished(eval_dir(runs_root, before, BOUNDARY_FINAL_EVAL))
                previous_label = before
            row["final"] = _outcomes(final[0], final_dir)
            row["vs_previous"] = _paired(previous, final, previous_label, plan)
            row["vs_start"] = _paired(start, final, f"{plan['start_round']} start", plan)
        rows.append(row)
    return {"schema_version": RESULTS_SCHEMA_VERSION, "kind": "boundary_eval_results", "plan": plan,
            "start": None if start is None else _outcomes(start[0], start_dir), "rounds": rows}  # fmt: skip

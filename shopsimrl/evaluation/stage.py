"""The evaluation stage: plan, episodes, report, and one W&B run of job type `eval`.

    result = run_eval(load_eval_config("configs/local/eval.yaml"), settings=settings)

Order: validate inputs (checkpoint verified against its manifest, skillbank, mask, split) -> write
eval_plan.json (or, on a re-run into the same directory, refuse any difference: a killed
evaluation resumes, a changed one never mixes its episodes) -> run the episodes not yet final
(episodes.jsonl) -> eval_report.json and the printed table -> W&B: the eval/* metrics at
`eval/step` = the rollouts trained into the checkpoint, and the directory as an artifact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.config.files import parse_json, read_config_text
from shopsimrl.errors import ConfigError, StageIncomplete
from shopsimrl.evaluation.config import EvalConfig
from shopsimrl.evaluation.episode import PlannedEpisode
from shopsimrl.evaluation.episode_config import DEMO_CHECKPOINT
from shopsimrl.evaluation.hashes import task_set_sha256
from shopsimrl.evaluation.plan import KEY_FIELDS, plan_episodes
from shopsimrl.evaluation.report import build_report, comparability_problems, report_lines
from shopsimrl.metrics import names
from shopsimrl.models.checkpoint import (
    CHECKPOINT_MANIFEST,
    CheckpointError,
    checkpoint_sha256,
    latest_checkpoint,
)
from shopsimrl.stages import register_inputs, stage_session
from shopsimrl.storage import atomic_write_json, file_sha256
from shopsimrl.storage.layout import EPISODES_FILE, EVAL_REPORT_FILE
from shopsimrl.storage.layout import EVAL_PLAN_FILE as PLAN_FILE
from shopsimrl.tracking import WandbSettings

STAGE = "eval"
ARTIFACT_NAME = "shopsimrl-eval"
PLAN_SCHEMA_VERSION = 1


@dataclass
class EvalResult:
    eval_dir: Path
    report: dict[str, Any]
    lines: list[str] = field(default_factory=list)


@dataclass
class _Inputs:
    checkpoint: str  # resolved: the directory evaluated, or 'demo'
    plan: dict[str, Any]
    tasks: list[Any]
    catalog: Any
    skill_texts: list[str]


def run_eval(config: EvalConfig, *, settings: WandbSettings | None = None,
             echo: Callable[[str], None] = print, progress: bool = True,
             compare_with: tuple[str, dict[str, Any]] | None = None) -> EvalResult:
    """Run (or resume) the evaluation the config describes. Raises ConfigError before any episode on bad
    input; `compare_with` = (where, report) of a baseline whose episodes this one must pair with: a plan
    that cannot pair is refused here, before anything is written or run."""
    inputs = _load_inputs(config)
    if compare_with is not None:
        where, before = compare_with
        problems = comparability_problems(before, {"plan": inputs.plan})
        if problems:
            raise ConfigError(where, ["plans differ, episodes cannot be paired", *problems])
    eval_dir = config.eval_dir
    planned = plan_episodes([t.task_id for t in inputs.tasks], seeds=config.seeds, seed=config.seed,
                            mask=tuple(inputs.plan["skills"]))
    _register(eval_dir, inputs.plan)
    path = eval_dir / EPISODES_FILE

    def where() -> str:  # one line with the coverage, never the episodes' tracebacks
        done = len(_state(path, planned).final)
        return f"{done}/{len(planned)} episodes final (coverage {done / len(planned):.2f}) in {path}"

    with stage_session(STAGE, eval_dir, settings=settings, config=config.model_dump(mode="json"), where=where) as log:
        state = _state(path, planned)
        if state.torn_tail:
            echo(f"eval: {state.torn_tail}; that episode runs again")
        from shopsimrl.evaluation.runner import Todo

        max_unscorable = config.generator.max_unscorable_fraction
        retry = state.retry_keys(len(planned), max_unscorable)
        if retry:
            echo(f"eval: {len(retry)} unscorable episodes run again (more than generator.max_unscorable_fraction "
                 f"{max_unscorable:.2f})")  # fmt: skip
        todo = [Todo(e, 0 if e.key in retry else state.attempts.get(e.key, 0))
                for e in planned if e.key not in state.final or e.key in retry]  # fmt: skip
        echo(f"eval: {len(planned)} episodes planned ({config.tasks} {config.split} tasks x {config.seeds} seeds), "
             f"{len(planned) - len(todo)} already final, {len(todo)} to run -> {eval_dir}")
        if todo:
            _run_episodes(config, inputs, todo, path, echo, progress)
        state = _state(path, planned)
        missing = len(planned) - len(state.final)
        if missing:  # only after an abort, which raised above; or a concurrent edit of the file
            raise RuntimeError(f"{missing} episodes are still missing from {path}")
        problem = state.unscorable_problem(len(planned), max_unscorable, "episodes")
        if problem is not None:  # numbers from what is left would hide an outage: no report
            raise StageIncomplete(STAGE, f"{problem}; no report written")
        report = build_report(inputs.plan, planned, state.final, bootstrap_samples=config.bootstrap_samples,
                              seed=config.seed)
        atomic_write_json(eval_dir / EVAL_REPORT_FILE, report)
        log.log(eval_metrics(report))
        log.log_artifact(ARTIFACT_NAME, STAGE, [p for p in (eval_dir / PLAN_FILE, path, eval_dir / EVAL_REPORT_FILE)])
    return EvalResult(eval_dir, report, report_lines(report))


def eval_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """The report as slime-style eval/* scalars; a value without episodes is absent, never 0."""
    split = report["plan"]["split"]
    outcomes, per = report["outcomes"], report["per_episode"]
    metrics: dict[str, Any] = {
        # slime evaluates at rollout_id before training on it: eval/step = rollouts trained so far.
        names.EVAL_STEP.name: 0 if report["plan"]["rollout_id"] is None else report["plan"]["rollout_id"] + 1,
        names.EVAL_UNSCORABLE.key(split): report["episodes"]["unscorable"],
    }
    values = {
        names.EVAL_REWARD: outcomes["reward"]["mean"],
        names.EVAL_STRICT_REWARD: outcomes["strict_reward"]["mean"],
        names.EVAL_SUCCESS_RATE: outcomes["success"]["mean"],
        names.EVAL_TRUNCATED_RATIO: per["truncated_ratio"],
        names.EVAL_TURNS_MEAN: per["turns_mean"],
        names.EVAL_MODEL_TOKENS_MEAN: per["model_tokens_mean"],
    }
    wilson = outcomes["success"]["wilson_ci"]
    if wilson is not None:
        values[names.EVAL_SUCCESS_CI_LOW], values[names.EVAL_SUCCESS_CI_HIGH] = wilson
    metrics.update({spec.key(split): value for spec, value in values.items() if value is not None})
    return metrics


def _state(path: Path, planned: list[PlannedEpisode]) -> Any:
    from shopsimrl.evaluation.runner import EvaluationState

    try:
        return EvaluationState.load(path, [e.key for e in planned], KEY_FIELDS, PLAN_FILE)
    except ConfigError:
        raise
    except ValueError as exc:  # an unreadable middle line, or an episode of another plan: never guessed past
        raise ConfigError(str(path), [str(exc), "move the evaluation directory aside to start it again"]) from None


def _resolve_checkpoint(checkpoint: str) -> Path:
    """A checkpoint directory, or the latest checkpoint of a parent our trainer saved into."""
    path = Path(checkpoint)
    if not path.is_dir():
        raise CheckpointError(f"{checkpoint}: not a directory (an HF model directory, a checkpoints parent, or 'demo')")
    if (path / CHECKPOINT_MANIFEST).is_file() or (path / "config.json").is_file():
        return path
    return latest_checkpoint(path)


def _load_inputs(config: EvalConfig) -> _Inputs:
    from shopsimrl.shop import load_split
    from shopsimrl.skills.skillbank import empty_skillbank, load_skillbank

    problems: list[str] = []
    checkpoint, checkpoint_hash, rollout_id = config.checkpoint, None, None
    if config.checkpoint == DEMO_CHECKPOINT:
        from shopsimrl.models.smollm2 import ModelUnavailableError, smollm2_gguf_path

        try:
            checkpoint_hash = file_sha256(smollm2_gguf_path())
        except ModelUnavailableError as exc:
            problems.append(f"checkpoint: demo model unavailable: {exc}")
    else:
        try:
            resolved = _resolve_checkpoint(config.checkpoint)
            checkpoint, checkpoint_hash = str(resolved), checkpoint_sha256(resolved)
            manifest = resolved / CHECKPOINT_MANIFEST
            if manifest.is_file():  # verified just above by checkpoint_sha256, so it parses
                rollout_id = parse_json(read_config_text(manifest), str(manifest)).get("rollout_id")
        except CheckpointError as exc:
            problems.append(f"checkpoint: {exc}")
    skillbank = empty_skillbank()
    skillbank_hash = None
    if config.skillbank is not None:
        try:
            skillbank = load_skillbank(config.skillbank)
            skillbank_hash = file_sha256(config.skillbank)
        except ConfigError as exc:
            problems.extend(f"skillbank: {p}" for p in exc.problems)
    if config.mask == "none":
        skills: list[str] = []
    elif config.mask == "full":
        skills = skillbank.active_ids
    else:
        skills = [chunk for chunk in skillbank.active_ids if chunk in set(config.mask)]
        unknown = sorted(set(config.mask) - set(skillbank.active_ids))
        if unknown and config.skillbank is not None and skillbank_hash is not None:
            problems.append(f"mask: {', '.join(unknown)} not active in {config.skillbank} "
                            f"(active: {', '.join(skillbank.active_ids) or 'none'})")
    from shopsimrl.config.round_shop import catalog_problems

    problems.extend(catalog_problems(config.catalog, runs_root=config.runs_root, group=config.group, key="catalog"))
    catalog = config.catalog.build()
    tasks = load_split(catalog, config.split, limit=config.tasks)
    if len(tasks) < config.tasks:
        problems.append(f"tasks: the {config.split} split has only {len(tasks)} tasks")
    if problems:
        raise ConfigError("eval inputs", problems)
    plan = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": "eval_plan",
        "checkpoint": checkpoint,
        "checkpoint_sha256": checkpoint_hash,
        "rollout_id": rollout_id,
        "split": config.split,
        "tasks": config.tasks,
        "task_ids_sha256": task_set_sha256(tasks, config.catalog.seed, config.catalog.num_products),
        "seeds": config.seeds,
        "seed": config.seed,
        "mask": config.mask_label,
        "skills": skills,
        "skillbank": config.skillbank,
        "skillbank_sha256": skillbank_hash,
        "episode": config.episode.model_dump(mode="json"),
        "catalog": config.catalog.model_dump(mode="json"),
        "backend": config.generator.backend.value,
    }
    return _Inputs(checkpoint, plan, tasks, catalog, skillbank.texts_for(skills))


def _register(eval_dir: Path, plan: dict[str, Any]) -> None:
    """Write the plan before the first episode, or refuse a re-run whose plan differs."""
    register_inputs(eval_dir / PLAN_FILE, plan, records=eval_dir / EPISODES_FILE,
                    compare=lambda stored, fresh, where: _refuse_other_plan(stored, fresh, where, eval_dir))


def _refuse_other_plan(stored: dict[str, Any], plan: Mapping[str, Any], where: str, eval_dir: Path) -> None:
    differences = [
        f"{key}: stored {stored.get(key)!r}, now {plan.get(key)!r}"
        for key in sorted(set(stored) | set(plan)) if stored.get(key) != plan.get(key)
    ]
    if differences:
        raise ConfigError(where, [*differences, f"evaluate into another directory (--name) or remove {eval_dir}"])


def _run_episodes(config: EvalConfig, inputs: _Inputs, todo: list[Any], path: Path,
                  echo: Callable[[str], None], progress: bool) -> None:
    from shopsimrl.evaluation.runner import EvaluationStatus
    from shopsimrl.evaluation.serving import episode_runner

    counts = {"done": 0, "success": 0, "technical": 0}
    step = max(1, len(todo) // 20)

    def on_record(record: dict[str, Any]) -> None:
        if record["status"] == EvaluationStatus.TECHNICAL_FAILURE:
            counts["technical"] += 1
            return
        counts["done"] += 1
        counts["success"] += bool(record["success"])
        if progress and (counts["done"] % step == 0 or counts["done"] == len(todo)):
            echo(f"eval: {counts['done']}/{len(todo)} episodes final, {counts['success']} successes, "
                 f"{counts['technical']} technical failures so far")

    runner = episode_runner(inputs.checkpoint, config.generator, config.episode, config.catalog, seed=config.seed,
                            tokenizer_dir=config.tokenizer, run_dir=config.eval_dir, tasks=inputs.tasks,
                            catalog=inputs.catalog, skill_texts_for=lambda mask: inputs.skill_texts, path=path,
                            kind="eval_episode")  # fmt: skip
    runner.on_record = on_record
    asyncio.run(runner.run(todo))


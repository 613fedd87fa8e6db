"""The gate stage: design, manifest, evaluations, estimate, outputs, and one W&B record.

    result = run_gate(load_gate_config("configs/trace2skill_online_gate.yaml"), settings=settings)

Order (docs/gate.md): validate inputs -> build the design -> write mask_assignments.json and
online_gate_manifest.json (or, on a re-run, refuse any hash difference) -> run the evaluations not
yet final -> when every planned evaluation is final, estimate, write contributions.json,
selected_skillbank.json, selected_skill.md and proposal_ledger.jsonl -> log W&B once.

An incomplete gate (killed, interrupted, aborted on a service outage) writes none of the decision
files and logs only `gate/coverage`, `gate/complete = 0` and the files that exist. SIGTERM/SIGINT
end it with `StageInterrupted` (exit code 128 + signal): where it stopped and the coverage, one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shopsimrl.config.files import validation_problems
from shopsimrl.errors import ConfigError, StageIncomplete
from shopsimrl.evaluation.episode_config import DEMO_CHECKPOINT
from shopsimrl.evaluation.runner import (
    EpisodeRunner,
    EvaluationState,
    EvaluationStatus,
    PlannedEpisode,
    Todo,
)
from shopsimrl.evaluation.serving import episode_runner
from shopsimrl.gate.config import DesignConfig, GateConfig
from shopsimrl.gate.design import ARMS, Design
from shopsimrl.gate.estimate import Estimate, PairObservation, estimate_effects
from shopsimrl.gate.guards import gate_lock, refuse_conflicting_finals
from shopsimrl.gate.manifest import (
    build_manifest,
    check_resume,
    json_sha256,
    task_set_sha256,
)
from shopsimrl.gate.outputs import (
    CONTRIBUTIONS_FILE,
    MANIFEST_FILE,
    MASK_ASSIGNMENTS_FILE,
    TABLE_COLUMNS,
    contributions_document,
    descriptive,
    existing_artifact_files,
    selected_ids,
    table_rows,
    write_ledger,
    write_selected_skillbank,
)
from shopsimrl.gate.plan import GatePlan, plan_gate, power_budget
from shopsimrl.gate.sequential import LookDecision, annotate, decide_look
from shopsimrl.metrics import names
from shopsimrl.models.checkpoint import CheckpointError, checkpoint_sha256
from shopsimrl.skills.candidates import CandidatePool, apply_interventions
from shopsimrl.skills.skillbank import Skillbank, load_skillbank
from shopsimrl.stages import register_inputs, stage_session
from shopsimrl.storage import atomic_write_json, file_sha256
from shopsimrl.storage.layout import EVALUATIONS_FILE
from shopsimrl.tracking import StageLogger, WandbSettings

STAGE = "gate"
ARTIFACT_NAME = "shopsimrl-gate"
TABLE_KEY = names.GATE_CHUNK_CONTRIBUTIONS_TABLE
KEY_FIELDS = ("pair_id", "arm")  # what identifies an evaluation in evaluations.jsonl
_VALIDATED = DesignConfig()  # the design bench/bench_gate.py validates (the shipped defaults)
_POWER = 0.8  # the power a validated design reaches at +min_effect (shopsimrl/gate/power.py)


@dataclass
class GateResult:
    gate_dir: Path
    planned: int
    finished: int
    complete: bool
    document: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.finished / self.planned if self.planned else 1.0


@dataclass
class _Inputs:
    pool: CandidatePool
    skillbank: Skillbank
    catalog: Any
    tasks: list[Any]
    hashes: dict[str, str]


def run_gate(
    config: GateConfig,
    *,
    settings: WandbSettings | None = None,
    echo: Callable[[str], None] = print,
    progress: bool = True,
) -> GateResult:
    """Run (or resume) the gate the config describes. Raises ConfigError before any evaluation on bad input,
    GateLocked when another gate runs on the same directory."""
    inputs = _load_inputs(config)
    with gate_lock(config.gate_dir):  # held to the end: two gates on one directory would interleave
        return _run_locked(config, inputs, settings, echo, progress)


def _run_locked(config: GateConfig, inputs: _Inputs, settings: WandbSettings | None, echo: Callable[[str], None],
                progress: bool) -> GateResult:
    gate_dir = config.gate_dir
    candidates = [item.intervention_id for item in inputs.pool.interventions]
    # Without a candidate there is nothing to compare: no episode runs and the skillbank stays as it is.
    plan = plan_gate(config.design, [task.task_id for task in inputs.tasks] if candidates else [], candidates)
    design = plan.design
    inputs.hashes["mask_assignments"] = json_sha256(design.to_json())
    _register(config, design, inputs.hashes, gate_dir)
    evaluations_path = gate_dir / EVALUATIONS_FILE
    result = GateResult(gate_dir, design.planned, 0, False)

    def log_incomplete(log: StageLogger) -> None:  # killed, interrupted or aborted: no decision file
        final = _state(evaluations_path, design).final if evaluations_path.exists() else {}
        result.finished = len(final)
        _log_incomplete(log, gate_dir, result.coverage)

    def where() -> str:
        return f"{result.finished}/{design.planned} evaluations final (coverage {result.coverage:.2f}) in {evaluations_path}"

    with stage_session(STAGE, gate_dir, settings=settings, config=config.model_dump(mode="json"), where=where,
                       on_incomplete=log_incomplete) as log:  # fmt: skip
        state = _state(evaluations_path, design)
        if state.torn_tail:
            echo(f"gate: {state.torn_tail}; that evaluation runs again")
        retry = state.retry_keys(design.planned, config.generator.max_unscorable_fraction)
        if retry:
            echo(f"gate: {len(retry)} unscorable evaluations run again (more than "
                 f"generator.max_unscorable_fraction {config.generator.max_unscorable_fraction:.2f})")
        waiting = sum(1 for key in design.evaluation_keys() if key not in state.final or key in retry)
        looks = f", {len(plan.looks)} looks: {', '.join(str(2 * look.pairs) for look in plan.looks)}" \
            if plan.sequential else ""  # fmt: skip
        echo(
            f"gate: {design.planned} evaluations planned ({len(design.pairs)} pairs, K={len(candidates)}{looks}), "
            f"{design.planned - waiting} already final, {waiting} to run"
        )
        run = _evaluator(config, inputs, evaluations_path, echo, progress)
        # The sequential gate (sequential.py): the evaluations of each look's prefix of the design, then its
        # estimate; a look depends only on the final records of its prefix, so a resume decides the same.
        # A fixed gate is the one-look case.
        for look in plan.looks:
            todo = [  # a retried unscorable evaluation gets its attempts afresh (numbered from 1 again)
                Todo(episode, 0 if episode.key in retry else state.attempts.get(episode.key, 0))
                for episode in planned_episodes(design)[: 2 * look.pairs]
                if episode.key not in state.final or episode.key in retry
            ]
            retry -= {item.episode.key for item in todo}
            if todo:
                run(todo)
            state = _state(evaluations_path, design)
            final = {key: state.final[key] for key in design.evaluation_keys()[: 2 * look.pairs] if key in state.final}
            result.finished = len(state.final)
            if len(final) < 2 * look.pairs:  # unreachable unless evaluations.jsonl is edited concurrently
                raise RuntimeError(f"{2 * look.pairs - len(final)} evaluations are still missing")
            problem = EvaluationState(final, {}, None).unscorable_problem(
                2 * look.pairs, config.generator.max_unscorable_fraction, "evaluations")
            if problem is not None and look is plan.looks[-1]:  # a decision would hide an outage: none is written
                raise StageIncomplete(STAGE, f"{problem}; no decision written", result)
            if problem is not None:  # nor does an interim look decide on what is left: the gate goes on
                continue
            estimates = _estimates(config, design, final, look.alpha)
            decision = decide_look(estimates[config.design.outcome.value], look, plan.looks,
                                   min_effect=config.design.min_effect_for(config.design.outcome),
                                   futility=config.design.futility)
            if plan.sequential:
                echo(f"gate: {look.describe(len(plan.looks))}: "
                     + ("stop" if decision.stop else "continue (a candidate is still open)"))
            if decision.stop:
                break
        result.complete = True
        document = _decide(config, inputs, plan, final, estimates, decision)
        result.document = document
        result.lines = summary_lines(config, document)
        _log_complete(log, gate_dir, document)
    return result


def _load_inputs(config: GateConfig) -> _Inputs:
    from shopsimrl.shop import load_split

    problems: list[str] = []
    paths = config.inputs
    pool = skillbank = None
    try:
        pool = CandidatePool.model_validate_json(Path(paths.candidate_pool).read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"inputs.candidate_pool: {paths.candidate_pool} not found (run the Failure Analyst first)")
    except ValidationError as exc:  # one line per problem, not pydantic's multi-line text with its URL
        problems.extend(f"inputs.candidate_pool: {paths.candidate_pool} is not a valid candidate pool: {p}"
                        for p in validation_problems(exc))  # fmt: skip
    except ValueError as exc:
        problems.append(f"inputs.candidate_pool: {paths.candidate_pool} is not a valid candidate pool: {exc}")
    try:
        skillbank = load_skillbank(paths.skillbank)
    except ConfigError as exc:
        problems.extend(f"inputs.skillbank: {p}" for p in exc.problems)
    checkpoint_hash = None
    if paths.checkpoint == DEMO_CHECKPOINT:
        from shopsimrl.models.smollm2 import ModelUnavailableError, smollm2_gguf_path

        try:
            checkpoint_hash = file_sha256(smollm2_gguf_path())
        except ModelUnavailableError as exc:
            problems.append(f"inputs.checkpoint: demo model unavailable: {exc}")
    elif not Path(paths.checkpoint).is_dir():
        problems.append(f"inputs.checkpoint: {paths.checkpoint} is not a directory (an HF model directory or 'demo')")
    else:
        try:  # a local backend checkpoint is verified against its manifest; any HF directory is hashed
            checkpoint_hash = checkpoint_sha256(paths.checkpoint)
        except CheckpointError as exc:
            problems.append(f"inputs.checkpoint: {exc}")
    tokenizer_hash = None
    if paths.tokenizer:
        try:
            tokenizer_hash = checkpoint_sha256(paths.tokenizer)
        except CheckpointError as exc:
            problems.append(f"inputs.tokenizer: {exc}")
    if paths.proposal_ledger and not Path(paths.proposal_ledger).exists():
        problems.append(f"inputs.proposal_ledger: {paths.proposal_ledger} not found")
    if pool is not None and skillbank is not None:
        skillbank_sha = file_sha256(paths.skillbank)
        if pool.skillbank_sha256 != skillbank_sha:
            problems.append(
                f"inputs.candidate_pool: written against skillbank sha256 {pool.skillbank_sha256[:12]}..., but "
                f"{paths.skillbank} has {skillbank_sha[:12]}...: the pool does not belong to this skillbank"
            )
        else:
            try:
                apply_interventions(skillbank, list(pool.interventions), config.round)
            except (ValueError, ConfigError) as exc:
                problems.append(f"inputs.candidate_pool: an intervention does not apply to the skillbank: {exc}")
    from shopsimrl.config.round_shop import catalog_problems

    problems.extend(catalog_problems(config.catalog, runs_root=config.runs_root, group=config.round, key="catalog"))
    catalog = config.catalog.build()
    tasks = load_split(catalog, config.design.split, limit=config.design.tasks)
    if pool is not None:  # the gate's own firewall check of the pool it received (docs/analyst.md)
        from shopsimrl.analyst.firewall import Firewall, pool_problems

        held_out = Firewall.for_evidence([], catalog=catalog)
        problems.extend(f"inputs.candidate_pool: {p}" for p in pool_problems(pool.interventions, held_out))
    if len(tasks) < config.design.tasks:
        problems.append(f"design.tasks: the {config.design.split} split has only {len(tasks)} tasks")
    if problems:
        raise ConfigError("gate inputs", problems)
    assert pool is not None and skillbank is not None and checkpoint_hash is not None  # narrowed above
    hashes = {
        "checkpoint": checkpoint_hash,
        "task_set": task_set_sha256(tasks, config.catalog.seed, config.catalog.num_products),
        "candidate_pool": file_sha256(paths.candidate_pool),
        "skillbank": file_sha256(paths.skillbank),
    }
    if tokenizer_hash is not None:
        hashes["tokenizer"] = tokenizer_hash
    return _Inputs(pool, skillbank, catalog, tasks, hashes)


def _register(config: GateConfig, design: Design, hashes: dict[str, str], gate_dir: Path) -> None:
    """Write the design and the manifest before the first evaluation, or check them on a re-run."""
    fresh = build_manifest(
        round_name=config.round,
        hashes=hashes,
        design=config.design.model_dump(mode="json"),
        episode=config.episode.model_dump(mode="json") | {"catalog": config.catalog.model_dump(mode="json")},
        backend=config.generator.backend.value,
    )
    register_inputs(gate_dir / MANIFEST_FILE, fresh, records=gate_dir / EVALUATIONS_FILE, compare=check_resume,
                    before=lambda: atomic_write_json(gate_dir / MASK_ASSIGNMENTS_FILE, design.to_json()))


def _evaluator(config: GateConfig, inputs: _Inputs, path: Path, echo: Callable[[str], None],
               progress: bool) -> Callable[[list[Todo]], None]:
    """Runs a list of evaluations to final records; the generator is loaded on the first call only."""
    runners: list[EpisodeRunner] = []

    def run(todo: list[Todo]) -> None:
        if not runners:
            runners.append(_runner(config, inputs, path))
        runner = runners[0]
        counts = {"done": 0, "technical": 0}
        step = max(1, len(todo) // 20)

        def on_record(record: dict[str, Any]) -> None:
            if record["status"] == EvaluationStatus.TECHNICAL_FAILURE:
                counts["technical"] += 1
                return
            counts["technical"] += record["status"] == EvaluationStatus.UNSCORABLE
            counts["done"] += 1
            if progress and (counts["done"] % step == 0 or counts["done"] == len(todo)):
                echo(f"gate: {counts['done']}/{len(todo)} evaluations final ({counts['technical']} technical failures so far)")

        runner.on_record = on_record
        asyncio.run(runner.run(todo))

    return run


def _runner(config: GateConfig, inputs: _Inputs, path: Path) -> EpisodeRunner:
    by_id = {item.intervention_id: item for item in inputs.pool.interventions}
    cache: dict[tuple[str, ...], list[str]] = {}

    def skill_texts_for(mask: tuple[str, ...]) -> list[str]:
        if mask not in cache:
            bank = apply_interventions(inputs.skillbank, [by_id[i] for i in mask], config.round)
            cache[mask] = [chunk.text for chunk in bank.active_chunks]
        return cache[mask]

    return episode_runner(config.inputs.checkpoint, config.generator, config.episode, config.catalog,
                          seed=config.design.seed, tokenizer_dir=config.inputs.tokenizer, run_dir=config.gate_dir,
                          tasks=inputs.tasks, catalog=inputs.catalog, skill_texts_for=skill_texts_for, path=path,
                          kind="gate_evaluation")  # fmt: skip


def planned_episodes(design: Design) -> list[PlannedEpisode]:
    """The design's evaluations in design order: two arms per pair, with the pair's seeds."""
    return [
        PlannedEpisode(
            labels={"pair_id": pair.pair_id, "arm": arm, "replicate": pair.replicate},
            key_fields=KEY_FIELDS,
            task_id=pair.task_id,
            mask=pair.mask(arm),
            sampling_seed=pair.sampling_seed,
            env_seed=pair.env_seed,
        )
        for pair in design.pairs
        for arm in ARMS
    ]


def _state(path: Path, design: Design) -> EvaluationState:
    try:
        return EvaluationState.load(path, design.evaluation_keys(), KEY_FIELDS, MASK_ASSIGNMENTS_FILE)
    except ValueError as exc:  # an unreadable middle line, or an evaluation of another design: never guessed past
        raise ConfigError(str(path), [str(exc), "move the gate directory aside to start it again"]) from None


def observations(design: Design, final: dict[tuple[str, str], dict[str, Any]], key: str) -> list[PairObservation]:
    """Pairs whose two arms were both scored, in design order (so the fit is byte-reproducible)."""
    out = []
    for pair in design.pairs:
        a, b = final.get((pair.pair_id, "a")), final.get((pair.pair_id, "b"))
        if a is None or b is None or a["status"] != EvaluationStatus.SCORED or b["status"] != EvaluationStatus.SCORED:
            continue
        out.append(PairObservation(pair.task_id, tuple(design.indicators(pair)), float(a[key]), float(b[key])))
    return out


def _estimates(config: GateConfig, design: Design, final: dict[tuple[str, str], dict[str, Any]],
               alpha: float) -> dict[str, Estimate]:
    """Both outcomes' estimates from `final` (a look's prefix of the design) at `alpha`."""
    return {
        outcome: estimate_effects(
            observations(design, final, key),
            design.candidates,
            alpha=alpha,
            min_effect=config.design.min_effect_for(outcome),
        )
        for outcome, key in (("success", "success"), ("reward", "reward"))
    }


def _decide(config: GateConfig, inputs: _Inputs, plan: GatePlan, final: dict[tuple[str, str], dict[str, Any]],
            estimates: dict[str, Estimate], decision: LookDecision) -> dict[str, Any]:
    refuse_conflicting_finals(config.gate_dir / EVALUATIONS_FILE, KEY_FIELDS)  # `final` kept only the first
    design = plan.design
    decided_on = config.design.outcome.value
    estimates = estimates | {decided_on: annotate(estimates[decided_on], decision, config.design.futility)}
    scored = sum(1 for record in final.values() if record["status"] == EvaluationStatus.SCORED)
    summary = {
        "planned": design.planned,
        "finished": len(final),
        "scored": scored,
        "unscorable": len(final) - scored,
        "pairs_in_estimate": estimates[config.design.outcome.value].pairs,
        "tasks_in_estimate": estimates[config.design.outcome.value].tasks,
        "descriptive": descriptive(design, final),
        "validated_design": _is_validated(config.design, plan),
    }
    if plan.sequential:
        summary["sequential"] = decision.summary(len(design.pairs), config.design.futility)
    document = contributions_document(
        round_name=config.round,
        pool=inputs.pool,
        design=design,
        decided_on=config.design.outcome.value,
        estimates=estimates,
        summary=summary,
    )
    gate_dir = config.gate_dir
    atomic_write_json(gate_dir / CONTRIBUTIONS_FILE, document)
    write_selected_skillbank(gate_dir, inputs.skillbank, inputs.pool, selected_ids(document), config.round)
    ledger = Path(config.inputs.proposal_ledger) if config.inputs.proposal_ledger else None
    write_ledger(gate_dir, ledger, inputs.pool, document)
    return document


def _is_validated(design: DesignConfig, plan: GatePlan) -> bool:
    """At least the benchmarked design: the power budget for this K and task count (power.py), fold-over
    pairing, alpha, min effect."""
    needed = power_budget(design, candidates=len(plan.design.candidates), tasks=len({p.task_id for p in plan.design.pairs}))
    return (
        needed is not None
        and len(plan.design.pairs) >= needed
        and design.pairing is _VALIDATED.pairing
        and design.alpha <= _VALIDATED.alpha
        and design.min_effect_for(design.outcome) >= _VALIDATED.min_effect_for(_VALIDATED.outcome)
    )


def _log_complete(log: StageLogger, gate_dir: Path, document: dict[str, Any]) -> None:
    desc = document["summary"]["descriptive"]
    metrics: dict[str, Any] = {
        names.GATE_COVERAGE.name: 1.0,
        names.GATE_COMPLETE.name: 1,
        names.GATE_SELECTED_COUNT.name: len(selected_ids(document)),
        names.GATE_CANDIDATES.name: len(document["contributions"]),
    }
    for spec, key in (
        (names.GATE_BARE_REWARD, "bare_reward"),
        (names.GATE_MASKED_REWARD, "masked_reward"),
        (names.GATE_DELTA_REWARD, "delta_reward"),
        (names.GATE_BARE_SUCCESS_RATE, "bare_success"),
        (names.GATE_MASKED_SUCCESS_RATE, "masked_success"),
        (names.GATE_DELTA_SUCCESS_RATE, "delta_success"),
    ):
        if key in desc:  # absent when no episode ran that arm (never a made-up 0)
            metrics[spec.name] = desc[key]
    log.log(metrics)
    log.log_table(TABLE_KEY, TABLE_COLUMNS, table_rows(document))
    log.log_artifact(ARTIFACT_NAME, STAGE, existing_artifact_files(gate_dir))


def _log_incomplete(log: StageLogger, gate_dir: Path, coverage: float) -> None:
    log.log({names.GATE_COVERAGE.name: coverage, names.GATE_COMPLETE.name: 0})
    log.log_artifact(ARTIFACT_NAME, STAGE, existing_artifact_files(gate_dir))


def summary_lines(config: GateConfig, document: dict[str, Any]) -> list[str]:
    """What the gate could and could not decide, for people."""
    summary = document["summary"]
    decided = document["estimates"][document["decided_on"]]
    lines = [
        f"gate {config.round}: {summary['finished']}/{summary['planned']} evaluations final "
        f"({summary['unscorable']} unscorable); {summary['pairs_in_estimate']} scored pairs from "
        f"{summary['tasks_in_estimate']} tasks; decided on {document['decided_on']}",
    ]
    for effect in decided["effects"]:
        coefficient = "n/a" if effect["coefficient"] is None else f"{effect['coefficient']:+.3f}"
        interval = "" if effect["ci_low"] is None else f" [{effect['ci_low']:+.3f}, {effect['ci_high']:+.3f}]"
        lines.append(f"  {effect['intervention_id']}: {effect['status']:<12} beta={coefficient}{interval}  {effect['reason']}")
    if "sequential" in summary:
        seq = summary["sequential"]
        lines.append(f"  sequential: stopped at look {seq['stopped_at_look']} of {seq['looks']} "
                     f"({seq['pairs_analysed']} of {seq['pairs_planned']} pairs, alpha {seq['alpha_at_look']:g})")
    if not summary["validated_design"]:
        lines.append(
            f"  note: below the validated design (the power budget for this K and task count, "
            f"{_VALIDATED.pairing.value} pairing; docs/gate.md): power to detect +{_VALIDATED.min_effect_success:.2f} "
            f"is below {_POWER:g}, so 'insufficient' is the expected verdict"
        )
    selected = selected_ids(document)
    lines.append(f"  selected: {', '.join(selected) if selected else 'none'} -> {config.gate_dir / 'selected_skillbank.json'}")
    return lines

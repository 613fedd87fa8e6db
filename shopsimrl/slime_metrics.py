"""slime hooks for monitoring: the all-samples hook, the rollout-log hook (dotted paths: docs/contracts.md)
and, under PPO, the rollout-data hook.

    --rollout-all-samples-process-path   shopsimrl.slime_metrics.record_generated_rollout_groups
    --custom-rollout-log-function-path   shopsimrl.slime_metrics.enrich_rollout_metrics
    --rollout-data-postprocess-path      shopsimrl.slime_metrics.add_ppo_spread_metrics   (ppo only)

The first two run in slime's RolloutManager process, the all-samples hook first (docs/metrics.md,
"How the numbers get into slime's single log call").
The all-samples hook sees every completed group (kept, filter-dropped, surplus) but has no return
channel and no rollout id; the log hook knows the rollout id and the accepted batch. So the first
writes traces, triage and retry requests and leaves group summaries in a per-process stash, and the
second computes every `rollout/shopsim/*` metric and merges it into slime's `rollout_extra_metrics`
in place, returning False so slime logs once. It never calls `wandb.log`; with USE_WANDB=0 slime's
dict is filled all the same. slime keeps no local record of what it logs (W&B or TensorBoard and
stdout only), so the log hook also appends that merged dict, with `rollout/step`, to
`<run_dir>/metrics.jsonl`: the round report's training curve and a USE_WANDB=0 run read it. The
local driver writes that file itself (its StageLogger) and tells the hook so on `args`.
The rollout-data hook runs in the actor (Megatron) processes instead and shares nothing with the
other two: it adds `rollout/ppo/*` (metrics/ppo_spread.py) to the row slime's actor logs with
`rollout/values` (W&B or TensorBoard and stdout; like `rollout/values`, not in metrics.jsonl).
Design notes: docs/metrics.md and docs/dynamic_sampling_filter.md.

This module stays at the top of the package, beside `shopsimrl.slime_hooks`, rather than in
`shopsimrl.metrics`: it writes records and reads the rollout step, and `records` and `rollout` both
import `metrics`. Its dotted paths are public (`scripts/run_shopsimrl_slime.sh` passes them to slime,
the local backend's config defaults name them); the metric computation it calls is in
`shopsimrl.metrics.compute`.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.config.options import ShopSimOptions, options_from_args
from shopsimrl.metrics import names as m
from shopsimrl.metrics.compute import RetryOutcome, RolloutMetricsInput, TriageCounts, compute_shopsim_metrics
from shopsimrl.metrics.groups import (
    GroupSummary,
    flatten_group,
    group_samples_by_index,
    parse_metas,
    summarize_group,
)
from shopsimrl.metrics.names import DYNAMIC_FILTER_DROP_PREFIX
from shopsimrl.metrics.ppo_spread import ppo_spreads
from shopsimrl.records import (
    GroupTrace,
    RetryRequest,
    TriageReason,
    TriageRecord,
    append_retry_request,
    append_triage,
    build_group_trace,
    read_retry_results,
    read_triage,
    write_group_traces,
)
from shopsimrl.rollout.curriculum import ROLLOUT_STEP_ATTR, advance_rollout_step, rollout_step
from shopsimrl.rollout.filters import REASON_TECHNICAL, ZERO_STD_REASON_PREFIX
from shopsimrl.storage import append_jsonl, read_jsonl
from shopsimrl.storage.layout import ANALYSIS_DIR, FAILURE_CARDS_FILE, METRICS_FILE, UNMERGED_METRICS_FILE

logger = logging.getLogger(__name__)

RETRIES_MODULE = "shopsimrl.rollout.retries"
# Set True on `args` by a driver whose own logger writes <run_dir>/metrics.jsonl (the local backend);
# absent under slime, where this hook is the only writer of that file.
DRIVER_WRITES_METRICS_ATTR = "shopsim_driver_writes_metrics"
FAILURE_CARDS_PATH = Path("..") / ANALYSIS_DIR / FAILURE_CARDS_FILE  # relative to the stage run_dir


@dataclass
class _StepStash:
    rollout_step: int
    groups: list[GroupSummary]
    group_indices: frozenset[int]


@dataclass
class _ProcessState:
    """What the all-samples hook leaves for the log hook; one per RolloutManager process.

    slime gives the all-samples hook no return channel (its return value is ignored), and both hooks run
    in the same process, one after the other, so module-level state is the only channel there is.
    """

    run_dir: str | None = None
    pending: _StepStash | None = None
    all_wrong_triage: list[tuple[str, str]] | None = None  # (triage_id, group_key) of this round
    retry_results_seen: int | None = None
    # Step directories under traces/ that this process created: the only ones the log hook may rename
    # (one that existed before holds another process's traces, e.g. the crashed attempt's rollout 0).
    created_step_dirs: set[int] = field(default_factory=set)


_STATE = _ProcessState()


def reset_process_state() -> None:
    """Forget the stash and counters (a new run in the same process: tests, the local backend)."""
    global _STATE
    _STATE = _ProcessState()


def _state_for(options: ShopSimOptions) -> _ProcessState:
    if _STATE.run_dir != options.run_dir:
        reset_process_state()
        _STATE.run_dir = options.run_dir
    return _STATE


def _load_all_wrong_triage(state: _ProcessState, run_dir: str) -> list[tuple[str, str]]:
    if state.all_wrong_triage is None:
        read = read_triage(run_dir)
        for problem in read.problems:
            logger.warning("triage journal: %s", problem)
        state.all_wrong_triage = [
            (r.triage_id, r.group_key) for r in read.records if TriageReason.ALL_WRONG in r.reasons
        ]
    return state.all_wrong_triage


def _triage_record(summary: GroupSummary, trace_model: GroupTrace, trace: str) -> TriageRecord:
    step = trace_model.rollout_step
    reasons = [TriageReason.ALL_WRONG] if summary.all_wrong else []
    if summary.has_technical_error:
        reasons.append(TriageReason.TECHNICAL)
    gold = next((t.gold_audit for t in trace_model.trajectories if t.gold_audit is not None), None)
    return TriageRecord(
        triage_id=f"{step}-{summary.group_index}",
        rollout_step=step,
        group_index=summary.group_index,
        group_key=summary.group_key,
        task_id=summary.task_id,
        split="train",
        arm=summary.arm.value,
        mask=list(summary.mask),
        reasons=reasons,
        outcomes=[t.outcome for t in trace_model.trajectories],
        rollout_ids=[t.rollout_id for t in trace_model.trajectories],
        technical_errors=[t.technical_error for t in summary.trajectories if t.technical_error is not None],
        gold_audit=gold,
        trace_path=trace,
    )


def _schedule_retries(args: Any) -> None:
    try:
        retries = importlib.import_module(RETRIES_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != RETRIES_MODULE:
            raise
        raise RuntimeError(
            f"full_skill_retry is on but {RETRIES_MODULE} cannot be imported; the retry requests are "
            "queued in retry_queue.jsonl. Install the full package or set shopsim.full_skill_retry: false"
        ) from exc
    retries.schedule_pending(args)


def record_generated_rollout_groups(args: Any, all_groups: list[Any], data_source: Any) -> None:
    """slime all-samples hook: traces, triage and full-skill retry requests for every completed group.

    `data_source` is slime's bound `get_samples` method in the default rollout; it is not used.
    """
    options = options_from_args(args)
    state = _state_for(options)
    # slime does not tell this hook the rollout id. The curriculum's step counter on `args` (set by
    # the local driver, started from `start_rollout_id` under slime) numbers it; this hook moves it
    # on, and the log hook, which knows the real rollout id, corrects it.
    step = rollout_step(args)
    all_wrong = _load_all_wrong_triage(state, options.run_dir)
    if state.retry_results_seen is None:
        # Results already on disk were reported by an earlier process of this run.
        state.retry_results_seen = len(read_retry_results(options.run_dir).records)

    built = []
    for group in all_groups:
        leaves = flatten_group(group)
        metas = parse_metas(leaves)
        summary = summarize_group(leaves, metas)
        built.append((summary, build_group_trace(summary, leaves, step, options.reward_key, metas)))
    # Every trace is on disk before any triage record names it.
    step_dir_existed = _step_dir(options.run_dir, step).exists()
    paths = write_group_traces(options.run_dir, [trace for _, trace in built])
    if not step_dir_existed and _step_dir(options.run_dir, step).exists():
        state.created_step_dirs.add(step)

    summaries: list[GroupSummary] = []
    queued = 0
    for (summary, trace), path in zip(built, paths, strict=True):
        if not summary.completed:
            continue  # aborted work is excluded from every metric
        if summary.is_retry:
            continue  # diagnostic: counted through retry results, never as a training group
        summaries.append(summary)
        if summary.split != "train" or not (summary.all_wrong or summary.has_technical_error):
            continue
        record = _triage_record(summary, trace, str(path.relative_to(options.run_dir)))
        append_triage(options.run_dir, record)
        if summary.all_wrong:
            all_wrong.append((record.triage_id, record.group_key))
            if options.full_skill_retry and summary.rho:
                append_retry_request(
                    options.run_dir,
                    RetryRequest(
                        request_id=f"{step}-{summary.group_index}-full_skill",
                        task_id=summary.task_id,
                        group_key=summary.group_key,
                        source_group_index=summary.group_index,
                        rollout_step=step,
                        chunk_ids=list(summary.rho),
                    ),
                )
                queued += 1
    state.pending = _StepStash(step, summaries, frozenset(s.group_index for s in summaries))
    advance_rollout_step(args)
    if queued:
        _schedule_retries(args)


def _drop_counts(rollout_extra_metrics: dict[str, Any] | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, value in (rollout_extra_metrics or {}).items():
        if key.startswith(DYNAMIC_FILTER_DROP_PREFIX):
            counts[key[len(DYNAMIC_FILTER_DROP_PREFIX) :]] = int(value)
    return counts


def _new_retry_outcomes(state: _ProcessState, run_dir: str) -> list[RetryOutcome]:
    read = read_retry_results(run_dir)
    for problem in read.problems:
        logger.warning("retry results: %s", problem)
    seen = state.retry_results_seen or 0
    fresh = read.records[seen:]
    state.retry_results_seen = len(read.records)
    return [
        RetryOutcome(
            source_group_index=r.source_group_index,
            scorable=r.outcome.scorable and r.technical_error is None,
            success=r.outcome.success,
            technical_error=r.technical_error is not None or r.outcome.technical_error is not None,
        )
        for r in fresh
    ]


def _triage_counts(state: _ProcessState, run_dir: str) -> TriageCounts:
    all_wrong = _load_all_wrong_triage(state, run_dir)
    cards_path = Path(run_dir) / FAILURE_CARDS_PATH
    card_ids: set[str] = set()
    card_keys: set[str] = set()
    if cards_path.exists():
        cards = read_jsonl(cards_path, strict_middle=False)
        for problem in cards.problems:
            logger.warning("failure cards: %s", problem)
        for card in cards.records:
            if isinstance(card, dict):
                if isinstance(card.get("triage_id"), str):
                    card_ids.add(card["triage_id"])
                if isinstance(card.get("group_key"), str):
                    card_keys.add(card["group_key"])
    covered = sum(1 for triage_id, key in all_wrong if triage_id in card_ids or key in card_keys)
    return TriageCounts(all_wrong_groups=len(all_wrong), with_failure_card=covered)


def _take_stash(state: _ProcessState, rollout_id: int, accepted: frozenset[int]) -> _StepStash | None:
    stash, state.pending = state.pending, None
    if stash is None:
        return None
    if not accepted <= stash.group_indices:
        logger.warning(
            "rollout %s: the all-samples stash (step %s) does not contain the accepted groups; "
            "falling back to the trainer's samples",
            rollout_id,
            stash.rollout_step,
        )
        return None
    return stash


def _step_dir(run_dir: str, step: int) -> Path:
    return Path(run_dir) / "traces" / f"step-{step}"  # shopsimrl.records' layout


def _rename_step_dir(state: _ProcessState, run_dir: str, stashed_step: int, rollout_id: int) -> None:
    source = _step_dir(run_dir, stashed_step)
    target = _step_dir(run_dir, rollout_id)
    if not source.exists():
        return
    if stashed_step not in state.created_step_dirs:  # never move another process's traces
        logger.warning("traces of rollout %s stay in %s: it existed before this process wrote to it", rollout_id, source)
        return
    if target.exists():  # e.g. left by a crashed attempt at this step: keep both, say where they are
        logger.warning("traces of rollout %s stay in %s because %s exists", rollout_id, source, target)
        return
    logger.warning("traces of rollout %s were numbered step %s; renamed to %s", rollout_id, stashed_step, target)
    source.rename(target)
    state.created_step_dirs.discard(stashed_step)
    state.created_step_dirs.add(rollout_id)


def enrich_rollout_metrics(
    rollout_id: int,
    args: Any,
    samples: list[Any],
    rollout_extra_metrics: dict[str, Any] | None,
    rollout_time: float,
) -> bool:
    """slime rollout-log hook: merge every `rollout/shopsim/*` metric in place; returns False.

    When `rollout_extra_metrics` is None (a custom rollout function returned no metrics dict) there
    is nothing to merge into: the metrics go to `<run_dir>/unmerged_rollout_metrics.jsonl` with a
    warning, and slime logs its own metrics as usual.
    """
    options = options_from_args(args)
    state = _state_for(options)
    accepted = frozenset(s.group_index for s in samples)
    stash = _take_stash(state, rollout_id, accepted)
    if stash is not None:
        groups = stash.groups
        if stash.rollout_step != rollout_id:
            _rename_step_dir(state, options.run_dir, stash.rollout_step, rollout_id)
    else:
        groups = [summarize_group(g) for g in group_samples_by_index(samples)]
    setattr(args, ROLLOUT_STEP_ATTR, rollout_id + 1)  # the next rollout's groups are step rollout_id + 1

    rho: dict[str, float] = {}
    for group in groups:
        rho.update(group.rho)
    if not groups:
        rho = {chunk: options.rho_for(chunk) for chunk in options.rho}
    metrics = compute_shopsim_metrics(
        RolloutMetricsInput(
            completed_groups=groups,
            accepted_group_indices=accepted,
            drop_counts=_drop_counts(rollout_extra_metrics),
            q=options.q.at(rollout_id),
            rho=rho,
            reward_key=options.reward_key,
            retry_outcomes=_new_retry_outcomes(state, options.run_dir),
            triage=_triage_counts(state, options.run_dir),
            source_all_samples=stash is not None,
            technical_reason=REASON_TECHNICAL,
            zero_std_reason_prefix=ZERO_STD_REASON_PREFIX,
        )
    )
    if vars(args).get(DRIVER_WRITES_METRICS_ATTR) is not True:
        # slime's whole dict after the merge, as slime logs it (its own rollout/* and perf/* are added
        # after this hook returns, from the samples: they stay in W&B). One write per row (O_APPEND).
        row = {**(rollout_extra_metrics or {}), **metrics, m.ROLLOUT_STEP.name: rollout_id}
        append_jsonl(Path(options.run_dir) / METRICS_FILE, row)
    if rollout_extra_metrics is None:
        logger.warning(
            "rollout %s: rollout_extra_metrics is None, ShopSim metrics cannot join slime's log; "
            "written to %s",
            rollout_id,
            UNMERGED_METRICS_FILE,
        )
        append_jsonl(
            Path(options.run_dir) / UNMERGED_METRICS_FILE,
            {"schema_version": 1, "rollout_id": rollout_id, "metrics": metrics},
        )
        return False
    rollout_extra_metrics.update(metrics)
    return False


# slime's `log_rollout_data` logs every entry of `rollout_data` under `rollout/` + its key; a list of
# plain numbers is reduced over the data-parallel ranks as sum(list) / len(list), so a one-element list
# holding the same number on every rank is logged as that number.
_ROLLOUT_DATA_PREFIX = "rollout/"
_PPO_ROLLOUT_DATA_KEYS = ("values", "returns", "advantages", "loss_masks")


def add_ppo_spread_metrics(args: Any, rollout_id: int, rollout_data: dict[str, Any]) -> None:
    """slime rollout-data hook (PPO): our `rollout/ppo/*` into slime's own rollout log row.

    Runs in every actor (Megatron) process, after slime's `compute_advantages_and_returns` and just
    before its `log_rollout_data` (slime/backends/megatron_utils/actor.py:497-506): `values` are the
    critic's before its update, `advantages` are whitened when `--normalize-advantages` is set. Only
    where slime logs (tensor-parallel rank 0 of the last pipeline stage) it computes the spreads of
    the whole rollout, adding its sums with the other data-parallel ranks' over the group slime
    reduces its own log over, and stores each as a one-element list under `ppo/<name>`; slime then
    logs it in the same call, at the same `rollout/step`, as `rollout/values`. `rollout_id` only
    names the rollout in errors (slime's `log_rollout_data` derives the step from it itself).
    """
    if args.advantage_estimator != "ppo":
        raise ValueError(
            "add_ppo_spread_metrics (--rollout-data-postprocess-path) needs --advantage-estimator ppo, "
            f"got {args.advantage_estimator!r}: without a critic there are no values"
        )
    from megatron.core import mpu

    if not (mpu.get_tensor_model_parallel_rank() == 0 and mpu.is_pipeline_last_stage()):
        return
    if mpu.get_context_parallel_world_size() != 1:
        raise ValueError(
            "add_ppo_spread_metrics: --context-parallel-size must be 1 (each rank would hold slices of "
            f"every sample's tokens), got {mpu.get_context_parallel_world_size()}"
        )
    missing = [key for key in _PPO_ROLLOUT_DATA_KEYS if key not in rollout_data]
    if missing:
        raise ValueError(
            f"add_ppo_spread_metrics: rollout {rollout_id}: rollout_data lacks {', '.join(missing)}"
        )
    group = mpu.get_data_parallel_group_gloo(with_context_parallel=True)  # gather_log_data's group
    spreads = ppo_spreads(
        *(rollout_data[key] for key in _PPO_ROLLOUT_DATA_KEYS), sum_across=lambda sums: _sum_over(sums, group)
    )
    for name, value in spreads.items():
        rollout_data[name.removeprefix(_ROLLOUT_DATA_PREFIX)] = [value]


def _sum_over(sums: Any, group: Any) -> Any:
    import torch.distributed as dist

    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
    return sums


__all__ = [
    "DRIVER_WRITES_METRICS_ATTR",
    "METRICS_FILE",
    "add_ppo_spread_metrics",
    "enrich_rollout_metrics",
    "record_generated_rollout_groups",
    "reset_process_state",
]

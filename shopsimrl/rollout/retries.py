"""Diagnostic full-skill retries: the same task with every active chunk on, never trained on.

The all-samples hook (`shopsimrl.slime_metrics.record_generated_rollout_groups`) queues one
`RetryRequest` per all-wrong group in `<run_dir>/retry_queue.jsonl` and calls
`schedule_pending(args)`. A request is pending while it has no `RetryResult` in
`retry_results.jsonl` and is not running in this process; results are appended there, so a
restarted run picks up what a killed one left.

How `schedule_pending` runs them depends on `args.shopsim_retry_mode` (`RetryMode`, decided by
`retry_mode(args)`):
- `inline` (the default, slime and the local backend alike): run now, concurrently, in a worker
  thread with its own loop, and return when they are done. Under slime the all-samples hook is
  called inside the rollout function (`generate_rollout_async`, after its abort of leftover
  requests and before it returns), the only window in which the engines are guaranteed to be up
  and to serve the weights this rollout was generated with. The rollout step waits for the
  retries (about one episode, since they run concurrently).
- `background`: a daemon thread with its own event loop talks to SGLang; the rollout never waits.
  Only with engines that are not colocated (`--colocate` off): right after the rollout returns,
  slime aborts requests, offloads colocated engines and pushes new weights, and its
  `flush_cache` waits for pending requests and then raises. `retry_mode` refuses the combination.
- `driver`: do nothing; the local driver calls `run_pending_retries(...)` itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from enum import StrEnum
from typing import Any

from shopsimrl.config.options import ShopSimOptions
from shopsimrl.errors import TechnicalErrorKind
from shopsimrl.records import (
    OutcomeRecord,
    RetryRequest,
    RetryResult,
    append_retry_result,
    read_retry_requests,
    read_retry_results,
)
from shopsimrl.rollout.agent import AgentRuntime, run_trajectory
from shopsimrl.rollout.curriculum import Curriculum
from shopsimrl.rollout.generators.base import Generator
from shopsimrl.rollout.trajectory import Trajectory
from shopsimrl.shop import Catalog, get_task
from shopsimrl.skills.skillbank import empty_skillbank, load_skillbank

logger = logging.getLogger(__name__)

RETRY_MODE_ATTR = "shopsim_retry_mode"


class RetryMode(StrEnum):
    BACKGROUND = "background"
    INLINE = "inline"
    DRIVER = "driver"


class _InFlight:
    """Request ids being run by this process (the queue file is shared; this set is not)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def claim(self, requests: list[RetryRequest]) -> list[RetryRequest]:
        with self._lock:
            fresh = [r for r in requests if r.request_id not in self._ids]
            self._ids.update(r.request_id for r in fresh)
            return fresh

    def release(self, request_id: str) -> None:
        with self._lock:
            self._ids.discard(request_id)


_IN_FLIGHT = _InFlight()


def pending_requests(run_dir: str) -> list[RetryRequest]:
    """Queued requests without a result, in queue order (duplicates of one id collapse)."""
    requests = read_retry_requests(run_dir)
    results = read_retry_results(run_dir)
    for problem in [*requests.problems, *results.problems]:
        logger.warning("retry journal: %s", problem)
    done = {result.request_id for result in results.records}
    seen: set[str] = set()
    pending = []
    for request in requests.records:
        if request.request_id not in done and request.request_id not in seen:
            seen.add(request.request_id)
            pending.append(request)
    return pending


async def run_retry(
    request: RetryRequest,
    *,
    catalog: Catalog,
    curriculum: Curriculum,
    tokenizer: Any,
    generator: Generator,
    options: ShopSimOptions,
    sampling_params: dict[str, Any],
) -> tuple[RetryResult, Trajectory]:
    """One full-skill episode of the request's task. A technical failure is a result too."""
    try:
        task = get_task(catalog, request.task_id)
    except ValueError as exc:  # a queue record naming no task of this catalog: report, do not loop on it
        error = {"kind": TechnicalErrorKind.INTERNAL.value, "message": f"retry {request.request_id}: {exc}"}
        result = RetryResult(
            request_id=request.request_id,
            source_group_index=request.source_group_index,
            outcome=OutcomeRecord(scorable=False, technical_error=error),
            technical_error=error,
        )
        return result, Trajectory(task_id=request.task_id, split="train")
    assignment = curriculum.full_skill(request.group_key, q=curriculum.q_at(request.rollout_step))
    trajectory = await run_trajectory(
        task=task,
        catalog=catalog,
        tokenizer=tokenizer,
        generator=generator,
        options=options,
        skill_texts=curriculum.skill_texts(assignment),
        sampling_params=sampling_params,
    )
    outcome = trajectory.outcome
    technical = outcome.technical_error.model_dump() if outcome.technical_error is not None else None
    result = RetryResult(
        request_id=request.request_id,
        source_group_index=request.source_group_index,
        outcome=OutcomeRecord(
            reward=outcome.reward,
            strict_reward=outcome.strict_reward,
            success=outcome.success,
            scorable=outcome.scorable,
            technical_error=technical,
        ),
        technical_error=technical,
    )
    return result, trajectory


async def _run_all(requests: list[RetryRequest], run_dir: str, **episode: Any) -> list[RetryResult]:
    """Every request concurrently (the rollout window waits for the slowest, not the sum); results in
    request order, each appended as soon as its episode ends."""

    async def one(request: RetryRequest) -> RetryResult:
        result, _ = await run_retry(request, **episode)
        append_retry_result(run_dir, result)
        return result

    try:
        return list(await asyncio.gather(*(one(request) for request in requests)))
    finally:  # unfinished ones become pending again for the next call
        for request in requests:
            _IN_FLIGHT.release(request.request_id)


def run_pending_retries(
    run_dir: str,
    generator: Generator,
    tokenizer: Any,
    options: ShopSimOptions,
    *,
    catalog: Catalog | None = None,
    sampling_params: dict[str, Any] | None = None,
) -> list[RetryResult]:
    """Run every pending request now and return their results (the local driver's entry point).

    Safe to call from inside a running event loop: the episodes run on a fresh loop in a worker
    thread, which this call joins.
    """
    if catalog is None:
        catalog = options.catalog.build()
    skillbank = load_skillbank(options.skillbank) if options.skillbank else empty_skillbank()
    requests = _IN_FLIGHT.claim(pending_requests(run_dir))
    coroutine = _run_all(
        requests,
        run_dir,
        catalog=catalog,
        curriculum=Curriculum(skillbank, options),
        tokenizer=tokenizer,
        generator=generator,
        options=options,
        sampling_params=dict(sampling_params or {}),
    )
    return _run_on_fresh_loop(coroutine, wait=True) or []


def schedule_pending(args: Any) -> threading.Thread | None:
    """Called by the all-samples hook after it queued requests. Returns the background thread, if any."""
    mode = retry_mode(args)
    if mode is RetryMode.DRIVER:
        return None
    runtime = AgentRuntime.from_args(args)
    requests = _IN_FLIGHT.claim(pending_requests(runtime.options.run_dir))
    if not requests:
        return None
    coroutine = _run_all(
        requests,
        runtime.options.run_dir,
        catalog=runtime.catalog,
        curriculum=runtime.curriculum,
        tokenizer=runtime.tokenizer,
        generator=runtime.generator,
        options=runtime.options,
        sampling_params=sampling_params_from_args(args),
    )
    if mode is RetryMode.INLINE:
        _run_on_fresh_loop(coroutine, wait=True)
        return None
    return _run_on_fresh_loop(coroutine, wait=False)


def retry_mode(args: Any) -> RetryMode:
    """How retries run for these args: inline unless set; background only without --colocate."""
    explicit = vars(args).get(RETRY_MODE_ATTR)
    if explicit is None:
        return RetryMode.INLINE
    try:
        mode = RetryMode(explicit)
    except ValueError:
        raise ValueError(
            f"args.{RETRY_MODE_ATTR}={explicit!r}; expected one of: {', '.join(m.value for m in RetryMode)}"
        ) from None
    if mode is RetryMode.BACKGROUND and vars(args).get("colocate"):
        raise ValueError(background_colocate_error())
    return mode


def background_colocate_error() -> str:
    return (
        f"{RETRY_MODE_ATTR}=background needs engines that are not colocated: with --colocate slime aborts, "
        "offloads and updates the engines right after the rollout returns, and background retries would "
        "race it (flush_cache raises on pending requests); use inline (the default)"
    )


def sampling_params_from_args(args: Any) -> dict[str, Any]:
    """slime's rollout sampling settings (`--rollout-temperature/top-p/top-k`), as SGLang params."""
    names = {"temperature": "rollout_temperature", "top_p": "rollout_top_p", "top_k": "rollout_top_k"}
    values = vars(args)
    return {param: values[arg] for param, arg in names.items() if values.get(arg) is not None}


def _run_on_fresh_loop(coroutine: Coroutine[Any, Any, Any], *, wait: bool) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # reported to the caller (inline) or logged (background)
            box["error"] = exc
            if not wait:
                logger.exception("diagnostic full-skill retries failed")

    thread = threading.Thread(target=target, name="shopsim-full-skill-retries", daemon=True)
    thread.start()
    if not wait:
        return thread
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")

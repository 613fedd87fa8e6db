"""The episode runner: planned episodes through the real agent loop on one fixed checkpoint.

Shared by the validation gate (`shopsimrl/gate/`: the pairs of its design, two arms each) and the
evaluation (`shopsimrl eval`: tasks x seeds of a split). Each planned episode is one
`run_trajectory` of a task with the skill texts of its mask, sampled with its `sampling_seed`
(SGLang's per-request field; the local generators seed a torch generator with it). At most
`concurrency` episodes are in flight; scale-out is SGLang's (several servers behind sglang-router
answer one URL).

Every finished attempt is appended to the stage's JSONL file as one line (one `write`, so a kill
leaves whole lines and at most a torn last one, which the reader reports and the resume re-runs).
A technical failure (model service, environment, parser) is recorded as status
`technical_failure` and run again, never scored 0; after `max_attempts` the episode is final
with status `unscorable` and drops out of every estimate. `abort_after_consecutive_failures`
technical failures in a row stop the stage (`RunnerAborted`): a service outage must not burn every
episode's attempts; re-running the command resumes. SIGTERM/SIGINT cancel the episodes in flight
and raise `RunnerStopped` (the stages turn it into one line with the coverage and the resume command).

    runner = EpisodeRunner(..., path=gate_dir / "evaluations.jsonl", kind="gate_evaluation")
    await runner.run(todo)
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.config import ShopSimOptions
from shopsimrl.errors import RunnerAborted, RunnerStopped
from shopsimrl.evaluation.episode import PlannedEpisode
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.shop import Catalog, Task
from shopsimrl.shop.failure_modes import classify_trajectory
from shopsimrl.storage import append_jsonl, read_jsonl, repair_torn_tail

EVALUATION_SCHEMA_VERSION = 1


class EvaluationStatus(StrEnum):
    SCORED = "scored"  # final: an outcome
    UNSCORABLE = "unscorable"  # final: every attempt hit a technical failure
    TECHNICAL_FAILURE = "technical_failure"  # one attempt; the episode runs again


FINAL = (EvaluationStatus.SCORED, EvaluationStatus.UNSCORABLE)


@contextmanager
def _signals_cancel(task: asyncio.Task[Any] | None) -> Iterator[list[int]]:
    """While the episodes run, SIGTERM/SIGINT cancel `task` (the gather) instead of raising inside
    whichever episode coroutine happens to run: an exception raised there by a Python signal handler
    leaves the other tasks' exceptions unretrieved ("Task exception was never retrieved" and a
    traceback per task). The handlers in place before (the StageLogger's) are restored afterwards."""
    received: list[int] = []
    loop = asyncio.get_running_loop()
    if task is None or threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

    def stop(signum: int) -> None:
        if not received:
            received.append(signum)
            task.cancel()

    for signum in previous:
        loop.add_signal_handler(signum, stop, signum)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)


@dataclass
class EvaluationState:
    """What the JSONL file says so far: the final record of each planned key and attempts used."""

    final: dict[tuple[str, ...], dict[str, Any]]
    attempts: dict[tuple[str, ...], int]
    torn_tail: str | None

    @classmethod
    def load(cls, path: Path, planned: Iterable[tuple[str, ...]], key_fields: Sequence[str],
             plan_file: str = "the plan") -> EvaluationState:
        final: dict[tuple[str, ...], dict[str, Any]] = {}
        attempts: dict[tuple[str, ...], int] = {}
        torn = None
        if path.exists():
            result = read_jsonl(path)
            torn = None if result.torn_tail is None else str(result.torn_tail)
            keys = set(planned)
            for record in result.records:
                key = tuple(str(record[name]) for name in key_fields)
                if key not in keys:
                    raise ValueError(f"{path}: episode {key} is not in {plan_file}")
                attempts[key] = attempts.get(key, 0) + 1
                if record["status"] in FINAL and (key not in final or (
                        final[key]["status"] == EvaluationStatus.UNSCORABLE
                        and record["status"] == EvaluationStatus.SCORED)):
                    # A duplicate after a kill between append and exit: the first wins; a retried unscorable
                    # episode (see `retry_keys`) that scored replaces its unscorable record.
                    final[key] = record
        return cls(final, attempts, torn)

    @property
    def unscorable(self) -> list[tuple[str, ...]]:
        return [key for key, record in self.final.items() if record["status"] == EvaluationStatus.UNSCORABLE]

    def retry_keys(self, planned: int, max_fraction: float) -> set[tuple[str, ...]]:
        """The unscorable episodes to run again: all of them when they are more than `max_fraction` of
        the plan (the last run ended incomplete on them), none otherwise (a finished stage stays as it is)."""
        unscorable = self.unscorable
        return set(unscorable) if planned and len(unscorable) > max_fraction * planned else set()

    def unscorable_problem(self, planned: int, max_fraction: float, what: str) -> str | None:
        """One line when more than `max_fraction` of the plan is unscorable (the stage is then incomplete)."""
        unscorable = self.unscorable
        if not planned or len(unscorable) <= max_fraction * planned:
            return None
        first = self.final[unscorable[0]].get("technical_error")
        return (f"{len(unscorable)} of {planned} {what} unscorable, more than generator.max_unscorable_fraction "
                f"{max_fraction:.2f} (first: {first})")  # fmt: skip


@dataclass(frozen=True)
class Todo:
    episode: PlannedEpisode
    attempts_used: int


@dataclass
class EpisodeRunner:
    tasks: dict[str, Task]
    catalog: Catalog
    tokenizer: Any
    generator: Any
    options: ShopSimOptions
    skill_texts_for: Callable[[tuple[str, ...]], list[str]]
    sampling: dict[str, Any]
    path: Path
    kind: str  # the records' "kind" ("gate_evaluation", "eval_episode")
    concurrency: int
    max_attempts: int
    abort_after_consecutive_failures: int
    on_record: Callable[[dict[str, Any]], None] | None = None
    _consecutive_failures: int = field(default=0, init=False)
    _aborted: str | None = field(default=None, init=False)

    async def run(self, todo: Sequence[Todo]) -> None:
        """Run every episode in `todo` to a final record; raises `RunnerAborted` on an outage and
        `RunnerStopped` on SIGTERM/SIGINT (the episodes in flight are cancelled, nothing half-written)."""
        repair_torn_tail(self.path)  # a kill mid-append left a partial line: the next append must start a new one
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(item: Todo) -> None:
            async with semaphore:
                await self._evaluate(item)

        with _signals_cancel(asyncio.current_task()) as received:
            try:
                await asyncio.gather(*(one(item) for item in todo))
            except asyncio.CancelledError:
                if not received:
                    raise
                raise RunnerStopped(received[0]) from None
        if self._aborted:
            raise RunnerAborted(self._aborted)

    async def _evaluate(self, item: Todo) -> None:
        attempt = item.attempts_used
        while attempt < self.max_attempts and not self._aborted:
            attempt += 1
            record = await self._episode(item.episode, attempt)
            if record["status"] == EvaluationStatus.TECHNICAL_FAILURE and attempt >= self.max_attempts:
                record["status"] = EvaluationStatus.UNSCORABLE.value
            append_jsonl(self.path, record)
            if self.on_record is not None:
                self.on_record(record)
            if record["status"] == EvaluationStatus.SCORED:
                self._consecutive_failures = 0
                return
            self._consecutive_failures += 1
            if self._consecutive_failures >= self.abort_after_consecutive_failures:
                self._aborted = (
                    f"{self._consecutive_failures} technical failures in a row (last: "
                    f"{record['technical_error']}); stopped incomplete, re-run the command to resume"
                )
            if record["status"] == EvaluationStatus.UNSCORABLE:
                return

    async def _episode(self, episode: PlannedEpisode, attempt: int) -> dict[str, Any]:
        started = time.perf_counter()
        trajectory = await run_trajectory(
            task=self.tasks[episode.task_id],
            catalog=self.catalog,
            tokenizer=self.tokenizer,
            generator=self.generator,
            options=self.options,
            skill_texts=self.skill_texts_for(episode.mask),
            sampling_params={**self.sampling, "sampling_seed": episode.sampling_seed},
            env_seed=episode.env_seed,
        )
        outcome = trajectory.outcome
        error = None if outcome.technical_error is None else outcome.technical_error.model_dump()
        scored = outcome.scorable
        failure_mode = None
        if scored and not outcome.success:  # the Analyst's classifier: one taxonomy of failures
            failure_mode = classify_trajectory(trajectory.gold_audit, trajectory.messages).mode.value
        return {
            "schema_version": EVALUATION_SCHEMA_VERSION,
            "kind": self.kind,
            **episode.labels,
            "task_id": episode.task_id,
            "mask": list(episode.mask),
            "sampling_seed": episode.sampling_seed,
            "attempt": attempt,
            "status": (EvaluationStatus.SCORED if scored else EvaluationStatus.TECHNICAL_FAILURE).value,
            "reward": outcome.reward,
            "strict_reward": outcome.strict_reward,
            "success": outcome.success,
            "failure_mode": failure_mode,
            "technical_error": error,
            "num_turns": trajectory.num_turns,
            "model_tokens": sum(sum(segment.loss_mask) for segment in trajectory.segments),
            "stop_reason": trajectory.stop_reason.value,
            "state_hash": trajectory.state_hash,
            "response_sha256": _response_sha256(trajectory),
            "elapsed_s": round(time.perf_counter() - started, 4),
        }


def _response_sha256(trajectory: Any) -> str:
    """Hash of every token of the episode (prompts, model and tool tokens): equal iff the episodes are."""
    digest = hashlib.sha256()
    for segment in trajectory.segments:
        digest.update(",".join(map(str, segment.prompt_ids)).encode() + b"|")
        digest.update(",".join(map(str, segment.response_ids)).encode() + b"\n")
    return digest.hexdigest()

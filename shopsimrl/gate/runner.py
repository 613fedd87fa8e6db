"""The episode runner: the design's evaluations through the real agent loop, on the fixed checkpoint.

Each evaluation is one `run_trajectory` episode of a validation task with the current skillbank
plus the arm's interventions, sampled with the pair's `sampling_seed` (SGLang's per-request field;
the local generators seed a torch generator with it). At most `concurrency` episodes are in
flight; scale-out is SGLang's (several servers behind sglang-router answer one URL).

Every finished attempt is appended to `evaluations.jsonl` as one line (one `write`, so a kill
leaves whole lines and at most a torn last one, which the reader reports and the resume re-runs).
A technical failure (model service, environment, parser) is recorded as status
`technical_failure` and run again, never scored 0; after `max_attempts` the evaluation is final
with status `unscorable` and its pair drops out of the estimate. `abort_after_consecutive_failures`
technical failures in a row stop the gate (`GateAborted`): a service outage must not burn every
evaluation's attempts; re-running the command resumes.

    runner = EpisodeRunner(..., path=gate_dir / "evaluations.jsonl")
    await runner.run(todo)
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.config import ShopSimOptions
from shopsimrl.gate.design import Design, Pair
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.shop import Catalog, Task
from shopsimrl.storage import append_jsonl, read_jsonl

EVALUATIONS_FILE = "evaluations.jsonl"
EVALUATION_SCHEMA_VERSION = 1


class EvaluationStatus(StrEnum):
    SCORED = "scored"  # final: an outcome
    UNSCORABLE = "unscorable"  # final: every attempt hit a technical failure
    TECHNICAL_FAILURE = "technical_failure"  # one attempt; the evaluation runs again


FINAL = (EvaluationStatus.SCORED, EvaluationStatus.UNSCORABLE)


class GateAborted(RuntimeError):
    """Too many technical failures in a row: the gate stops incomplete and can be resumed."""


@dataclass
class EvaluationState:
    """What evaluations.jsonl says so far: the final record of each (pair_id, arm) and attempts used."""

    final: dict[tuple[str, str], dict[str, Any]]
    attempts: dict[tuple[str, str], int]
    torn_tail: str | None

    @classmethod
    def load(cls, path: Path, design: Design) -> EvaluationState:
        final: dict[tuple[str, str], dict[str, Any]] = {}
        attempts: dict[tuple[str, str], int] = {}
        torn = None
        if path.exists():
            result = read_jsonl(path)
            torn = None if result.torn_tail is None else str(result.torn_tail)
            planned = set(design.evaluation_keys())
            for record in result.records:
                key = (record["pair_id"], record["arm"])
                if key not in planned:
                    raise ValueError(f"{path}: evaluation {key} is not in the design (mask_assignments.json)")
                attempts[key] = attempts.get(key, 0) + 1
                if record["status"] in FINAL:
                    final.setdefault(key, record)  # a duplicate after a kill between append and exit: first wins
        return cls(final, attempts, torn)


@dataclass(frozen=True)
class Todo:
    pair: Pair
    arm: str
    attempts_used: int


class EpisodeRunner:
    def __init__(
        self,
        *,
        tasks: dict[str, Task],
        catalog: Catalog,
        tokenizer: Any,
        generator: Any,
        options: ShopSimOptions,
        skill_texts_for: Callable[[tuple[str, ...]], list[str]],
        sampling: dict[str, Any],
        path: Path,
        concurrency: int,
        max_attempts: int,
        abort_after_consecutive_failures: int,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.tasks = tasks
        self.catalog = catalog
        self.tokenizer = tokenizer
        self.generator = generator
        self.options = options
        self.skill_texts_for = skill_texts_for
        self.sampling = dict(sampling)
        self.path = path
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.abort_after = abort_after_consecutive_failures
        self.on_record = on_record
        self._consecutive_failures = 0
        self._aborted: str | None = None

    async def run(self, todo: Sequence[Todo]) -> None:
        """Run every evaluation in `todo` to a final record; raises `GateAborted` on an outage."""
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(item: Todo) -> None:
            async with semaphore:
                await self._evaluate(item)

        await asyncio.gather(*(one(item) for item in todo))
        if self._aborted:
            raise GateAborted(self._aborted)

    async def _evaluate(self, item: Todo) -> None:
        attempt = item.attempts_used
        while attempt < self.max_attempts and not self._aborted:
            attempt += 1
            record = await self._episode(item.pair, item.arm, attempt)
            if record["status"] == EvaluationStatus.TECHNICAL_FAILURE and attempt >= self.max_attempts:
                record["status"] = EvaluationStatus.UNSCORABLE.value
            append_jsonl(self.path, record)
            if self.on_record is not None:
                self.on_record(record)
            if record["status"] == EvaluationStatus.SCORED:
                self._consecutive_failures = 0
                return
            self._consecutive_failures += 1
            if self._consecutive_failures >= self.abort_after:
                self._aborted = (
                    f"{self._consecutive_failures} technical failures in a row (last: "
                    f"{record['technical_error']}); the gate stopped incomplete, re-run the command to resume"
                )
            if record["status"] == EvaluationStatus.UNSCORABLE:
                return

    async def _episode(self, pair: Pair, arm: str, attempt: int) -> dict[str, Any]:
        mask = pair.mask(arm)
        started = time.perf_counter()
        trajectory = await run_trajectory(
            task=self.tasks[pair.task_id],
            catalog=self.catalog,
            tokenizer=self.tokenizer,
            generator=self.generator,
            options=self.options,
            skill_texts=self.skill_texts_for(mask),
            sampling_params={**self.sampling, "sampling_seed": pair.sampling_seed},
            env_seed=pair.env_seed,
        )
        outcome = trajectory.outcome
        error = None if outcome.technical_error is None else outcome.technical_error.model_dump()
        return {
            "schema_version": EVALUATION_SCHEMA_VERSION,
            "kind": "gate_evaluation",
            "pair_id": pair.pair_id,
            "arm": arm,
            "task_id": pair.task_id,
            "replicate": pair.replicate,
            "mask": list(mask),
            "sampling_seed": pair.sampling_seed,
            "attempt": attempt,
            "status": (EvaluationStatus.SCORED if outcome.scorable else EvaluationStatus.TECHNICAL_FAILURE).value,
            "reward": outcome.reward,
            "strict_reward": outcome.strict_reward,
            "success": outcome.success,
            "technical_error": error,
            "num_turns": trajectory.num_turns,
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

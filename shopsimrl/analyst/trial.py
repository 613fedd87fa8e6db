"""Counterfactual trial: replay a card's task with its lesson added to the prompt.

The episode runs through the real agent loop (`shopsimrl.rollout.run_trajectory`) on the round's
policy: a local Hugging Face model (tiny in tests, the demo model on CPU, a checkpoint directory)
or SGLang's `/generate` in production. The prompt holds the card's own mask (the skills its group
saw, those still active) followed by the lesson. An episode lost to a technical failure (model
service, environment, parser) is run again, up to `trial.technical_retries` times, and never
counts as "lesson failed"; a card whose every episode was lost gets `trial_error`.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.analyst.cards import FailureCard, TrialRecord
from shopsimrl.analyst.config import TrialGeneratorName, TrialSettings
from shopsimrl.analyst.firewall import Firewall
from shopsimrl.analyst.sidecar import refuse_held_out
from shopsimrl.config.options import ShopSimOptions
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.generators.base import Generator
from shopsimrl.shop import Catalog, get_task
from shopsimrl.skills.skillbank import Skillbank


class LeakyLessonError(ValueError):
    """A lesson that the firewall rejects reached a trial."""


@dataclass
class _Attempt:
    """What one attempt of a trial came to: a scorable episode's reward (None when every episode
    was lost to a technical failure), and the technical failures on the way."""

    reward: float | None = None
    success: bool = False
    technical: int = 0
    last_error: dict[str, str] | None = None


def lesson_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class TrialRunner:
    settings: TrialSettings
    options: ShopSimOptions
    catalog: Catalog
    skillbank: Skillbank
    tokenizer: Any
    generator: Generator
    firewall: Firewall | None = None  # when set, a lesson that carries privileged facts is refused

    def skill_texts(self, card: FailureCard, lesson: str) -> list[str]:
        active = set(self.skillbank.active_ids)
        return [*self.skillbank.texts_for([c for c in card.mask if c in active]), lesson]

    async def trial(self, card: FailureCard, lesson: str) -> TrialRecord:
        """Run `settings.attempts` scorable episodes of the card's task with the lesson in the prompt.

        The attempts run concurrently (each has its own seeds, so the order they finish in changes
        nothing): a batching generator decodes them together instead of one episode at a time."""
        refuse_held_out(card.task_id, card.split, f"trial of {card.card_id}")
        task = get_task(self.catalog, card.task_id)
        refuse_held_out(task.task_id, task.split.value, f"trial of {card.card_id}")
        if self.firewall is not None:  # defence in depth: the stage screened the lesson already
            verdict = self.firewall.check(lesson, (card.card_id,))
            if not verdict.ok:
                raise LeakyLessonError(
                    f"trial of {card.card_id} refused: the lesson carries privileged facts ({', '.join(verdict.kinds)})"
                )
        skills = self.skill_texts(card, lesson)
        attempts = await asyncio.gather(
            *(self._attempt(task, skills, attempt) for attempt in range(self.settings.attempts))
        )
        rewards = [a.reward for a in attempts if a.reward is not None]
        errors = [a.last_error for a in attempts if a.last_error is not None]
        return TrialRecord(
            lesson_sha256=lesson_sha256(lesson),
            attempts=len(rewards),
            successes=sum(a.success for a in attempts),
            technical_failures=sum(a.technical for a in attempts),
            rewards=rewards,
            last_technical_error=errors[-1] if errors else None,
        )

    async def _attempt(self, task: Any, skills: list[str], attempt: int) -> _Attempt:
        """One attempt: episodes until one is scorable, at most `technical_retries` more."""
        result = _Attempt()
        for retry in range(self.settings.technical_retries + 1):
            seed = self.settings.seed + 1000 * attempt + retry
            trajectory = await run_trajectory(
                task=task,
                catalog=self.catalog,
                tokenizer=self.tokenizer,
                generator=self.generator,
                options=self.options,
                skill_texts=skills,
                sampling_params={"temperature": self.settings.temperature, "sampling_seed": seed},
                env_seed=attempt,
            )
            outcome = trajectory.outcome
            if outcome.scorable:
                result.reward = float(outcome.reward or 0.0)
                result.success = bool(outcome.success)
                return result
            result.technical += 1
            if outcome.technical_error is not None:
                result.last_error = outcome.technical_error.model_dump()
        return result

    def run(self, card: FailureCard, lesson: str) -> TrialRecord:
        return asyncio.run(self.trial(card, lesson))

    def run_many(self, items: list[tuple[FailureCard, str]], concurrency: int = 1) -> list[TrialRecord]:
        """Trials of (card, lesson) pairs on one event loop, `concurrency` at a time (SGLang serves
        many requests at once; a local model decodes one episode at a time anyway)."""

        async def _all() -> list[TrialRecord]:
            limit = asyncio.Semaphore(concurrency)

            async def _one(card: FailureCard, lesson: str) -> TrialRecord:
                async with limit:
                    return await self.trial(card, lesson)

            return list(await asyncio.gather(*(_one(card, lesson) for card, lesson in items)))

        return asyncio.run(_all())


def load_trial_policy(settings: TrialSettings, options: ShopSimOptions) -> tuple[Any, Generator]:
    """(tokenizer, generator) of the policy the trials run on, as the config names it."""
    if settings.generator is TrialGeneratorName.SGLANG:
        from transformers import AutoTokenizer

        from shopsimrl.rollout.generators.sglang import SGLangGenerator

        tokenizer = AutoTokenizer.from_pretrained(settings.tokenizer)
        return tokenizer, SGLangGenerator(str(settings.sglang_url), timeout_s=options.sglang_timeout_s)
    from shopsimrl.rollout.generators import BatchedLocalHFGenerator

    if settings.model == "tiny":
        from shopsimrl.models import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        model = tiny_model(tokenizer, seed=settings.model_seed)
    elif settings.model == "smollm2":
        from shopsimrl.models.smollm2 import load_smollm2

        loaded = load_smollm2()
        model, tokenizer = loaded.model, loaded.tokenizer
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = Path(settings.model)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory)
    model.eval()
    # The cached, batched generator: the attempts of the `concurrency` trials in flight decode as one
    # batch and every turn reuses its episode's KV cache (docs/rollout.md), as the local driver's
    # rollouts do.
    return tokenizer, BatchedLocalHFGenerator(
        model,
        tokenizer,
        seed=settings.seed,
        max_batch=settings.concurrency * settings.attempts,
        compute_dtype=settings.compute_dtype.torch,
    )

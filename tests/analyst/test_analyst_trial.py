"""Counterfactual trials through the real agent loop: tiny model, technical failures, refusals."""

from __future__ import annotations

import pytest
from analyst_helpers import SKILLBANK, ExpertPolicyGenerator, catalog, train_tasks
from test_analyst_compiler_ledger import card

from shopsimrl.analyst.config import TrialSettings
from shopsimrl.analyst.sidecar import ValidationTaskRefused
from shopsimrl.analyst.trial import TrialRunner, lesson_sha256
from shopsimrl.config.options import validate_options
from shopsimrl.errors import ModelServiceError
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, LocalHFGenerator
from shopsimrl.shop.failure_modes import FailureMode
from shopsimrl.skills.skillbank import load_skillbank

CAT = catalog()
LESSON = "Compare the price with the limit before adding a product to the cart."
OPTIONS = validate_options({"run_dir": "unused", "max_turns": 3, "max_new_tokens_per_turn": 8,
                            "tool_call_format": "xml", "catalog": {"seed": 0, "num_products": 200}}, "test")  # fmt: skip
CARD = card(0, FailureMode.OVER_BUDGET).model_copy(update={"mask": ["read-the-constraints"]})


class RecordingGenerator(LocalHFGenerator):
    """The tiny model's real generator; keeps the prompts and can fail the first `fail_first` calls."""

    def __init__(self, model, tokenizer, fail_first: int = 0, **kwargs) -> None:
        super().__init__(model, tokenizer, **kwargs)
        self.prompts: list[str] = []
        self.fail_first = fail_first

    async def generate(self, input_ids, sampling_params):
        self.prompts.append(self.tokenizer.decode(input_ids, skip_special_tokens=False))
        if len(self.prompts) <= self.fail_first:
            raise ModelServiceError(f"HTTP 503 on call {len(self.prompts)}")
        return await super().generate(input_ids, sampling_params)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    return tokenizer, tiny_model(tokenizer, seed=0)


def runner(tokenizer, generator, **settings) -> TrialRunner:
    return TrialRunner(TrialSettings(**settings), OPTIONS, CAT, load_skillbank(SKILLBANK), tokenizer, generator)


def test_a_trial_with_the_tiny_model_runs_the_lesson_in_the_prompt(tiny):
    tokenizer, model = tiny
    generator = RecordingGenerator(model, tokenizer)
    record = runner(tokenizer, generator, attempts=2).run(CARD, LESSON)
    assert record.attempts == 2 and record.technical_failures == 0
    assert record.successes == 0  # a random tiny model does not shop: the card would be evidence-only
    assert record.lesson_sha256 == lesson_sha256(LESSON)
    prompt = generator.prompts[0]
    mask_text = load_skillbank(SKILLBANK).texts_for(["read-the-constraints"])[0]
    assert prompt.index(mask_text) < prompt.index(LESSON)  # the card's own skills, then the lesson
    assert CARD.audit["instruction"] in prompt


def test_a_trials_attempts_decode_together(tiny):
    """The attempts run concurrently, so a batching generator decodes them as one batch."""
    tokenizer, model = tiny
    generator = BatchedLocalHFGenerator(model, tokenizer, max_batch=4)
    record = runner(tokenizer, generator, attempts=2).run(CARD, LESSON)
    assert record.attempts == 2
    assert generator.stats.largest == 2


def test_technical_failures_are_retried_not_read_as_lesson_failed(tiny):
    tokenizer, model = tiny
    record = runner(tokenizer, RecordingGenerator(model, tokenizer, fail_first=1), technical_retries=2).run(CARD, LESSON)
    assert (record.attempts, record.technical_failures) == (1, 1)
    assert record.last_technical_error == {"kind": "model_service", "message": "HTTP 503 on call 1"}


def test_a_trial_lost_to_technical_failures_has_no_attempt(tiny):
    tokenizer, model = tiny
    record = runner(tokenizer, RecordingGenerator(model, tokenizer, fail_first=99), technical_retries=2).run(CARD, LESSON)
    assert (record.attempts, record.successes, record.technical_failures) == (0, 0, 3)


def test_a_policy_that_follows_the_task_succeeds():
    tokenizer = tiny_tokenizer()
    task = next(t for t in train_tasks(CAT) if t.task_id == CARD.task_id)
    generator = ExpertPolicyGenerator(CAT, [task], tokenizer)
    options = OPTIONS.model_copy(update={"max_turns": 12, "max_new_tokens_per_turn": 64})
    trial = TrialRunner(TrialSettings(attempts=2), options, CAT, load_skillbank(SKILLBANK), tokenizer, generator)
    record = trial.run(CARD, LESSON)
    assert (record.attempts, record.successes) == (2, 2)
    assert record.rewards == [pytest.approx(1.0), pytest.approx(1.0)]


@pytest.mark.parametrize("task_id", ["validation-0-00001", "test-0-00001"])
def test_held_out_tasks_are_refused(tiny, task_id):
    tokenizer, model = tiny
    held_out = CARD.model_copy(update={"task_id": task_id})
    with pytest.raises(ValidationTaskRefused, match=f"task '{task_id}'"):
        runner(tokenizer, RecordingGenerator(model, tokenizer)).run(held_out, LESSON)


def test_many_trials_on_one_loop_keep_the_order_of_the_cards():
    tokenizer = tiny_tokenizer()
    tasks = train_tasks(CAT)[:3]
    cards = [CARD.model_copy(update={"task_id": t.task_id, "card_id": f"card-0-{n}"}) for n, t in enumerate(tasks)]
    options = OPTIONS.model_copy(update={"max_turns": 12, "max_new_tokens_per_turn": 64})
    # Three trials of two attempts in flight at once: the records follow the cards.
    generator = ExpertPolicyGenerator(CAT, tasks, tokenizer)
    trial = TrialRunner(TrialSettings(attempts=2), options, CAT, load_skillbank(SKILLBANK), tokenizer, generator)
    records = trial.run_many([(c, LESSON) for c in cards], concurrency=3)
    assert [(r.attempts, r.successes) for r in records] == [(2, 2)] * 3
    assert [sum(t.instruction in p for p in generator.prompts) > 0 for t in tasks] == [True] * 3

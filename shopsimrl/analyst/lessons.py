"""Lessons: one per failure card, from an analyst backend.

- `rules` (default): a fixed lesson per failure mode; general procedure only, no model, no gold.
- `llm`: an OpenAI-compatible chat endpoint (SGLang and vLLM serve one) through the `openai`
  client, with bounded concurrency, a timeout and retries (the client's own backoff). The model
  sees the failure mode, the instruction the policy saw and the evidence with product ids masked;
  never the gold. A timeout, an HTTP error, a lost connection or an answer that is not
  `{"lesson": "..."}` gives the card status `analysis_error` with the reason: counted, never a lesson.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shopsimrl.analyst.cards import FailureCard, Lesson
from shopsimrl.analyst.config import LessonBackendName, LessonSettings, LlmSettings
from shopsimrl.analyst.evidence import PRODUCT_ID
from shopsimrl.shop.failure_modes import FailureMode

MAX_LESSON_CHARS = 600

RULE_LESSONS: dict[FailureMode, str] = {
    FailureMode.TRUNCATED_TURN: (
        "Keep every turn short: write the tool call at once, without explanations before it, so that "
        "the call is complete before the turn's token limit."
    ),
    FailureMode.MALFORMED_TOOL_CALL: (
        "Answer every turn with exactly one tool call in the required format, with arguments that are "
        "valid JSON, and write nothing after the call."
    ),
    FailureMode.INVALID_TOOL_USE: (
        "Call only the tools offered in this turn, give every required argument with the type its "
        "schema names, and use only product ids that a search result returned."
    ),
    FailureMode.NEVER_CHECKED_OUT: (
        "Once the matching product, with every requested option selected, is in the cart, call "
        "checkout right away: an order counts only after checkout."
    ),
    FailureMode.TURN_LIMIT: (
        "Work in few turns: search with the key words of the instruction, open the best match, select "
        "its options, add it to the cart and check out. Do not repeat a search that already ran."
    ),
    FailureMode.MULTIPLE_ITEMS: (
        "Buy exactly one product. If a wrong product went into the cart, remove it with "
        "remove_from_cart before you check out."
    ),
    FailureMode.WRONG_PRODUCT_TYPE: (
        "Before adding a product to the cart, open its page and compare its product type with the "
        "type the customer asked for; if they differ, search again with the exact words of that type."
    ),
    FailureMode.ATTRIBUTE_MISMATCH: (
        "On the product page, check each attribute the customer named, one at a time; a product that "
        "differs in any attribute is the wrong product even when its type and price fit."
    ),
    FailureMode.OVER_BUDGET: (
        "Compare the product's price with the customer's price limit before adding it to the cart; "
        "when it is above the limit, search again with the max_price filter set to that limit."
    ),
    FailureMode.OPTION_NOT_SELECTED: (
        "Call select_option for every option the customer named, such as size or colour, before "
        "add_to_cart: an option left unselected counts as wrong."
    ),
    FailureMode.WRONG_OPTION: (
        "When you select an option, copy the value from the customer's instruction exactly, and read "
        "the instruction again before each select_option call."
    ),
    FailureMode.UNCLASSIFIED: (
        "Before checking out, compare the cart with every constraint of the instruction: product "
        "type, attributes, options and the price limit."
    ),
}


@dataclass(frozen=True)
class LessonResult:
    card_id: str
    lesson: Lesson | None
    error: str | None = None  # the reason of an analysis_error


class LessonBackend(Protocol):
    name: str

    def lessons(self, cards: Sequence[FailureCard]) -> list[LessonResult]: ...


class RulesBackend:
    name = LessonBackendName.RULES.value

    def lessons(self, cards: Sequence[FailureCard]) -> list[LessonResult]:
        return [self.lesson(card) for card in cards]

    def lesson(self, card: FailureCard) -> LessonResult:
        text = RULE_LESSONS[card.failure_mode]
        return LessonResult(card.card_id, Lesson(text=text, backend=self.name, failure_mode=card.failure_mode))


SYSTEM_PROMPT = (
    "You analyse failed episodes of an LLM shopping agent in a simulated shop and write one lesson for "
    "the agent's system prompt. The lesson is a general procedure that would have avoided this kind of "
    "failure on any task: never name a product id, a price, or an attribute or option value. At most "
    "three sentences. Answer with JSON only: {\"lesson\": \"...\"}."
)


def lesson_prompt(card: FailureCard) -> str:
    """What the analyst model sees: no gold values, product ids masked."""
    siblings = [
        {
            "finish": s.finish,
            "turns": s.turns,
            "reward": s.reward,
            "failure_mode": s.failure_mode.value,
            "policy_failures": s.policy_failures,
            "lines": [line.model_dump() for line in s.lines],
        }
        for s in card.siblings
    ]
    evidence = [
        {"turn": e.turn, "note": PRODUCT_ID.sub("P######", e.note), "excerpt": PRODUCT_ID.sub("P######", e.excerpt)}
        for e in card.evidence_turns[:6]
    ]
    return json.dumps(
        {
            "failure_mode": card.failure_mode.value,
            "instruction_seen_by_agent": card.audit.get("instruction"),
            "siblings": siblings,
            "evidence_turns": evidence,
        },
        ensure_ascii=False,
    )


THINK_END = "</think>"  # Qwen's end of reasoning, in the content when the server runs no reasoning parser


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the brace that closes the one at `start` (quotes inside are JSON strings), or None."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def last_json_object(text: str) -> str | None:
    """The last balanced top-level `{...}` of `text` (an opening brace that never closes is skipped)."""
    found = None
    start = text.find("{")
    while start != -1:
        end = _closing_brace(text, start)
        if end is None:
            start = text.find("{", start + 1)
        else:
            found = text[start : end + 1]
            start = text.find("{", end + 1)
    return found


def _describe(content: str) -> str:
    """An answer by its length and hash, never its text: a model's answer may quote gold values
    (it goes into failure_cards.jsonl and analysis_summary.json, which the W&B artifact carries)."""
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]
    return f"({len(content)} characters, sha256:{digest})"


def parse_lesson(content: str | None) -> str:
    """The lesson text of an answer, or ValueError saying what was wrong with it."""
    if not content or not content.strip():
        raise ValueError("empty answer")
    # A model that reasoned first (thinking on, no reasoning parser) answers after its last </think>;
    # the reasoning may hold braces of its own, so the answer is the last balanced object after it.
    answer = content.rpartition(THINK_END)[2]
    found = last_json_object(answer)
    if found is None:
        raise ValueError(f"no JSON object in the answer {_describe(content)}")
    try:
        payload = json.loads(found)
    except json.JSONDecodeError as exc:
        raise ValueError(f"answer is not valid JSON ({exc.msg}) {_describe(content)}") from None
    text = payload.get("lesson") if isinstance(payload, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"answer has no non-empty \"lesson\" string {_describe(content)}")
    text = " ".join(text.split())
    if len(text) > MAX_LESSON_CHARS:
        raise ValueError(f"lesson has {len(text)} characters, more than {MAX_LESSON_CHARS}")
    return text


class LlmBackend:
    name = LessonBackendName.LLM.value

    def __init__(self, settings: LlmSettings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        env = os.environ if environ is None else environ
        # Local SGLang/vLLM servers ignore the key; the client library insists on one.
        self.api_key = (env.get(settings.api_key_env) if settings.api_key_env else None) or "EMPTY"

    def lessons(self, cards: Sequence[FailureCard]) -> list[LessonResult]:
        return asyncio.run(self._all(cards))

    async def _all(self, cards: Sequence[FailureCard]) -> list[LessonResult]:
        import openai

        client = openai.AsyncOpenAI(
            base_url=self.settings.base_url,
            api_key=self.api_key,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
        )
        limit = asyncio.Semaphore(self.settings.concurrency)
        try:
            return list(await asyncio.gather(*(self._one(client, limit, card) for card in cards)))
        finally:
            await client.close()

    async def _one(self, client: Any, limit: asyncio.Semaphore, card: FailureCard) -> LessonResult:
        import openai

        async with limit:
            try:
                response = await client.chat.completions.create(
                    model=self.settings.model,
                    messages=[
                        {"role": "system", "content": SYSTEM_PROMPT},
                        {"role": "user", "content": lesson_prompt(card)},
                    ],
                    temperature=self.settings.temperature,
                    max_tokens=self.settings.max_tokens,
                    # SGLang and vLLM hand these to the chat template: Qwen3.5 thinks unless told not to.
                    extra_body=None
                    if self.settings.enable_thinking is None
                    else {"chat_template_kwargs": {"enable_thinking": self.settings.enable_thinking}},
                )
            except openai.APITimeoutError:
                return self._error(card, f"timeout after {self.settings.timeout_s:g} s "
                                         f"({self.settings.max_retries} retries)")  # fmt: skip
            except openai.APIStatusError as exc:
                return self._error(card, f"HTTP {exc.status_code} from {self.settings.base_url} "
                                         f"({self.settings.max_retries} retries)")  # fmt: skip
            except openai.APIConnectionError as exc:
                return self._error(card, f"connection error to {self.settings.base_url}: {exc}")
            except openai.APIResponseValidationError as exc:
                return self._error(card, f"unparseable answer: {exc}")
            except json.JSONDecodeError as exc:  # the client parses the body itself and lets this through
                return self._error(card, f"unparseable answer: the response body is not JSON ({exc.msg})")
        try:
            content = response.choices[0].message.content if response.choices else None
            text = parse_lesson(content)
        except ValueError as exc:
            return self._error(card, f"unparseable answer: {exc}")
        return LessonResult(card.card_id, Lesson(text=text, backend=self.name, failure_mode=card.failure_mode))

    @staticmethod
    def _error(card: FailureCard, reason: str) -> LessonResult:
        return LessonResult(card.card_id, None, reason)


def make_backend(settings: LessonSettings) -> LessonBackend:
    if settings.backend is LessonBackendName.LLM:
        return LlmBackend(settings.llm)
    return RulesBackend()

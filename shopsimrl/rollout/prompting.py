"""Prompt assembly: system prompt with the included skill chunks, the offered tools, the turns.

The chat format itself (Qwen-style ChatML with a `<tools>` block) belongs to the shop
(`shopsimrl.shop.render_chat`, `shopsimrl.shop.system_prompt`). This module adds the two things
the agent loop needs on top of it:

- `prompt_text(messages, tools)`: the conversation rendered with the tools offered now, ending
  with the assistant header the model continues from;
- `continuation_text(...)`: after the model's turn, the exact text that follows the model's tokens
  up to the next assistant header (end of turn, the tool observation, the new header). It is cut
  from a full re-render, so a segment's tokens stay equal to what a fresh render would give;
  the cut is checked, and a chat format that is not prefix-stable is reported as our bug
  (`TechnicalError(kind="internal")`), never silently papered over.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.errors import TechnicalError, TechnicalErrorKind
from shopsimrl.shop import ToolCallFormat, render_chat, system_prompt
from shopsimrl.shop.chat_format import IM_END

TOOL_ROLE = "tool"


def initial_messages(skill_texts: list[str], instruction: str) -> list[dict[str, str]]:
    """System prompt (skills in the order given: skillbank order) and the user instruction."""
    return [
        {"role": "system", "content": system_prompt(list(skill_texts))},
        {"role": "user", "content": instruction},
    ]


def prompt_text(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], fmt: ToolCallFormat = ToolCallFormat.JSON
) -> str:
    return render_chat(messages, tools, fmt=fmt, add_generation_prompt=True)


def continuation_text(
    messages_before: list[dict[str, Any]],
    assistant_content: str,
    new_messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    model_closed_turn: bool,
    fmt: ToolCallFormat = ToolCallFormat.JSON,
) -> str:
    """Text between the model's last token and the next assistant header.

    `model_closed_turn`: the model's tokens already end with the end-of-turn token, so it is not
    repeated here; otherwise the end-of-turn marker is part of the (loss-masked) continuation.
    """
    before = prompt_text(messages_before, tools, fmt) + assistant_content
    after = prompt_text(
        [*messages_before, {"role": "assistant", "content": assistant_content}, *new_messages], tools, fmt
    )
    if not after.startswith(before):
        raise TechnicalError(
            TechnicalErrorKind.INTERNAL,
            "chat rendering is not prefix-stable: re-rendering the conversation changed text before the "
            f"model's turn (first difference at character {_first_difference(before, after)})",
        )
    rest = after[len(before) :]
    if model_closed_turn:
        if not rest.startswith(IM_END):
            raise TechnicalError(
                TechnicalErrorKind.INTERNAL,
                f"chat rendering does not close the assistant turn with {IM_END}: {rest[:40]!r}",
            )
        rest = rest[len(IM_END) :]
    return rest


def _first_difference(a: str, b: str) -> int:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return min(len(a), len(b))

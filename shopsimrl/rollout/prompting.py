"""Prompt assembly: the conversation as the model sees it (docs/rollout.md, "The checkpoint's chat template").

- `initial_messages(skill_texts, instruction)`: the system prompt (base prompt + skill chunks in
  skillbank order) and the user instruction;
- `ChatRenderer(tokenizer, fmt)`: renders a conversation for the checkpoint the tokenizer belongs to.

      renderer = ChatRenderer(tokenizer, ToolCallFormat.XML)
      prompt = renderer.prompt_text(messages, tools)      # ends with the assistant header
      rest = renderer.continuation_text(messages_before, content, [tool_message], model_closed_turn=True)

The opening (system + user turn and the generation prompt) is rendered by the checkpoint's own
chat template (`tokenizer.apply_chat_template` with the tools), so training, gate, eval and serving
see the same system turn for any model. A template that ignores tools gets our tool block inside
the system message (`shopsimrl.shop.system_with_tools`) and still renders it. Later turns are never
re-rendered by the template: the model's own text, then our ChatML pieces (end of turn, the
`<tool_response>` user turn) and the template's generation prompt, so a segment's tokens only ever
grow. `continuation_text` is cut from a full re-render of the later turns and checked, and a
rendering that is not prefix-stable is reported as our bug (`TechnicalError(kind="internal")`),
never silently papered over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl.errors import TechnicalError, TechnicalErrorKind
from shopsimrl.shop import (
    ASSISTANT_TURN_END,
    ToolCallFormat,
    assistant_text,
    system_prompt,
    system_with_tools,
    tool_response_text,
    turn_text,
)
from shopsimrl.shop.chat_format import IM_END

TOOL_ROLE = "tool"
# A tool only this probe offers: a template "renders tools" when its name shows up in the text.
PROBE_TOOL_NAME = "shopsim_probe_tool"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL_NAME,
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {}},
    },
}
_PROBE_MESSAGES = ({"role": "system", "content": "S"}, {"role": "user", "content": "U"})


def initial_messages(skill_texts: list[str], instruction: str) -> list[dict[str, str]]:
    """System prompt (skills in the order given: skillbank order) and the user instruction."""
    return [
        {"role": "system", "content": system_prompt(list(skill_texts))},
        {"role": "user", "content": instruction},
    ]


class ChatRenderer:
    """The conversation for one checkpoint: its template's opening, then token-exact later turns.

    `renders_tools`: the template writes the tools it is given (Qwen-style); otherwise our tool block
    goes into the system message (fallback). `assistant_header`: the template's generation prompt,
    which also opens every later assistant turn. `template_kwargs`: `enable_thinking=False` for the
    XML format (Qwen3.5's template then opens assistant turns with an empty think block).
    """

    def __init__(self, tokenizer: Any, fmt: ToolCallFormat | str = ToolCallFormat.JSON):
        self.fmt = ToolCallFormat(fmt)
        self.tokenizer = tokenizer
        self.template_kwargs: dict[str, Any] = (
            {"enable_thinking": False} if self.fmt is ToolCallFormat.XML else {}
        )
        probe = list(_PROBE_MESSAGES)
        self.renders_tools = PROBE_TOOL_NAME in self._render(
            probe, [_PROBE_TOOL], add_generation_prompt=False
        )
        messages, tools = self.template_messages(probe, [_PROBE_TOOL])
        closed = self._render(messages, tools, add_generation_prompt=False)
        opened = self._render(messages, tools, add_generation_prompt=True)
        if len(opened) <= len(closed) or not opened.startswith(closed):
            raise ValueError(
                "the chat template's generation prompt is not an extension of the conversation: "
                f"{closed[-40:]!r} became {opened[-40:]!r}"
            )
        self.assistant_header = opened[len(closed) :]

    def template_messages(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and tools to hand the template for our conversation.

        A template that renders tools gets them as they are (tool calls and tool messages in the
        OpenAI shape are the caller's). Otherwise the tool block joins the system message, tool
        results become `<tool_response>` user turns and assistant tool calls become text: what a
        client serving this checkpoint must send to get the prompt the policy was trained on.
        """
        if self.renders_tools:
            return [dict(m) for m in messages], list(tools)
        converted = []
        for i, message in enumerate(messages):
            role = message["role"]
            if role == "system" and i == 0:
                converted.append(
                    {"role": "system", "content": system_with_tools(message["content"], tools, self.fmt)}
                )
            elif role == TOOL_ROLE:
                converted.append({"role": "user", "content": tool_response_text(message["content"])})
            elif role == "assistant":
                converted.append({"role": "assistant", "content": assistant_text(message, self.fmt)})
            else:
                converted.append(dict(message))
        return converted, None

    def prompt_text(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
        """The conversation with the tools offered now, ending with the assistant header."""
        _check_opening(messages)
        template_messages, template_tools = self.template_messages(messages[:2], tools)
        opening = self._render(template_messages, template_tools, add_generation_prompt=True)
        if not opening.endswith(self.assistant_header):
            raise ValueError(
                f"the chat template's generation prompt changed with the conversation: {opening[-40:]!r} "
                f"does not end with {self.assistant_header!r}"
            )
        return opening + self._after_opening(messages[2:])

    def continuation_text(
        self,
        messages_before: Sequence[dict[str, Any]],
        assistant_content: str,
        new_messages: Sequence[dict[str, Any]],
        *,
        model_closed_turn: bool,
    ) -> str:
        """Text between the model's last token and the next assistant header.

        `model_closed_turn`: the model's tokens already end with the end-of-turn token, so it is not
        repeated here; otherwise the end-of-turn marker is part of the (loss-masked) continuation.
        """
        _check_opening(messages_before)
        later = list(messages_before[2:])
        before = self._after_opening(later) + assistant_content
        after = self._after_opening(
            [*later, {"role": "assistant", "content": assistant_content}, *new_messages]
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

    def _after_opening(self, later: Sequence[dict[str, Any]]) -> str:
        # The opening ends with the header of the first later assistant turn; every other one and
        # the final generation prompt get the template's header.
        parts = []
        for i, message in enumerate(later):
            if message["role"] == "assistant":
                if i > 0:
                    parts.append(self.assistant_header)
                parts.append(assistant_text(message, self.fmt) + ASSISTANT_TURN_END)
            else:
                parts.append(turn_text(message, self.fmt))
        if later:
            parts.append(self.assistant_header)
        return "".join(parts)

    def _render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False,
            **self.template_kwargs,
        )  # fmt: skip


def _check_opening(messages: Sequence[dict[str, Any]]) -> None:
    roles = [m["role"] for m in messages[:2]]
    if roles != ["system", "user"]:
        raise ValueError(f"a conversation opens with a system and a user message; got roles {roles}")


def _first_difference(a: str, b: str) -> int:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return min(len(a), len(b))

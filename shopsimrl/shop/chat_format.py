"""Our ChatML rendering of conversations with tools: Qwen-style turns, two tool-call syntaxes.

Two tool-call syntaxes (docs/environment.md, "Tool-call format"):
- `ToolCallFormat.JSON` (Qwen3, the default): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
- `ToolCallFormat.XML` (Qwen3.5's own template): `<tool_call>\n<function=NAME>\n<parameter=ARG>\nvalue\n</parameter>\n</function>\n</tool_call>`,
  whose assistant turns also open with an empty `<think>` block (thinking disabled).

The parser (`tool_calls.py`) accepts both, whatever was rendered.

What the model sees is rendered by `shopsimrl.rollout.prompting.ChatRenderer` (docs/rollout.md, "The
checkpoint's chat template"): its opening turns come from the checkpoint's own chat template, its
later turns are the pieces below (`tool_response_turn`, `ASSISTANT_TURN_END`). For a template that
ignores tools, the tool block goes into the system message exactly as `system_with_tools` writes it.
`render_chat` is this module's whole-conversation rendering: what a plain ChatML template (SmolLM2,
the tiny test model) gives with that fallback, and what `shopsimrl shop play` shows.

Rendering is prefix-stable: a conversation renders as the concatenation of its turns, so
`render_chat(m[:k]) + turn_text(m[k]) == render_chat(m[:k+1])`, and with a generation prompt the
rollout can append `continuation_after_assistant(observation)` to the tokens the model produced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from shopsimrl.shop.tool_calls import ToolCall

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ASSISTANT_TURN_END = IM_END + "\n"  # what closes an assistant turn (the model emits <|im_end|>)
EMPTY_THINK = "<think>\n\n</think>\n\n"


class ToolCallFormat(StrEnum):
    JSON = "json"
    XML = "xml"


BASE_SYSTEM_PROMPT = (
    "You are a shopping assistant in an online shop. A customer describes one product they want: "
    "its type, attributes, option values (such as size or colour) and a price limit. Find it with "
    "the tools, open product pages to check attributes, offered options and price, select every "
    "requested option, add exactly one matching product to the cart and check out.\n"
    "Call exactly one tool per turn and write nothing after the tool call."
)
SKILLS_HEADING = "# Shopping skills"

_JSON_INSTRUCTIONS = (
    "For each function call, write a JSON object with the function name and its arguments inside "
    "<tool_call></tool_call> tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
_XML_INSTRUCTIONS = (
    "To call a function, reply with a block of exactly this form and nothing after it:\n\n"
    "<tool_call>\n<function=the_function_name>\n<parameter=first_parameter>\nvalue of the first parameter\n"
    "</parameter>\n<parameter=second_parameter>\nvalue of the second parameter\n</parameter>\n"
    "</function>\n</tool_call>\n\n"
    "Give every required parameter. Reasoning, if any, goes before the block, never after it."
)


def system_prompt(skill_texts: Sequence[str] = ()) -> str:
    """The base system prompt with the given skill chunks appended, in the given order."""
    chunks = [t.strip() for t in skill_texts if t.strip()]
    if not chunks:
        return BASE_SYSTEM_PROMPT
    return BASE_SYSTEM_PROMPT + "\n\n" + SKILLS_HEADING + "\n\n" + "\n\n".join(chunks)


def _tools_block(tools: Sequence[dict], fmt: ToolCallFormat) -> str:
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    if fmt is ToolCallFormat.JSON:
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{lines}\n</tools>\n\n{_JSON_INSTRUCTIONS}"
        )
    return f"# Tools\n\nYou have access to the following functions:\n\n<tools>\n{lines}\n</tools>\n\n{_XML_INSTRUCTIONS}"


def _xml_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)  # numbers, booleans, objects, arrays


def format_tool_call(call: ToolCall | dict, fmt: ToolCallFormat | str = ToolCallFormat.JSON) -> str:
    """The exact text the model must write to make this call."""
    name, arguments = (
        (call.name, call.arguments) if isinstance(call, ToolCall) else (call["name"], call["arguments"])
    )
    if ToolCallFormat(fmt) is ToolCallFormat.JSON:
        return (
            "<tool_call>\n"
            + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            + "\n</tool_call>"
        )
    params = "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def assistant_header(fmt: ToolCallFormat | str = ToolCallFormat.JSON) -> str:
    """What opens an assistant turn (the generation prompt)."""
    think = EMPTY_THINK if ToolCallFormat(fmt) is ToolCallFormat.XML else ""
    return f"{IM_START}assistant\n{think}"


def tool_response_text(observation: str) -> str:
    """A tool result wrapped as Qwen templates wrap tool messages (the content of its user turn)."""
    return f"<tool_response>\n{observation}\n</tool_response>"


def tool_response_turn(observation: str) -> str:
    """A tool result as the next (user-role) turn, as Qwen templates render tool messages."""
    return f"{IM_START}user\n{tool_response_text(observation)}{IM_END}\n"


def continuation_after_assistant(observation: str, fmt: ToolCallFormat | str = ToolCallFormat.JSON) -> str:
    """Text between the end of the model's tool call and the start of its next turn:
    the assistant turn end, the tool-response turn and the next assistant header."""
    return ASSISTANT_TURN_END + tool_response_turn(observation) + assistant_header(fmt)


def system_with_tools(
    content: str, tools: Sequence[dict], fmt: ToolCallFormat | str = ToolCallFormat.JSON
) -> str:
    """The system message's text with our tool block (none without tools): the text of our system turn."""
    if not tools:
        return content
    block = _tools_block(tools, ToolCallFormat(fmt))
    if not content:
        return block
    # Qwen3 puts the system text before the tools, Qwen3.5 after them.
    return f"{content}\n\n{block}" if ToolCallFormat(fmt) is ToolCallFormat.JSON else f"{block}\n\n{content}"


def assistant_text(message: dict, fmt: ToolCallFormat | str = ToolCallFormat.JSON) -> str:
    """An assistant message's text after its header: the content verbatim, then any `tool_calls` formatted."""
    fmt = ToolCallFormat(fmt)
    content = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if calls:
        rendered = "\n".join(format_tool_call(c, fmt) for c in calls)
        content = f"{content}\n{rendered}" if content else rendered
    return content


def turn_text(
    message: dict, fmt: ToolCallFormat | str = ToolCallFormat.JSON, tools: Sequence[dict] = ()
) -> str:
    """The rendered text of one message (system messages take the tool list)."""
    fmt = ToolCallFormat(fmt)
    role = message["role"]
    if role == "system":
        return f"{IM_START}system\n{system_with_tools(message.get('content') or '', tools, fmt)}{IM_END}\n"
    if role == "user":
        return f"{IM_START}user\n{message['content']}{IM_END}\n"
    if role == "assistant":
        return assistant_header(fmt) + assistant_text(message, fmt) + ASSISTANT_TURN_END
    if role == "tool":
        return tool_response_turn(message["content"])
    raise ValueError(f"unknown message role {role!r}; expected system, user, assistant or tool")


def render_chat(
    messages: Sequence[dict],
    tools: Sequence[dict] = (),
    *,
    fmt: ToolCallFormat | str = ToolCallFormat.JSON,
    add_generation_prompt: bool = False,
) -> str:
    """Render messages ({"role", "content"[, "tool_calls"]}) as one ChatML string.

    `tools` (OpenAI function schemas) go into the system turn; a conversation without a system
    message gets one holding just the tools. Assistant content is kept verbatim, so the text the
    model generated is reproduced exactly.
    """
    out = []
    if tools and (not messages or messages[0]["role"] != "system"):
        out.append(turn_text({"role": "system", "content": ""}, fmt, tools))
    for i, message in enumerate(messages):
        out.append(turn_text(message, fmt, tools if i == 0 else ()))
    if add_generation_prompt:
        out.append(assistant_header(fmt))
    return "".join(out)

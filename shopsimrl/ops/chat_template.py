"""Does our `render_chat` produce the token ids the checkpoint's own chat template produces?

The production model sees prompts rendered by `shopsimrl.shop.render_chat`, not by
`tokenizer.apply_chat_template`, because the rollout must extend the exact tokens the model saw
(docs/rollout.md, "Our renderer and the checkpoint's template"). This module proves the two agree
on the cases that matter, with a real ShopSim episode:

- `first_turn`: system prompt + offered tools + user instruction, with the generation prompt;
- `after_tool`: the same, then the assistant's tool call and the tool response, with the
  generation prompt of the next turn.

`compare_with_template(tokenizer, fmt)` returns one line per case whose ids differ (the first
differing position and the text around it on both sides); empty means they agree. It runs in
tests against a template built in the test, and on the host against the production checkpoint
(`shopsimrl slime check-chat-template /models/Qwen3.5-4B`, and in the container's preflight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shopsimrl.shop import ExpertPolicy, ShopEnv, ToolCallFormat, generate_catalog, load_split, render_chat
from shopsimrl.shop.chat_format import system_prompt

_CONTEXT_TOKENS = 8


@dataclass(frozen=True)
class ChatCase:
    name: str
    messages: list[dict[str, Any]]  # ours: assistant tool calls as {"name", "arguments"}
    tools: list[dict[str, Any]]


def shop_cases() -> list[ChatCase]:
    """The first turn and the turn after a tool response of the first train task (expert's first call)."""
    catalog = generate_catalog(seed=0, num_products=200)
    task = load_split(catalog, "train", limit=1)[0]
    env = ShopEnv(catalog)
    instruction, _ = env.reset(task=task, seed=0)
    first = [{"role": "system", "content": system_prompt([])}, {"role": "user", "content": instruction}]
    tools = env.offered_tools()
    call = ExpertPolicy(noise=0.0, seed=0).next_action(env)
    observation, *_ = env.step(call)
    after = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [{"name": call.name, "arguments": call.arguments}]},
        {"role": "tool", "content": observation},
    ]
    return [ChatCase("first_turn", first, tools), ChatCase("after_tool", after, env.offered_tools())]


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI shape chat templates read (tool calls under `function`)."""
    converted = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {
                **message,
                "tool_calls": [
                    {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls
                ],
            }
        converted.append(message)
    return converted


def _template_ids(tokenizer: Any, case: ChatCase, fmt: ToolCallFormat) -> list[int]:
    # Qwen3.5's template renders an empty think block in the generation prompt when thinking is
    # off, which is what our XML format does; the JSON (Qwen3) format has no think block.
    kwargs = {"enable_thinking": False} if fmt is ToolCallFormat.XML else {}
    ids = tokenizer.apply_chat_template(
        openai_messages(case.messages), tools=case.tools, add_generation_prompt=True, tokenize=True,
        return_dict=False, **kwargs,
    )  # fmt: skip
    return list(ids)


def _describe(tokenizer: Any, case: str, ours: list[int], theirs: list[int]) -> str:
    position = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    window = slice(max(0, position - _CONTEXT_TOKENS), position + _CONTEXT_TOKENS)
    return (
        f"{case}: first difference at token {position} of {len(ours)} (ours) / {len(theirs)} (template): "
        f"ours {tokenizer.decode(ours[window])!r} vs template {tokenizer.decode(theirs[window])!r}"
    )


def compare_with_template(tokenizer: Any, fmt: ToolCallFormat | str = ToolCallFormat.XML) -> list[str]:
    """One line per case where our rendering's ids differ from the tokenizer's chat template."""
    fmt = ToolCallFormat(fmt)
    problems = []
    for case in shop_cases():
        text = render_chat(case.messages, case.tools, fmt=fmt, add_generation_prompt=True)
        ours = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        theirs = _template_ids(tokenizer, case, fmt)
        if ours != theirs:
            problems.append(_describe(tokenizer, case.name, ours, theirs))
    return problems

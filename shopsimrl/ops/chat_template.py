"""Does the model see the tokens its own chat template produces? The rollout against the template.

The rollout renders prompts with `shopsimrl.rollout.prompting.ChatRenderer`: the opening by the
checkpoint's chat template, later turns appended token-exactly (docs/rollout.md, "The checkpoint's
chat template"). This module runs the noiseless scripted expert on the first train task through the
real agent loop (`run_trajectory`) and, at every turn, compares the ids the loop handed the
generator with the ids the template gives for the same conversation, sent the way a client serving
the checkpoint sends it:

- a template that renders tools gets them with the expert's calls as OpenAI `tool_calls` and the
  observations as `tool` messages;
- a template that ignores tools gets `ChatRenderer.template_messages` (our tool block in the system
  message, tool results as `<tool_response>` user turns, calls as assistant text).

Cases are `turn_1` (system + tools + user, generation prompt), `turn_2` (after the first tool
response), ... to the expert's last turn, so a continuation inside a segment and a segment opened
for a new tool set are both covered. `compare_with_template(tokenizer, fmt)` returns one line per
turn whose ids differ (the first differing position and the text around it on both sides); empty
means they agree. It runs in tests against every template available offline, and on the host
against the production checkpoint (`shopsimrl slime check-chat-template /models/Qwen3.5-4B`, and
in the container's preflight).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from shopsimrl.config.options import ShopSimOptions
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.generators import FinishReason, GenerationAborted, GenerationResult
from shopsimrl.rollout.prompting import ChatRenderer
from shopsimrl.shop import (
    ExpertPolicy,
    ShopEnv,
    ToolCall,
    ToolCallFormat,
    format_tool_call,
    generate_catalog,
    load_split,
)
from shopsimrl.shop.chat_format import IM_END

_CONTEXT_TOKENS = 8
_NUM_PRODUCTS = 200
_MAX_TURNS = 12


@dataclass(frozen=True)
class ExpertTurn:
    """One expert call and the tools offered when it was made."""

    call: ToolCall
    tools: list[dict[str, Any]]


def expert_turns(fmt: ToolCallFormat | str = ToolCallFormat.XML) -> tuple[Any, Any, list[ExpertTurn]]:
    """The catalog, the first train task and the noiseless expert's turns on it (deterministic)."""
    catalog = generate_catalog(seed=0, num_products=_NUM_PRODUCTS)
    task = load_split(catalog, "train", limit=1)[0]
    env = ShopEnv(catalog, max_turns=_MAX_TURNS)
    env.reset(task=task, seed=0)
    expert = ExpertPolicy(noise=0.0, seed=0)
    turns = []
    while True:
        tools = env.offered_tools()
        call = expert.next_action(env)
        turns.append(ExpertTurn(call, tools))
        _, _, terminated, truncated, _ = env.step(format_tool_call(call, fmt))
        if terminated or truncated:
            return catalog, task, turns


def openai_messages(messages: list[dict[str, Any]], calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI shape a tool-aware template reads: the k-th assistant message's
    text replaced by `calls[k]` under `tool_calls`."""
    converted = []
    assistant_turns = iter(calls)
    for message in messages:
        if message["role"] == "assistant":
            call = next(assistant_turns)
            message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                ],
            }
        converted.append(message)
    return converted


class _RecordingExpert:
    """A Generator that writes the expert's calls (then the end-of-turn token) and records its inputs."""

    def __init__(self, tokenizer: Any, texts: list[str]):
        end = tokenizer.convert_tokens_to_ids(IM_END)
        if not isinstance(end, int) or end == tokenizer.unk_token_id:
            end = tokenizer.eos_token_id
        self._turns = [list(tokenizer.encode(text, add_special_tokens=False)) + [int(end)] for text in texts]
        self.inputs: list[list[int]] = []

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        self.inputs.append(list(input_ids))
        if len(self.inputs) > len(self._turns):
            raise GenerationAborted("the chat-template check's expert has no more turns")
        ids = self._turns[len(self.inputs) - 1]
        return GenerationResult(token_ids=ids, log_probs=[0.0] * len(ids), finish_reason=FinishReason.STOP)


def _describe(tokenizer: Any, case: str, ours: list[int], theirs: list[int]) -> str:
    position = next(
        (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
    )
    window = slice(max(0, position - _CONTEXT_TOKENS), position + _CONTEXT_TOKENS)
    return (
        f"{case}: first difference at token {position} of {len(ours)} (ours) / {len(theirs)} (template): "
        f"ours {tokenizer.decode(ours[window])!r} vs template {tokenizer.decode(theirs[window])!r}"
    )


def compare_with_template(tokenizer: Any, fmt: ToolCallFormat | str = ToolCallFormat.XML) -> list[str]:
    """One line per expert turn whose rollout ids differ from the tokenizer's chat template."""
    fmt = ToolCallFormat(fmt)
    catalog, task, turns = expert_turns(fmt)
    generator = _RecordingExpert(tokenizer, [format_tool_call(t.call, fmt) for t in turns])
    options = ShopSimOptions(
        run_dir="chat-template-check", tool_call_format=fmt.value, max_turns=_MAX_TURNS,
        max_new_tokens_per_turn=1024, max_context_tokens=1 << 20,
    )  # fmt: skip
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=generator, options=options,
        skill_texts=[], sampling_params={},
    ))  # fmt: skip
    error = trajectory.outcome.technical_error
    if error is not None:
        return [f"the agent loop failed on the expert's episode: {error.kind}: {error.message}"]
    if len(generator.inputs) != len(turns):
        return [
            f"the agent loop asked for {len(generator.inputs)} turns; the expert's episode has {len(turns)}"
        ]
    renderer = ChatRenderer(tokenizer, fmt)
    problems = []
    for k, (ours, turn) in enumerate(zip(generator.inputs, turns, strict=True)):
        messages = trajectory.messages[: 2 + 2 * k]
        if renderer.renders_tools:
            template_messages, tools = openai_messages(messages, [t.call for t in turns[:k]]), turn.tools
        else:
            template_messages, tools = renderer.template_messages(messages, turn.tools)
        theirs = list(tokenizer.apply_chat_template(
            template_messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False,
            **renderer.template_kwargs,
        ))  # fmt: skip
        if ours != theirs:
            problems.append(_describe(tokenizer, f"turn_{k + 1}", ours, theirs))
    return problems

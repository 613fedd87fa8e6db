"""A test `Generator` that replays the scripted expert's tool-call text as a model would."""

from __future__ import annotations

from shopsimrl.rollout.generators import FinishReason, GenerationResult
from shopsimrl.shop import ExpertPolicy, ShopEnv, ToolCallFormat, format_tool_call

IM_END_ID = 258  # tiny tokenizer: <|im_end|>
MODEL_LOGPROB = -0.25


class ExpertTextGenerator:
    """Replays the scripted expert as a model would: its tool-call text, tokenised, then <|im_end|>.

    A shadow environment follows the same actions so the expert always sees the true state.
    `fail_on_call` makes call number k raise the given error instead (k counts from 1).
    """

    def __init__(
        self,
        catalog,
        task,
        tokenizer,
        fail_on_call: int | None = None,
        error: Exception | None = None,
        fmt: ToolCallFormat = ToolCallFormat.XML,  # the options' default: Qwen3.5's format
    ):
        self.fmt = fmt
        self.env = ShopEnv(catalog, max_turns=12)
        self.env.reset(task=task, seed=0)
        self.expert = ExpertPolicy(noise=0.0, seed=0)
        self.tokenizer = tokenizer
        self.calls: list[tuple[list[int], dict]] = []
        self.fail_on_call = fail_on_call
        self.error = error

    async def generate(self, input_ids, sampling_params):
        self.calls.append((list(input_ids), dict(sampling_params)))
        if len(self.calls) == self.fail_on_call:
            raise self.error
        text = format_tool_call(self.expert.next_action(self.env), self.fmt)
        self.env.step(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [IM_END_ID]
        return GenerationResult(ids, [MODEL_LOGPROB] * len(ids), FinishReason.STOP, text=text + "<|im_end|>")

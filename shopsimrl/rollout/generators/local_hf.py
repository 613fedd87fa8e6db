"""`LocalHFGenerator`: sampling from a transformers causal LM in-process (CPU backend and tests).

Log-probs: `log_probs[i]` is `log_softmax(logits / temperature)[token_ids[i]]` over the full
vocabulary (temperature 0, i.e. greedy, uses temperature 1). top-p and top-k only choose which
token is drawn; they do not renormalise the reported log-prob. This is the distribution slime's
trainer recomputes (Megatron actor: `logits.div_(args.rollout_temperature)` then log-softmax over
the vocabulary) and the one SGLang reports by default, so the local backend's
`train/train_rollout_logprob_abs_diff` measures numerics only, as on the GPU backend.

Generation runs synchronously inside the coroutine (CPU-bound work gains nothing from threads on
the local backend) and yields to the event loop once per call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from shopsimrl.rollout.generators.base import FinishReason, GenerationResult
from shopsimrl.rollout.generators.sampling import SamplingParams, default_stop_ids, sample_token


class LocalHFGenerator:
    """Token-by-token sampling with a KV cache. Stops on eos, `<|im_end|>` and `stop_token_ids`."""

    def __init__(self, model: Any, tokenizer: Any, *, seed: int = 0, stop_token_ids: list[int] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self._rng = torch.Generator(device="cpu").manual_seed(seed)
        self.stop_token_ids = set(stop_token_ids or ()) | default_stop_ids(tokenizer)

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        result = self.generate_sync(input_ids, sampling_params)
        await asyncio.sleep(0)
        return result

    def generate_sync(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        if not input_ids:
            raise ValueError("input_ids is empty: a generation needs at least one prompt token")
        params = SamplingParams.from_dict(sampling_params)
        rng = self._rng
        if params.seed is not None:
            rng = torch.Generator(device="cpu").manual_seed(params.seed)
        stop_ids = self.stop_token_ids | set(params.stop_token_ids)
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()  # dropout off while sampling; restored below
        token_ids: list[int] = []
        log_probs: list[float] = []
        reason = FinishReason.LENGTH
        try:
            with torch.inference_mode():
                output = self.model(
                    input_ids=torch.tensor([input_ids], device=device), use_cache=True, logits_to_keep=1
                )
                for _ in range(params.max_new_tokens):
                    logits = output.logits[0, -1].float().cpu()
                    token, log_prob = sample_token(logits, params, rng)
                    token_ids.append(token)
                    log_probs.append(log_prob)
                    if token in stop_ids or self._hits_stop_string(token_ids, params.stop):
                        reason = FinishReason.STOP
                        break
                    output = self.model(
                        input_ids=torch.tensor([[token]], device=device),
                        past_key_values=output.past_key_values,
                        use_cache=True,
                    )
        finally:
            if was_training:
                self.model.train()
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return GenerationResult(token_ids=token_ids, log_probs=log_probs, finish_reason=reason, text=text)

    def _hits_stop_string(self, token_ids: list[int], stops: tuple[str, ...]) -> bool:
        if not stops:
            return False
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return any(text.endswith(stop) for stop in stops)

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

IM_END = "<|im_end|>"


class LocalHFGenerator:
    """Token-by-token sampling with a KV cache. Stops on eos, `<|im_end|>` and `stop_token_ids`."""

    def __init__(self, model: Any, tokenizer: Any, *, seed: int = 0, stop_token_ids: list[int] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self._rng = torch.Generator(device="cpu").manual_seed(seed)
        self.stop_token_ids = set(stop_token_ids or ()) | _default_stop_ids(tokenizer)

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        result = self.generate_sync(input_ids, sampling_params)
        await asyncio.sleep(0)
        return result

    def generate_sync(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        if not input_ids:
            raise ValueError("input_ids is empty: a generation needs at least one prompt token")
        params = _SamplingParams.from_dict(sampling_params)
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
                    token, log_prob = _sample(logits, params, rng)
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


class _SamplingParams:
    """The subset of SGLang's sampling params the local generator honours (others are ignored)."""

    def __init__(
        self,
        temperature: float,
        top_p: float,
        top_k: int,
        max_new_tokens: int,
        stop: tuple[str, ...],
        stop_token_ids: tuple[int, ...],
        seed: int | None,
    ):
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.max_new_tokens = max_new_tokens
        self.stop = stop
        self.stop_token_ids = stop_token_ids
        self.seed = seed

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> _SamplingParams:
        problems = []
        temperature = float(raw.get("temperature", 1.0))
        top_p = float(raw.get("top_p", 1.0))
        top_k = int(raw.get("top_k", -1))
        max_new_tokens = int(raw.get("max_new_tokens", 16))  # SGLang's default
        if temperature < 0:
            problems.append(f"temperature={temperature} is negative")
        if not 0.0 < top_p <= 1.0:
            problems.append(f"top_p={top_p} is outside (0, 1]")
        if top_k == 0 or top_k < -1:
            problems.append(f"top_k={top_k} must be -1 (off) or >= 1")
        if max_new_tokens < 0:
            problems.append(f"max_new_tokens={max_new_tokens} is negative")
        if problems:
            raise ValueError("invalid sampling_params: " + "; ".join(problems))
        stop = raw.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        seed = raw.get("sampling_seed")
        return cls(
            temperature,
            top_p,
            top_k,
            max_new_tokens,
            stop,
            tuple(int(t) for t in raw.get("stop_token_ids") or ()),
            None if seed is None else int(seed),
        )


def _default_stop_ids(tokenizer: Any) -> set[int]:
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def _sample(logits: torch.Tensor, params: _SamplingParams, rng: torch.Generator) -> tuple[int, float]:
    """Draw one token; return it with its log-prob under softmax(logits / T) (T=1 when greedy)."""
    temperature = params.temperature if params.temperature > 0 else 1.0
    log_dist = torch.log_softmax(logits / temperature, dim=-1)
    if params.temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(log_dist[token])
    weights = log_dist.exp()
    if params.top_k > 0 and params.top_k < weights.numel():
        kth = torch.topk(weights, params.top_k).values[-1]
        weights = torch.where(weights >= kth, weights, torch.zeros_like(weights))
    if params.top_p < 1.0:
        sorted_weights, order = torch.sort(weights, descending=True)
        cumulative = torch.cumsum(sorted_weights, dim=0) / sorted_weights.sum()
        # keep tokens until the cumulative mass first reaches top_p (the top token is always kept)
        drop_sorted = (cumulative - sorted_weights / sorted_weights.sum()) >= params.top_p
        weights = weights.clone()
        weights[order[drop_sorted]] = 0.0
    token = int(torch.multinomial(weights, 1, generator=rng))
    return token, float(log_dist[token])

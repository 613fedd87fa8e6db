"""`LocalHFGenerator`: sampling from a transformers causal LM in-process (CPU backend and tests).

Log-probs: `log_probs[i]` is `log_softmax(logits / temperature)[token_ids[i]]` over the full
vocabulary (temperature 0, i.e. greedy, uses temperature 1). top-p and top-k only choose which
token is drawn; they do not renormalise the reported log-prob. This is the distribution slime's
trainer recomputes (Megatron actor: `logits.div_(args.rollout_temperature)` then log-softmax over
the vocabulary) and the one SGLang reports by default, so the local backend's
`train/train_rollout_logprob_abs_diff` measures numerics only, as on the GPU backend.

Generation runs synchronously inside the coroutine (CPU-bound work gains nothing from threads on
the local backend) and yields to the event loop once per call.

KV reuse (`prefix_cache=True`, the default): the prompt is encoded only past the longest prefix the
`PrefixCache` holds (an earlier turn of the same episode, a sibling's prompt), and what the call
ran is stored for the next turn; `prefix_cache=False` encodes every prompt whole. Both give the
same tokens, log-probs within 1e-4 in float32 (tests/rollout/test_rollout_cached_generator.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from shopsimrl.rollout.generators.base import FinishReason, GenerationResult
from shopsimrl.rollout.generators.head_fold import folded_head
from shopsimrl.rollout.generators.precision import InferencePrecision, kv_cache_dtype
from shopsimrl.rollout.generators.prefill import encode_rows, row_layers
from shopsimrl.rollout.generators.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache, PrefixCacheStats
from shopsimrl.rollout.generators.sampling import SamplingParams, default_stop_ids, sample_token


class LocalHFGenerator:
    """Token-by-token sampling with a KV cache. Stops on eos, `<|im_end|>` and `stop_token_ids`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        seed: int = 0,
        stop_token_ids: list[int] | None = None,
        prefix_cache: bool = True,
        cache_max_bytes: int = DEFAULT_MAX_BYTES,
        compute_dtype: torch.dtype = torch.float32,
    ):
        # bfloat16: the forwards under autocast with bfloat16 linear weights (precision.py); an unknown
        # dtype is an error here, not at the first call.
        self._precision = InferencePrecision(model, compute_dtype)
        self.compute_dtype = compute_dtype
        self.model = model
        self.tokenizer = tokenizer
        self._rng = torch.Generator(device="cpu").manual_seed(seed)
        self.stop_token_ids = set(stop_token_ids or ()) | default_stop_ids(tokenizer)
        cache_dtype = kv_cache_dtype(compute_dtype)  # bfloat16 caches under bfloat16 (prefix_cache.py)
        self._prefix_cache = PrefixCache(cache_max_bytes, kv_dtype=cache_dtype) if prefix_cache else None

    @property
    def cache_stats(self) -> PrefixCacheStats | None:
        """The prefix cache's counters; None when KV reuse is off (or the model cannot use it)."""
        return None if self._prefix_cache is None else self._prefix_cache.stats

    def clear_cache(self) -> None:
        """Free every stored KV cache now (they are also dropped when the weights change)."""
        if self._prefix_cache is not None:
            self._prefix_cache.clear()

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
            with torch.inference_mode(), self._precision.forwards():
                cache, logits = self._prefill(input_ids, device)
                for _ in range(params.max_new_tokens):
                    token, log_prob = sample_token(logits, params, rng)
                    token_ids.append(token)
                    log_probs.append(log_prob)
                    if token in stop_ids or self._hits_stop_string(token_ids, params.stop):
                        reason = FinishReason.STOP
                        break
                    output = self.model(
                        input_ids=torch.tensor([[token]], device=device),
                        past_key_values=cache,
                        use_cache=True,
                    )
                    cache, logits = output.past_key_values, output.logits[0, -1].float().cpu()
                if self._prefix_cache is not None and token_ids:
                    # What the model has seen serves the next turn: a stop token was never fed, the
                    # last token of a turn cut at max_new_tokens was.
                    seen = (list(input_ids) + token_ids)[: cache.get_seq_length()]
                    self._prefix_cache.insert(seen, row_layers(cache, 0, 0, len(seen)))
        finally:
            if was_training:
                self.model.train()
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return GenerationResult(token_ids=token_ids, log_probs=log_probs, finish_reason=reason, text=text)

    def _prefill(self, input_ids: list[int], device: Any) -> tuple[Any, torch.Tensor]:
        if self._prefix_cache is not None:
            encoded = encode_rows(self.model, [list(input_ids)], self._prefix_cache)
            if encoded is not None:
                # One sequence decoding alone: a DynamicCache's growth by torch.cat copies little.
                return self._prefix_cache.new_cache(encoded.layers[0]), encoded.logits[0]
            self._prefix_cache = None  # this model's cache layers cannot be cut: encode whole from now on
        with folded_head(self.model):
            output = self.model(
                input_ids=torch.tensor([input_ids], device=device), use_cache=True, logits_to_keep=1
            )
        return output.past_key_values, output.logits[0, -1].float().cpu()

    def _hits_stop_string(self, token_ids: list[int], stops: tuple[str, ...]) -> bool:
        if not stops:
            return False
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return any(text.endswith(stop) for stop in stops)

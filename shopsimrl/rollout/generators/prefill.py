"""Prefill: the prompts of a batch encoded into the KV cache that the decode steps extend.

Two ways, same result within float rounding (docs/rollout.md, "KV reuse"):

* `prefill_padded` (no reuse, the path before it): one forward over the left-padded prompts, with
  an attention mask and explicit position ids so a padded row sees exactly the positions it would
  see alone; a `PaddedBatch`;
* `prefill_cached` (prefix reuse): each row looks up the longest cached prefix of its prompt
  (`PrefixCache`), encodes only the rest with that prefix as its `DynamicCache`, and stores the
  result at once, so a sibling later in the same batch reuses the prompt just encoded (an identical
  prompt reuses the whole forward). The rows' caches are copied once into a `RowCache` with room
  for the decode steps, where each row attends to its own span (a `RowBatch`, row_cache.py).
  `encode_rows` is its first half; `LocalHFGenerator` decodes its single row from it directly.

`GenerationProfile` adds up where the model time went: prefill vs decode seconds and tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache

from shopsimrl.rollout.generators.decode_batch import PaddedBatch, RowBatch
from shopsimrl.rollout.generators.head_fold import folded_head
from shopsimrl.rollout.generators.hidden_tap import HiddenTap
from shopsimrl.rollout.generators.prefix_attention import (
    PREFIX_ATTENTION,
    PREFIX_CALLS,
    PrefixCalls,
    attention_implementation,
)
from shopsimrl.rollout.generators.prefix_cache import (
    LayerKV,
    PrefixCache,
    cache_layers,
    supports,
)
from shopsimrl.rollout.generators.row_cache import RowCache


@dataclass(frozen=True)
class GenerationProfile:
    """Model time of a generator so far. `prefill_tokens` were encoded; `reused_tokens` came from the
    prefix cache instead; `decode_tokens` were generated, in `decode_steps` batched forwards (a row's
    last token is drawn but never fed, so tokens exceed the rows summed over steps). With prompt
    lookup, `drafts_fed` draft tokens were fed after rows' last ones and `drafts_confirmed` of them
    were confirmed by the draws: the extra tokens those steps yielded."""

    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_tokens: int = 0
    reused_tokens: int = 0
    decode_tokens: int = 0
    decode_steps: int = 0
    drafts_fed: int = 0
    drafts_confirmed: int = 0

    def add(self, **delta: float) -> GenerationProfile:
        fields = {name: getattr(self, name) + value for name, value in delta.items()}
        return GenerationProfile(**{**self.__dict__, **fields})


@dataclass
class EncodedRows:
    """Each row's full KV cache (batch 1, per layer) and last-position logits (float32, CPU); with a
    `HiddenTap`, each row's (start, hidden states at the tapped layer of its positions start:)."""

    layers: list[list[LayerKV]]
    logits: torch.Tensor
    encoded_tokens: int
    reused_tokens: int
    hidden: list[tuple[int, torch.Tensor]] | None = None


def prefill_padded(model: torch.nn.Module, inputs: list[list[int]], pad_id: int) -> PaddedBatch:
    device = next(model.parameters()).device
    lengths = [len(ids) for ids in inputs]
    width = max(lengths)
    input_ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(inputs), width), dtype=torch.long)
    for b, ids in enumerate(inputs):
        input_ids[b, width - lengths[b] :] = torch.tensor(ids, dtype=torch.long)
        mask[b, width - lengths[b] :] = 1
    # Left padding: a row's first real token must sit at position 0, as it would alone.
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    with folded_head(model):
        output = model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            use_cache=True,
            logits_to_keep=1,
        )
    logits = output.logits[:, -1].float().cpu()
    return PaddedBatch(output.past_key_values, mask, lengths, logits, encoded_tokens=sum(lengths))


def prefill_cached(
    model: torch.nn.Module, inputs: list[list[int]], store: PrefixCache, room: int
) -> RowBatch | None:
    """The rows in a `RowCache` with `room` columns to decode into; None when the model's cache
    cannot be cut and stacked (nothing is stored then)."""
    encoded = encode_rows(model, inputs, store)
    return None if encoded is None else row_batch(encoded, [len(ids) for ids in inputs], room)


def row_batch(encoded: EncodedRows, lengths: list[int], room: int) -> RowBatch:
    """Encoded rows (of these lengths) copied into a `RowCache` with `room` columns each to decode into."""
    return RowBatch(
        RowCache(encoded.layers, room),
        lengths,
        encoded.logits,
        encoded_tokens=encoded.encoded_tokens,
        reused_tokens=encoded.reused_tokens,
    )


def encode_rows(
    model: torch.nn.Module, inputs: list[list[int]], store: PrefixCache, tap: HiddenTap | None = None
) -> EncodedRows | None:
    """Each input encoded after its longest cached prefix and stored at once; None when the model's
    cache is not a plain `DynamicCache`. With `tap` (entered), each row's hidden states at the tapped
    layer for the positions it encoded are returned too."""
    device = next(model.parameters()).device
    store.check_weights(model)
    rows: list[list[LayerKV]] = []
    logits: list[torch.Tensor] = []
    hidden: list[tuple[int, torch.Tensor]] = []
    encoded = reused_total = 0
    seen: dict[tuple[int, ...], int] = {}  # siblings' identical first prompts share one forward
    for ids in inputs:
        same = seen.get(tuple(ids))
        if same is not None:
            rows.append(rows[same])
            logits.append(logits[same])
            if tap is not None:
                hidden.append(hidden[same])
            reused_total += len(ids)
            continue
        prefix, reused = store.lookup(ids)
        output = _encode_after(model, ids, reused, store.new_cache(prefix), device)
        if not supports(output.past_key_values):
            return None
        if tap is not None:
            hidden.append((reused, tap.take()[0]))
        layers = cache_layers(output.past_key_values)
        store.insert(ids, layers)
        seen[tuple(ids)] = len(rows)
        rows.append(layers)
        logits.append(output.logits[0, -1].float().cpu())
        encoded += len(ids) - reused
        reused_total += reused
    return EncodedRows(rows, torch.stack(logits), encoded, reused_total, hidden if tap is not None else None)


def _encode_after(model: torch.nn.Module, ids: list[int], reused: int, cache: Cache, device: Any) -> Any:
    """The forward of `ids[reused:]` on top of the cached prefix. After a reused prefix the attention
    runs unmasked in two parts (prefix_attention.py); a model seen for the first time (nothing
    reused yet: it may turn out not to support reuse at all) gets transformers' own attention."""
    inputs = {
        "input_ids": torch.tensor([ids[reused:]], dtype=torch.long, device=device),
        "position_ids": torch.arange(reused, len(ids), device=device)[None],
        "past_key_values": cache,
        "use_cache": True,
        "logits_to_keep": 1,
    }
    if reused == 0:
        with folded_head(model):
            return model(**inputs)
    counter = PrefixCalls()
    with attention_implementation(model, PREFIX_ATTENTION), folded_head(model):
        output = model(**inputs, **{PREFIX_CALLS: counter})
    if counter.calls != len(output.past_key_values.layers):
        raise RuntimeError(
            f"{type(model).__name__} ran prefix attention in {counter.calls} of "
            f"{len(output.past_key_values.layers)} layers: its attention does not go through "
            "transformers' AttentionInterface (use prefix_cache=False)"
        )
    return output


def row_layers(cache: Cache, row: int, start: int, end: int) -> list[LayerKV]:
    """Owned copies of one row's keys and values at cache positions [start, end) (for the prefix cache)."""
    return [
        (layer.keys[row : row + 1, :, start:end].clone(), layer.values[row : row + 1, :, start:end].clone())
        for layer in cache.layers
    ]

"""Prefill: the prompts of a batch encoded into one KV cache that the decode steps extend.

Two ways, same result within float rounding (docs/rollout.md, "KV reuse"):

* `prefill_padded` (no reuse): one forward over the left-padded prompts, with an attention mask
  and explicit position ids so a padded row sees exactly the positions it would see alone;
* `prefill_cached` (prefix reuse): each row looks up the longest cached prefix of its prompt
  (`PrefixCache`), encodes only the rest with that prefix as its `DynamicCache`, and stores the
  result at once, so a sibling later in the same batch reuses the prompt just encoded. The rows'
  caches are then left-padded to one width and copied into one `StaticCache` with room for the
  decode steps: a `DynamicCache` grows by `torch.cat` at every step, which copies the whole batch
  cache each time (58% of a decode step of 8 rows x 1,500 tokens on SmolLM2-135M, measured with
  torch.profiler); a `StaticCache` writes each new token in place.

`GenerationProfile` adds up where the model time went: prefill vs decode seconds and tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicCache, StaticCache

from shopsimrl.rollout.generators.prefix_cache import (
    LayerKV,
    PrefixCache,
    build_cache,
    cache_layers,
    supports,
)


@dataclass(frozen=True)
class GenerationProfile:
    """Model time of a generator so far. `prefill_tokens` were encoded; `reused_tokens` came from the
    prefix cache instead; `decode_tokens` were generated (one decode step each, batched)."""

    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_tokens: int = 0
    reused_tokens: int = 0
    decode_tokens: int = 0

    def add(self, **delta: float) -> GenerationProfile:
        fields = {name: getattr(self, name) + value for name, value in delta.items()}
        return GenerationProfile(**{**self.__dict__, **fields})


@dataclass
class Prefill:
    """The batch after its prompts: cache, attention mask [rows, width], last-position logits (float32, CPU)."""

    cache: Cache
    mask: torch.Tensor
    logits: torch.Tensor
    encoded_tokens: int
    reused_tokens: int


def prefill_padded(model: torch.nn.Module, inputs: list[list[int]], pad_id: int) -> Prefill:
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
    output = model(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=True,
        logits_to_keep=1,
    )
    logits = output.logits[:, -1].float().cpu()
    return Prefill(output.past_key_values, mask, logits, encoded_tokens=sum(lengths), reused_tokens=0)


def prefill_cached(
    model: torch.nn.Module, inputs: list[list[int]], store: PrefixCache, room: int | None
) -> Prefill | None:
    """`room`: decode steps the returned `StaticCache` must hold; None returns a `DynamicCache` (one
    sequence decoding alone copies little per step). None when the model's cache is not a plain
    `DynamicCache` (nothing is stored then)."""
    device = next(model.parameters()).device
    store.check_weights(model)
    rows: list[list[LayerKV]] = []
    logits: list[torch.Tensor] = []
    encoded = reused_total = 0
    for ids in inputs:
        prefix, reused = store.lookup(ids)
        output = model(
            input_ids=torch.tensor([ids[reused:]], dtype=torch.long, device=device),
            position_ids=torch.arange(reused, len(ids), device=device)[None],
            past_key_values=build_cache(prefix),
            use_cache=True,
            logits_to_keep=1,
        )
        if not supports(output.past_key_values):
            return None
        layers = cache_layers(output.past_key_values)
        store.insert(ids, layers)
        rows.append(layers)
        logits.append(output.logits[0, -1].float().cpu())
        encoded += len(ids) - reused
        reused_total += reused
    width = max(len(ids) for ids in inputs)
    mask = torch.zeros((len(inputs), width), dtype=torch.long)
    for b, ids in enumerate(inputs):
        mask[b, width - len(ids) :] = 1
    stacked = [_stack([row[layer] for row in rows], width) for layer in range(len(rows[0]))]
    if room is None:
        cache: Cache = DynamicCache(ddp_cache_data=stacked)
    else:
        cache = StaticCache(config=model.config, max_cache_len=width + room)
        for layer, (keys, values) in enumerate(stacked):
            cache.update(keys, values, layer)
    return Prefill(cache, mask, torch.stack(logits), encoded, reused_total)


def _stack(rows: list[LayerKV], width: int) -> LayerKV:
    """One layer's keys and values of every row, left-padded with zeros (masked out) to `width`."""
    first_keys, first_values = rows[0]
    keys = first_keys.new_zeros((len(rows), first_keys.shape[1], width, first_keys.shape[3]))
    values = first_values.new_zeros((len(rows), first_values.shape[1], width, first_values.shape[3]))
    for b, (k, v) in enumerate(rows):
        keys[b, :, width - k.shape[-2] :] = k[0]
        values[b, :, width - v.shape[-2] :] = v[0]
    return keys, values


def row_layers(cache: Cache, row: int, start: int, end: int) -> list[LayerKV]:
    """Owned copies of one row's keys and values at cache positions [start, end) (for the prefix cache)."""
    return [
        (layer.keys[row : row + 1, :, start:end].clone(), layer.values[row : row + 1, :, start:end].clone())
        for layer in cache.layers
    ]

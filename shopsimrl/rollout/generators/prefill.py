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
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, StaticCache

from shopsimrl.rollout.generators.prefix_cache import (
    LayerKV,
    PrefixCache,
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
    rows: list[list[LayerKV]] = [[] for _ in inputs]
    logits: list[torch.Tensor] = [torch.empty(0) for _ in inputs]
    encoded = reused_total = 0
    # A prompt identical to an earlier one of this batch (a sibling's) waits for its cache.
    first: dict[tuple[int, ...], int] = {}
    waves: tuple[list[int], list[int]] = ([], [])
    for b, ids in enumerate(inputs):
        waves[tuple(ids) in first].append(b)
        first.setdefault(tuple(ids), b)
    for wave in waves:
        if not wave:
            continue
        looked = [store.lookup(inputs[b]) for b in wave]
        encoded_rows = _encode_suffixes(model, [inputs[b] for b in wave], looked, device)
        if encoded_rows is None:
            return None
        for b, (layers, row_logits), (_, reused) in zip(wave, encoded_rows, looked, strict=True):
            store.insert(inputs[b], layers)
            rows[b], logits[b] = layers, row_logits
            encoded += len(inputs[b]) - reused
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


def _encode_suffixes(
    model: torch.nn.Module, inputs: list[list[int]], looked: list[tuple[list[LayerKV], int]], device: Any
) -> list[tuple[list[LayerKV], torch.Tensor]] | None:
    """One forward for every row's uncached suffix on top of its cached prefix (one read of the
    weights for the batch, not one per row). Columns: prefixes right-aligned in the first P, then
    suffixes right-aligned in the last S, so every row's last token is the last column; the holes
    are masked and position ids are each row's own. Returns each row's keys/values without the
    holes (owned copies) and its last-position logits; None if the model's cache is not plain."""
    reused = [r for _, r in looked]
    lengths = [len(ids) - r for ids, r in zip(inputs, reused, strict=True)]
    width_p, width_s = max(reused), max(lengths)
    mask = torch.zeros((len(inputs), width_p + width_s), dtype=torch.long)
    input_ids = torch.zeros((len(inputs), width_s), dtype=torch.long)  # id 0 in the holes (masked)
    positions = torch.zeros((len(inputs), width_s), dtype=torch.long)
    for b, (ids, r, n) in enumerate(zip(inputs, reused, lengths, strict=True)):
        mask[b, width_p - r : width_p] = 1
        mask[b, width_p + width_s - n :] = 1
        input_ids[b, width_s - n :] = torch.tensor(ids[r:], dtype=torch.long)
        positions[b, width_s - n :] = torch.arange(r, r + n)
    past = None
    if width_p > 0:
        layers = len(next(prefix for prefix, r in looked if r > 0))
        past = DynamicCache(
            ddp_cache_data=[_stack([prefix[layer] if r > 0 else None for prefix, r in looked], width_p)
                            for layer in range(layers)]
        )
    output = model(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        past_key_values=past,
        use_cache=True,
        logits_to_keep=1,
    )
    if not supports(output.past_key_values):
        return None
    result = []
    for b, (r, n) in enumerate(zip(reused, lengths, strict=True)):
        layers_kv = [
            tuple(
                torch.cat([t[b : b + 1, :, width_p - r : width_p], t[b : b + 1, :, width_p + width_s - n :]], dim=-2)
                for t in (keys, values)
            )
            for keys, values in cache_layers(output.past_key_values)
        ]
        result.append((layers_kv, output.logits[b, -1].float().cpu()))
    return result


def _stack(rows: list[LayerKV | None], width: int) -> LayerKV:
    """One layer's keys and values of every row, left-padded with zeros (masked out) to `width`
    (a row without any: all zeros)."""
    first_keys, first_values = next(row for row in rows if row is not None)
    keys = first_keys.new_zeros((len(rows), first_keys.shape[1], width, first_keys.shape[3]))
    values = first_values.new_zeros((len(rows), first_values.shape[1], width, first_values.shape[3]))
    for b, row in enumerate(rows):
        if row is None:
            continue
        k, v = row
        keys[b, :, width - k.shape[-2] :] = k[0]
        values[b, :, width - v.shape[-2] :] = v[0]
    return keys, values


def row_layers(cache: Cache, row: int, start: int, end: int) -> list[LayerKV]:
    """Owned copies of one row's keys and values at cache positions [start, end) (for the prefix cache)."""
    return [
        (layer.keys[row : row + 1, :, start:end].clone(), layer.values[row : row + 1, :, start:end].clone())
        for layer in cache.layers
    ]

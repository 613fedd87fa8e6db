"""`PrefixCache`: KV caches of earlier generations, found again by their token prefix.

The agent loop sends each turn the whole segment so far (prompt, earlier turns, the new tool
observation), and the n siblings of a group send the same prompt. The local generators keep the
per-layer keys and values of every sequence they have run and, for a new request, take the stored
sequence with the longest common token prefix: only the tokens after it are encoded. This is what
SGLang's radix cache gives the slime backend, in a flat form: a handful of entries, compared token
by token.

* An episode's next turn finds its own previous turn: everything but the new observation is reused.
* A sibling finds the first sibling's prompt (or any sibling's later turn, cut to the shared part).
* A segment boundary (the offered tools changed, so the system prompt changed) shares at most the
  few tokens before the tool block: in effect the new segment starts a new cache.

Entries hold `DynamicCache` layer tensors of one sequence (batch 1) for layers that are plain
`DynamicLayer`s; a model with other cache layers (sliding window, linear attention) is not cached
(`supports()` is False) and the generators encode every request whole.

Memory bound, in that order:
1. an entry whose tokens are a prefix of a newly stored one is dropped (the new one covers it), so a
   running episode holds one entry: its latest turn;
2. the stored bytes never exceed `max_bytes`: the least recently used entries are evicted (an
   episode that has ended is never used again, so it goes first);
3. everything is dropped when the model's weights change (a GRPO step, a loaded checkpoint): a
   cache computed with other weights is wrong, not just old. The check compares every parameter's
   storage pointer and in-place version counter, which every optimizer step and `load_state_dict`
   bump (a write through `param.data` does not: call `clear()` after one);
4. `clear()` drops everything at once.

Precision: a generator that computes in bfloat16 (precision.py) makes its prefix cache with
`kv_dtype=torch.bfloat16`: every cache it builds (`new_cache`) stores keys and values in bfloat16
(`TypedDynamicCache`), so the stored entries, the decode batch's `RowCache` and the attention over them
are bfloat16. Without it, under autocast, the keys come out of the rotary embedding in float32 and the
values in bfloat16, concatenation promotes both to float32, and every attention reads twice the bytes
in float32 (docs/benchmarks.md, "bfloat16 keys and values").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: ~23k tokens of SmolLM2-135M in float32 (46 KiB per token)

LayerKV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [1, kv_heads, tokens, head_dim]


@dataclass(frozen=True)
class PrefixCacheStats:
    """Lookups so far, tokens served from the cache, entries evicted, and what is stored now."""

    lookups: int = 0
    hits: int = 0
    reused_tokens: int = 0
    evictions: int = 0
    entries: int = 0
    stored_tokens: int = 0
    stored_bytes: int = 0


class TypedDynamicCache(DynamicCache):
    """A `DynamicCache` whose layers store every update in `kv_dtype` (its layers stay `DynamicLayer`s)."""

    def __init__(self, kv_dtype: torch.dtype, layers: list[LayerKV] | None = None):
        super().__init__(ddp_cache_data=layers or None)
        self.kv_dtype = kv_dtype

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> LayerKV:
        return super().update(key_states.to(self.kv_dtype), value_states.to(self.kv_dtype), layer_idx, *args, **kwargs)


class _Entry:
    __slots__ = ("layers", "nbytes", "tokens")

    def __init__(self, tokens: torch.Tensor, layers: list[LayerKV]):
        self.tokens = tokens
        self.layers = layers
        self.nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)


class PrefixCache:
    """Longest-common-prefix lookup over stored single-sequence KV caches (see module doc)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, kv_dtype: torch.dtype | None = None):
        if max_bytes < 0:
            raise ValueError(f"max_bytes={max_bytes} must be >= 0 (0 stores nothing)")
        self.max_bytes = max_bytes
        self.kv_dtype = kv_dtype  # None: keys and values stay what the model's forward produced
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._next_key = 0
        self._bytes = 0
        self._weights: tuple[tuple[int, int], ...] | None = None
        self._lookups = self._hits = self._reused = self._evictions = 0

    @property
    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(
            lookups=self._lookups,
            hits=self._hits,
            reused_tokens=self._reused,
            evictions=self._evictions,
            entries=len(self._entries),
            stored_tokens=sum(int(e.tokens.numel()) for e in self._entries.values()),
            stored_bytes=self._bytes,
        )

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def new_cache(self, prefix: list[LayerKV]) -> DynamicCache | None:
        """The cache a forward after `prefix` (a `lookup` result) extends: in `kv_dtype` when set
        (even with nothing cached), else `build_cache`'s."""
        if self.kv_dtype is None:
            return build_cache(prefix)
        return TypedDynamicCache(self.kv_dtype, prefix)

    def check_weights(self, model: Any) -> None:
        """Drop every entry if the model's parameters changed since the last call."""
        fingerprint = tuple((p.data_ptr(), p._version) for p in model.parameters())
        if fingerprint != self._weights:
            self.clear()
            self._weights = fingerprint

    def lookup(self, input_ids: list[int]) -> tuple[list[LayerKV], int]:
        """(layers, reused): the cached keys/values of `input_ids[:reused]` (views, never written).

        At least the last input token is always left to encode: its logits start the generation.
        """
        self._lookups += 1
        limit = len(input_ids) - 1
        if limit < 1 or not self._entries:
            return [], 0
        query = torch.tensor(input_ids[:limit], dtype=torch.long)
        best_key, best = None, 0
        for key, entry in self._entries.items():
            n = min(limit, int(entry.tokens.numel()))
            if n <= best:
                continue
            differ = torch.nonzero(entry.tokens[:n] != query[:n])
            common = n if differ.numel() == 0 else int(differ[0, 0])
            if common > best:
                best_key, best = key, common
        if best_key is None:
            return [], 0
        self._entries.move_to_end(best_key)
        self._hits += 1
        self._reused += best
        layers = self._entries[best_key].layers
        return [(k[:, :, :best], v[:, :, :best]) for k, v in layers], best

    def insert(self, tokens: list[int], layers: list[LayerKV]) -> None:
        """Store the keys/values of `tokens` (one sequence; tensors are kept, so pass owned copies)."""
        length = len(tokens)
        if length == 0 or any(k.shape[-2] != length or v.shape[-2] != length for k, v in layers):
            raise ValueError(f"cache of {[k.shape[-2] for k, _ in layers][:1]} tokens stored for {length} tokens")
        stored = torch.tensor(tokens, dtype=torch.long)
        covered = [
            key
            for key, entry in self._entries.items()
            if entry.tokens.numel() <= length and torch.equal(entry.tokens, stored[: entry.tokens.numel()])
        ]
        for key in covered:
            self._bytes -= self._entries.pop(key).nbytes
        entry = _Entry(stored, layers)
        if entry.nbytes > self.max_bytes:
            return  # larger than the whole budget: not stored (the next turn re-encodes it)
        self._entries[self._next_key] = entry
        self._next_key += 1
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
            self._evictions += 1


def supports(cache: Any) -> bool:
    """Only plain `DynamicCache`s of full-attention layers can be cut at any prefix and stacked."""
    return isinstance(cache, DynamicCache) and all(type(layer) is DynamicLayer for layer in cache.layers)


def cache_layers(cache: DynamicCache) -> list[LayerKV]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def build_cache(layers: list[LayerKV]) -> DynamicCache | None:
    """A `DynamicCache` of `DynamicLayer`s holding copies of `layers` (None when nothing is cached)."""
    if not layers:
        return None
    return DynamicCache(ddp_cache_data=layers)

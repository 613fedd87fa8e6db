"""The rows of a batch between decode steps: their KV cache, next positions and last logits (and
how many prompt tokens the prefill encoded or reused).

Two kinds, one interface (`step`, `drop`), so the decode loop does not care which prefill made them:

* `PaddedBatch`: the left-padded prompts encoded whole into one `DynamicCache` with an attention
  mask (no KV reuse: the path before it, kept for bench/bench_rollout.py and for models whose cache
  layers cannot be cut and stacked, see prefix_cache.supports). A step grows the cache by
  `torch.cat` and attends over the padded width; a finished row leaves by `reorder_cache`.
* `RowBatch`: the rows' caches (mostly reused from the `PrefixCache`) in a `RowCache`, each row
  attending to its own span only; a finished row leaves by swap-remove, a new one joins between
  steps (`admit`: continuous batching, row_cache.py).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from shopsimrl.rollout.generators.prefix_cache import LayerKV
from shopsimrl.rollout.generators.row_cache import ROW_SPANS, RowCache, RowSpans, attending_by_rows


class PaddedBatch:
    """Left-padded rows under one attention mask (module doc)."""

    def __init__(
        self,
        cache: Cache,
        mask: torch.Tensor,
        lengths: list[int],
        logits: torch.Tensor,
        *,
        encoded_tokens: int,
    ):
        self.cache, self.mask, self.logits = cache, mask, logits
        self.positions = torch.tensor(lengths, dtype=torch.long)
        self.encoded_tokens, self.reused_tokens = encoded_tokens, 0

    def step(self, model: torch.nn.Module, tokens: list[int]) -> None:
        """Feed one token per row; `logits` become the next ones."""
        device = next(model.parameters()).device
        self.mask = torch.cat([self.mask, torch.ones((len(tokens), 1), dtype=torch.long)], dim=-1)
        output = model(
            input_ids=torch.tensor(tokens, dtype=torch.long, device=device)[:, None],
            attention_mask=self.mask.to(device),
            position_ids=self.positions[:, None].to(device),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.logits = output.logits[:, -1].float().cpu()
        self.positions = self.positions + 1

    def drop(self, rows: list[int]) -> list[int]:
        """Remove these rows; returns the old indices of the rows left, in their new order."""
        leaving = set(rows)
        order = [b for b in range(len(self.positions)) if b not in leaving]
        index = torch.tensor(order, dtype=torch.long)
        self.cache.reorder_cache(index.to(self.mask.device))  # keeps these rows
        self.mask, self.positions, self.logits = self.mask[index], self.positions[index], self.logits[index]
        return order


class RowBatch:
    """Rows of their own lengths in a `RowCache` (module doc)."""

    def __init__(
        self,
        cache: RowCache,
        lengths: list[int],
        logits: torch.Tensor,
        *,
        encoded_tokens: int,
        reused_tokens: int,
    ):
        self.cache, self.logits = cache, logits
        self.positions = torch.tensor(lengths, dtype=torch.long)
        self.encoded_tokens, self.reused_tokens = encoded_tokens, reused_tokens

    def step(self, model: torch.nn.Module, tokens: list[int]) -> None:
        device = next(model.parameters()).device
        spans = RowSpans(self.cache.starts)
        with attending_by_rows(model):
            output = model(
                input_ids=torch.tensor(tokens, dtype=torch.long, device=device)[:, None],
                position_ids=self.positions[:, None].to(device),
                past_key_values=self.cache,
                use_cache=True,
                **{ROW_SPANS: spans},
            )
        if spans.calls != len(self.cache.layers):
            raise RuntimeError(
                f"{type(model).__name__} ran row attention in {spans.calls} of {len(self.cache.layers)} layers: "
                "its attention does not go through transformers' AttentionInterface (use prefix_cache=False)"
            )
        self.logits = output.logits[:, -1].float().cpu()
        self.positions = self.positions + 1

    def drop(self, rows: list[int]) -> list[int]:
        order = self.cache.drop(rows)
        index = torch.tensor(order, dtype=torch.long)
        self.positions, self.logits = self.positions[index], self.logits[index]
        return order

    def admit(self, rows: list[list[LayerKV]], logits: torch.Tensor, room: int) -> None:
        """New rows (each a batch-1 cache of its whole prompt, and its last logits) join after the
        rows already here, with `room` columns each to decode into."""
        self.cache.admit(rows, room)
        lengths = torch.tensor([row[0][0].shape[-2] for row in rows], dtype=torch.long)
        self.positions = torch.cat([self.positions, lengths])
        self.logits = torch.cat([self.logits, logits])

    def row_layers(self, row: int) -> list[LayerKV]:
        """Owned copies of everything row `row` has seen (its last sampled token was never fed)."""
        return self.cache.row_layers(row)

"""The rows of a batch between decode steps: their KV cache, next positions and last logits (and
how many prompt tokens the prefill encoded or reused).

Two kinds, one interface (`step`, `block`: a row's logits to draw from, `keep_drawn`, `drop`), so
the decode loop does not care which prefill made them:

* `PaddedBatch`: the left-padded prompts encoded whole into one `DynamicCache` with an attention
  mask (no KV reuse: the path before it, kept for bench/bench_rollout.py and for models whose cache
  layers cannot be cut and stacked, see prefix_cache.supports). A step grows the cache by
  `torch.cat` and attends over the padded width; a finished row leaves by `reorder_cache`.
* `RowBatch`: the rows' caches (mostly reused from the `PrefixCache`) in a `RowCache`, each row
  attending to its own span only; a finished row leaves by swap-remove, a new one joins between
  steps (`admit`: continuous batching, row_cache.py). A step may feed a row its draft tokens after
  its last one (prompt_lookup.py): the row then has one logits row per fed token, and `keep_drawn`
  forgets the drafts its draws did not confirm.
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

    def block(self, row: int) -> torch.Tensor:
        """Row `row`'s logits to draw from, `[1, vocab]`: one per step."""
        return self.logits[row : row + 1]

    def keep_drawn(self, row: int, drawn: int) -> None:
        """Nothing to forget: a padded batch is fed no drafts."""

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
        self.cache = cache
        self.logits = list(logits[:, None])  # per row: [fed tokens (1 before any step), vocab]
        self.fed = [0] * len(lengths)  # per row: tokens fed by the last step, not yet checked
        self.positions = torch.tensor(lengths, dtype=torch.long)
        self.encoded_tokens, self.reused_tokens = encoded_tokens, reused_tokens

    def step(self, model: torch.nn.Module, tokens: list[int], drafts: list[list[int]] | None = None) -> None:
        """Feed each row its token (its last drawn one), followed by its `drafts` if given; `logits`
        become one row per fed token. Rows with fewer drafts are padded to the longest: the padding's
        columns lie past the row's stop and are overwritten by its next step."""
        device = next(model.parameters()).device
        feeds = [[token, *draft] for token, draft in zip(tokens, drafts or [[]] * len(tokens), strict=True)]
        width = max(len(feed) for feed in feeds)
        padded = [feed + [feed[-1]] * (width - len(feed)) for feed in feeds]
        spans = RowSpans(self.cache.starts, self.cache.stops)
        self.cache.prepare(width)
        with attending_by_rows(model):
            output = model(
                input_ids=torch.tensor(padded, dtype=torch.long, device=device),
                position_ids=(self.positions[:, None] + torch.arange(width)).to(device),
                past_key_values=self.cache,
                use_cache=True,
                **{ROW_SPANS: spans},
            )
        if spans.calls != len(self.cache.layers):
            raise RuntimeError(
                f"{type(model).__name__} ran row attention in {spans.calls} of {len(self.cache.layers)} layers: "
                "its attention does not go through transformers' AttentionInterface (use prefix_cache=False)"
            )
        self.fed = [len(feed) for feed in feeds]
        self.cache.advance(self.fed)
        logits = output.logits.float().cpu()
        self.logits = [logits[b, :fed] for b, fed in enumerate(self.fed)]
        self.positions = self.positions + torch.tensor(self.fed, dtype=torch.long)

    def block(self, row: int) -> torch.Tensor:
        """Row `row`'s logits to draw from, `[fed, vocab]`: after its last token, then after each draft."""
        return self.logits[row]

    def keep_drawn(self, row: int, drawn: int) -> None:
        """Row `row` drew `drawn` tokens from its block: the fed tokens after the first `drawn` (drafts
        its draws did not confirm) leave its cache. A row that joined since the step fed nothing."""
        if self.fed[row]:
            unconfirmed = self.fed[row] - drawn
            self.cache.forget(row, unconfirmed)
            self.positions[row] -= unconfirmed
            self.fed[row] = 0

    def drop(self, rows: list[int]) -> list[int]:
        order = self.cache.drop(rows)
        index = torch.tensor(order, dtype=torch.long)
        self.positions = self.positions[index]
        self.logits = [self.logits[b] for b in order]
        self.fed = [self.fed[b] for b in order]
        return order

    def admit(self, rows: list[list[LayerKV]], logits: torch.Tensor, room: int) -> None:
        """New rows (each a batch-1 cache of its whole prompt, and its last logits) join after the
        rows already here, with `room` columns each to decode into."""
        self.cache.admit(rows, room)
        lengths = torch.tensor([row[0][0].shape[-2] for row in rows], dtype=torch.long)
        self.positions = torch.cat([self.positions, lengths])
        self.logits.extend(logits[:, None])
        self.fed.extend(0 for _ in rows)

    def row_layers(self, row: int) -> list[LayerKV]:
        """Owned copies of everything row `row` has seen (its last sampled token was never fed)."""
        return self.cache.row_layers(row)

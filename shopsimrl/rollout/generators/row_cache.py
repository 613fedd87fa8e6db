"""`RowCache`: the KV cache of a decoding batch whose rows have different lengths, attended row by row.

The rows of a batch are an episode's next turn each, from a few hundred to a few thousand tokens.
A left-padded batch cache makes every row attend over the longest row's width (and a `StaticCache`
over its spare room too), masked: on the demo's rollouts 35-45% of the attention work of a decode
step was padding. Here each row attends to its own span only:

* keys and values live in one preallocated buffer per layer, `[rows, kv_heads, width + room, head_dim]`;
  row b's prompt is written right-aligned at `[start_b, width)`, its span is `[start_b, stop_b)`, and
  a decode step writes each row's fed tokens in place after its own stop (no `torch.cat`, no zero
  fill: nothing outside a row's span is read). A step feeds one token per row, or a block of a row's
  last token and its draft tokens (prompt_lookup.py); the drafts its draws reject are forgotten
  (`forget`: the stop moves back), so rows end at different columns;
* the attention (`row_attention`, registered with transformers under `ROW_ATTENTION`) calls SDPA once
  per row on the views `[start_b, stop_b + fed)`, with no mask: a decode query sees all of its row's
  past, a block of queries also each other causally (`attend_after`, prefix_attention.py); a model
  that does not call it from every layer is refused, see `RowSpans`. A bfloat16 cache (prefix_cache.py
  `kv_dtype`) attends instead in one SDPA call per layer over the columns any row uses, masked to each
  row's span: in bfloat16 the per-row calls cost more than the masked columns (docs/benchmarks.md,
  "bfloat16 keys and values"); its buffers are zero-filled, since that call reads outside the spans;
* a finished row leaves the batch by swap-remove: the last row's columns move into its slot and the
  buffers are narrowed (one row copied, not the whole cache as `reorder_cache` does);
* a new row joins between steps (`admit`, continuous batching): written right-aligned at the fill
  column into a free row slot; only when it is longer than the fill column, or its decode room runs
  past the allocation, are the buffers reallocated (with `SLACK` spare columns) and the live rows
  copied over.

Same numbers as the masked batch up to float rounding (masked scores contribute exp(-inf) = 0 there);
tests/rollout/test_rollout_row_cache.py compares both, on a grouped-query-attention model too.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin

from shopsimrl.rollout.generators.prefix_attention import attend_after, attention_implementation
from shopsimrl.rollout.generators.prefix_cache import LayerKV

ROW_ATTENTION = "shopsim_rows"
ROW_SPANS = "shopsim_row_spans"  # the forward kwarg that carries the `RowSpans`
# Spare columns left and right of what a (re)allocation needs: an episode's next turn (its last turn
# plus a tool observation, tens to a few hundred tokens longer) then joins a running batch in place.
# Allocated with `new_empty`, so columns never written cost address space, not memory.
SLACK = 256


class RowSpans:
    """Each row's span before the step (`[start, stop)`), passed through the model's forward to
    `row_attention`, which counts its calls: a model whose layers do not route attention through
    transformers' `AttentionInterface` would silently attend over unwritten columns instead."""

    def __init__(self, starts: list[int], stops: list[int]):
        self.starts, self.stops = list(starts), list(stops)
        self.calls = 0


class RowLayer(CacheLayerMixin):
    """One layer's buffers; `keys`/`values` are the views over the live rows and the columns written so far."""

    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: int, filled: int):
        super().__init__()
        self._key_store, self._value_store = keys, values  # [row slots, kv heads, columns, head dim]
        self.rows, self.filled = rows, filled
        self.is_initialized = True
        self.columns: torch.Tensor | None = None  # where the next update writes: [rows, fed] columns
        self._narrow()

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a RowLayer is created with its buffers")

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> LayerKV:
        """Write each row's fed tokens at its `columns` (set by `RowCache.prepare`)."""
        columns = self.columns
        if columns is None or columns.shape != (self.rows, key_states.shape[-2]):
            raise RuntimeError("a RowCache step writes where RowCache.prepare(fed) said, one row each")
        slots = torch.arange(self.rows)[:, None]
        # advanced indices around a slice put their dimensions first: [rows, fed, kv heads, head dim]
        # Under bfloat16 autocast (precision.py) a step's keys come out float32 (rotary embeddings in
        # float32) and its values bfloat16, each maybe unlike the prefill's: stored in the buffers' dtype.
        self._key_store[slots, :, columns] = key_states.transpose(1, 2).to(self._key_store.dtype)
        self._value_store[slots, :, columns] = value_states.transpose(1, 2).to(self._value_store.dtype)
        self.filled = max(self.filled, int(columns[:, -1].max()) + 1)
        self._narrow()
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.filled + query_length, 0

    def get_seq_length(self) -> int:
        return self.filled

    def get_max_length(self) -> int:
        return self._key_store.shape[-2]

    @property
    def slots(self) -> int:
        """Rows the buffers have room for (live rows and free slots)."""
        return self._key_store.shape[0]

    def write_row(self, row: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Row `row`'s span (batch-1 tensors), right-aligned at the fill column."""
        start = self.filled - keys.shape[-2]
        self._key_store[row, :, start : self.filled] = keys[0].to(self._key_store.dtype)
        self._value_store[row, :, start : self.filled] = values[0].to(self._value_store.dtype)

    def move_row(self, source: int, target: int) -> None:
        self._key_store[target, :, : self.filled] = self._key_store[source, :, : self.filled]
        self._value_store[target, :, : self.filled] = self._value_store[source, :, : self.filled]

    def keep_first(self, rows: int) -> None:
        self.rows = rows
        self._narrow()

    def _narrow(self) -> None:
        self.keys = self._key_store[: self.rows, :, : self.filled]
        self.values = self._value_store[: self.rows, :, : self.filled]


class RowCache(Cache):
    """Rows of different lengths, right-aligned at one column, each with room to decode into; rows
    join (`admit`) and leave (`drop`) between decode steps."""

    def __init__(self, rows: list[list[LayerKV]], room: int):
        if not rows:
            raise ValueError("a RowCache needs at least one row")
        super().__init__(layers=[])
        self.starts: list[int] = []
        self.stops: list[int] = []  # each row's span is [start, stop)
        self.limits: list[int] = []  # the column each row may decode up to (its admission room)
        self.regrowths = 0
        self.admit(rows, room)

    def admit(self, rows: list[list[LayerKV]], room: int) -> None:
        """Add these rows (each a per-layer batch-1 span), each with `room` columns to decode into.

        In place when they fit: a free row slot each, spans no longer than the fill column, room left
        of the allocation's end. Otherwise every buffer is reallocated with `SLACK` spare columns on
        both sides (a row's next turn, its previous one plus a tool observation, then fits in place),
        and the live rows are copied over, shifted to the new fill column."""
        lengths = [row[0][0].shape[-2] for row in rows]
        live = len(self.starts)
        if not self._fits(live + len(rows), max(lengths), room):
            self._regrow(live + len(rows), max(lengths), room, rows[0])
        filled = self.layers[0].filled
        for layer_index, layer in enumerate(self.layers):
            layer.keep_first(live + len(rows))
            for b, row in enumerate(rows):
                layer.write_row(live + b, *row[layer_index])
        self.starts.extend(filled - length for length in lengths)
        self.stops.extend(filled for _ in rows)
        self.limits.extend(filled + room for _ in rows)

    def prepare(self, fed: int) -> None:
        """The next forward feeds `fed` tokens per row: each row writes them after its own stop."""
        columns = torch.tensor(self.stops, dtype=torch.long)[:, None] + torch.arange(fed)
        needed = int(columns[:, -1].max()) + 1
        if needed > self.layers[0].get_max_length():
            raise RuntimeError(
                f"RowCache is full: {needed} columns needed, {self.layers[0].get_max_length()} allocated"
            )
        for layer in self.layers:
            layer.columns = columns

    def advance(self, fed: list[int]) -> None:
        """After the forward: row b's first `fed[b]` tokens are in its span."""
        self.stops = [stop + n for stop, n in zip(self.stops, fed, strict=True)]
        for layer in self.layers:
            layer.columns = None

    def forget(self, row: int, tokens: int) -> None:
        """Row `row`'s last `tokens` fed tokens leave its span (rejected drafts; the columns are
        overwritten by its next step)."""
        if not 0 <= tokens <= self.stops[row] - self.starts[row]:
            raise ValueError(f"cannot forget {tokens} tokens of row {row}")
        self.stops[row] -= tokens

    def _fits(self, rows: int, longest: int, room: int) -> bool:
        if not self.layers:
            return False
        first = self.layers[0]
        return (
            rows <= first.slots and longest <= first.filled and first.filled + room <= first.get_max_length()
        )

    def _regrow(self, rows: int, longest: int, room: int, template: list[LayerKV]) -> None:
        old = self.layers
        old_filled = old[0].filled if old else 0
        spans = [old_filled - start for start in self.starts]
        filled = max([longest, *spans]) + SLACK
        shift = filled - old_filled
        self.limits = [limit + shift for limit in self.limits]
        columns = max([filled + room, *self.limits]) + SLACK
        slots = max(rows, old[0].slots if old else 0)
        layers = []
        for index in range(len(template)):
            keys0, values0 = template[index]
            # float32: empty, not zeros: a row's attention never reads outside its own span. bfloat16's
            # one masked call reads every row's columns (`_masked_row_attention`): never-written memory
            # may hold NaN, and a masked-out NaN value still makes 0 * NaN = NaN, so zeros.
            allocate = torch.empty if keys0.dtype == torch.float32 else torch.zeros
            keys = allocate((slots, keys0.shape[1], columns, keys0.shape[3]), dtype=keys0.dtype, device=keys0.device)
            values = allocate((slots, values0.shape[1], columns, values0.shape[3]), dtype=values0.dtype, device=values0.device)
            for b, (start, stop) in enumerate(zip(self.starts, self.stops, strict=True)):
                keys[b, :, start + shift : stop + shift] = old[index]._key_store[b, :, start:stop]
                values[b, :, start + shift : stop + shift] = old[index]._value_store[b, :, start:stop]
            layers.append(RowLayer(keys, values, rows=len(self.starts), filled=filled))
        self.layers = layers
        self.starts = [start + shift for start in self.starts]
        self.stops = [stop + shift for stop in self.stops]
        self.regrowths += 1

    def drop(self, rows: list[int]) -> list[int]:
        """Remove these rows; returns the old row indices in their new order (swap-remove moves the
        last row into a freed slot)."""
        order = list(range(len(self.starts)))
        for row in sorted(set(rows), reverse=True):
            last = len(order) - 1
            if row != last:
                for layer in self.layers:
                    layer.move_row(last, row)
                order[row] = order[last]
                for column in (self.starts, self.stops, self.limits):
                    column[row] = column[last]
            order.pop()
            for column in (self.starts, self.stops, self.limits):
                column.pop()
        for layer in self.layers:
            layer.keep_first(len(order))
        return order

    def row_layers(self, row: int) -> list[LayerKV]:
        """Owned copies of one row's keys and values (its whole span, for the prefix cache)."""
        start, stop = self.starts[row], self.stops[row]
        return [
            (
                layer.keys[row : row + 1, :, start:stop].clone(),
                layer.values[row : row + 1, :, start:stop].clone(),
            )
            for layer in self.layers
        ]


def row_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Each row's fed queries over that row's own span `[start, stop)` and causally over each other
    (module doc)."""
    spans = kwargs.get(ROW_SPANS)
    if not isinstance(spans, RowSpans) or attention_mask is not None:
        raise RuntimeError(
            f"{ROW_ATTENTION} attention decodes rows of a RowCache with {ROW_SPANS}=RowSpans(...), no mask"
        )
    spans.calls += 1
    if key.dtype != torch.float32:
        return _masked_row_attention(query, key, value, spans, scaling)
    batch, heads, fed, head_dim = query.shape
    kv_heads = key.shape[1]
    output = query.new_empty((batch, heads, fed, head_dim))
    for b, (start, stop) in enumerate(zip(spans.starts, spans.stops, strict=True)):
        if fed == 1:
            # grouped-query attention: the query heads sharing a key head become that head's "query rows"
            grouped = query[b].reshape(1, kv_heads, heads // kv_heads, head_dim)
            attended = F.scaled_dot_product_attention(
                grouped,
                key[b : b + 1, :, start : stop + 1],
                value[b : b + 1, :, start : stop + 1],
                scale=scaling,
            )
        else:
            attended = attend_after(
                query[b : b + 1],
                key[b : b + 1, :, start:stop],
                value[b : b + 1, :, start:stop],
                key[b : b + 1, :, stop : stop + fed],
                value[b : b + 1, :, stop : stop + fed],
                scaling,
            )
        output[b] = attended.reshape(heads, fed, head_dim)
    return output.transpose(1, 2), None  # [batch, fed, heads, head_dim], as the other backends return


def _masked_row_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, spans: RowSpans, scaling: float | None
) -> tuple[torch.Tensor, None]:
    """A bfloat16 cache's rows in one SDPA call over the columns any row uses, masked to each row's
    own span: fed query i of row b sees columns `[start_b, stop_b + i]`. In bfloat16 the per-row calls
    cost more than the masked columns (docs/benchmarks.md, "bfloat16 keys and values"); float32 keeps
    them, and with them its token-identical outputs."""
    batch, heads, fed, head_dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    starts = torch.tensor(spans.starts, dtype=torch.long)
    stops = torch.tensor(spans.stops, dtype=torch.long)
    first, end = int(starts.min()), int(stops.max()) + fed
    columns = torch.arange(first, end)
    seen = (columns >= starts[:, None, None]) & (columns <= stops[:, None, None] + torch.arange(fed)[:, None])
    # query head h uses key head h // group: its `fed` queries become rows of that key head's block
    attended = F.scaled_dot_product_attention(
        query.to(key.dtype).reshape(batch, kv_heads, group * fed, head_dim),
        key[:, :, first:end],
        value[:, :, first:end],
        attn_mask=seen.repeat(1, group, 1)[:, None],
        scale=scaling,
    )
    return attended.reshape(batch, heads, fed, head_dim).transpose(1, 2), None


AttentionInterface.register(ROW_ATTENTION, row_attention)


def attending_by_rows(model: torch.nn.Module) -> AbstractContextManager[None]:
    """The model's attention layers use `row_attention` inside the block (one decode step)."""
    return attention_implementation(model, ROW_ATTENTION)

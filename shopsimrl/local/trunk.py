"""`FrozenTrunk`: the frozen bottom layers of a partly trained policy, computed once per token prefix.

With `model.trainable_top_layers` (the demo trains the top 8 of SmolLM2's 30 layers) the embeddings
and the layers below the first trainable one never change during a run. A causal decoder's hidden
state entering that layer at position t is then a pure function of tokens[:t+1]: it can be computed
once and read back wherever the same token prefix comes again. The warm start and the GRPO update
(`grpo.score_responses(..., trunk=...)`) use it so:

* **bottom** (`hidden`, no autograd): each row's hidden states at the split, from the longest token
  prefix already stored (keys/values of the frozen layers and the hidden states at the split); only
  the rest is encoded, on top of the stored keys and values, and stored in turn. The shared system
  prompt is encoded once per run, a group's shared prompt once per step, a sample scored twice (old
  log-probs, then the step) once;
* **top** (`top_padded`, `top_shared`, with autograd): the trainable layers and the final norm over
  those hidden states, in the same two shapes as the full-model passes (one padded pass, or a shared
  prompt once and the rows' remainders on top of its keys and values), so gradients flow through
  exactly the layers that have them, as before;
* **record**: a generator that ran the same tokens (the rollout, on the same frozen weights) hands
  over the hidden states it computed at the split (`BatchedLocalHFGenerator(recorder=trunk)`,
  rollout/generators/hidden_tap.py); a row recorded whole is read back without any encoding, which
  is how the update gets every trajectory of the rollout before it.

Values equal the full-model pass up to float rounding: the frozen layers see the same tokens at the
same positions, in other matrix shapes (tests/local/test_trunk.py and test_trunk_smollm2.py bound
the difference on the tiny model and on SmolLM2).

Stored bytes are capped (`max_bytes`, least recently used out; SmolLM2 with 22 frozen layers: ~36 KiB
a token), and everything is dropped when a frozen parameter changes (storage pointer or in-place
version, as `PrefixCache.check_weights`). Only `LlamaModel` decoders without attention dropout are
split (their forward is mirrored here layer by layer); `FrozenTrunk.of` returns None for any other
model or when nothing is frozen, and callers then run the whole model as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaModel

from shopsimrl.local.split_attention import SPLIT_ATTENTION, SPLIT_CALLS, SplitCalls
from shopsimrl.rollout.generators.prefix_attention import (
    PREFIX_ATTENTION,
    PREFIX_CALLS,
    PrefixCalls,
    attention_implementation,
)

DEFAULT_MAX_BYTES = 512 << 20  # ~14k tokens of SmolLM2 below layer 22 (a GRPO micro-batch is ~3k)

LayerKV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TrunkStats:
    """Tokens encoded by the frozen layers, tokens read back from the store instead, entries now."""

    encoded_tokens: int = 0
    reused_tokens: int = 0
    recorded_tokens: int = 0  # hidden states a generator computed and handed over (`record`)
    unassembled: int = 0  # records dropped: the start of their sequence was not stored
    entries: int = 0
    stored_bytes: int = 0


class _Entry:
    """A token sequence's hidden states at the split and, when it can be continued, the frozen layers'
    keys and values (None for what a generator recorded)."""

    __slots__ = ("hidden", "layers", "nbytes", "tokens")

    def __init__(self, tokens: torch.Tensor, hidden: torch.Tensor, layers: list[LayerKV] | None):
        self.tokens, self.hidden, self.layers = tokens, hidden, layers
        self.nbytes = hidden.numel() * hidden.element_size() + sum(
            k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers or ()
        )


class FrozenTrunk:
    """The frozen layers below `split` of one model, with a store of what they computed (module doc)."""

    def __init__(self, model: Any, split: int, max_bytes: int = DEFAULT_MAX_BYTES):
        self.model = model
        self.decoder = getattr(model, model.base_model_prefix)
        self.split = split
        self.max_bytes = max_bytes
        self._frozen = [self.decoder.embed_tokens, *self.decoder.layers[:split]]
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._next_key = 0
        self._bytes = 0
        self._weights: tuple[tuple[int, int], ...] | None = None
        self._encoded = self._reused = self._recorded = self._unassembled = 0

    @classmethod
    def of(cls, model: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> FrozenTrunk | None:
        """The trunk below the first trainable layer; None when nothing is frozen or the decoder is not
        one whose forward this module mirrors (a `LlamaModel` without attention dropout)."""
        decoder = getattr(model, model.base_model_prefix)
        if type(decoder) is not LlamaModel or decoder.config.attention_dropout:
            return None
        if any(p.requires_grad for p in decoder.embed_tokens.parameters()):
            return None
        split = 0
        for layer in decoder.layers:
            if any(p.requires_grad for p in layer.parameters()):
                break
            split += 1
        if split in (0, len(decoder.layers)):  # nothing frozen, or no trainable layer to split at
            return None
        return cls(model, split, max_bytes)

    @property
    def stats(self) -> TrunkStats:
        return TrunkStats(
            self._encoded, self._reused, self._recorded, self._unassembled, len(self._entries), self._bytes
        )

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    # ------------------------------------------------------------------ bottom: frozen layers
    def hidden(self, rows: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Each row's hidden states entering layer `split`, `[len(row), hidden]`, without autograd."""
        self._check_frozen()
        out = []
        with torch.no_grad():
            for tokens in rows:
                out.append(self._row_hidden([int(t) for t in tokens]))
        return out

    def _row_hidden(self, tokens: list[int]) -> torch.Tensor:
        query = torch.tensor(tokens, dtype=torch.long)
        whole, common = self._lookup(query, with_layers=False)
        if whole is not None and common == len(tokens):
            self._reused += common
            return whole.hidden[:common]
        entry, common = self._lookup(query, with_layers=True)  # only keys and values can be continued
        self._reused += common
        prefix_layers = (
            [] if entry is None else [(k[:, :, :common], v[:, :, :common]) for k, v in entry.layers]
        )
        hidden, layers = self._encode(tokens, common, prefix_layers)
        if entry is not None:
            hidden = torch.cat([entry.hidden[:common], hidden])
        self._encoded += len(tokens) - common
        self._insert(query, hidden, layers)
        return hidden

    # ------------------------------------------------------------------ what a generator computed
    @property
    def layer(self) -> torch.nn.Module:
        """The first trainable layer: a generator records the hidden states entering it."""
        return self.decoder.layers[self.split]

    def record(self, tokens: Sequence[int], start: int, hidden: torch.Tensor) -> bool:
        """Keep the hidden states a generator computed at the split for `tokens[start:]` (`hidden`,
        `[len(tokens) - start, hidden size]`), joined to the stored ones of `tokens[:start]`; returns
        False (nothing kept) when those are not stored. Kept without keys and values: a row read back
        whole needs none (the GRPO update reads each trajectory back so: the rollout ran every token of
        it but the last, which predicts nothing)."""
        if hidden.shape[0] != len(tokens) - start:
            raise ValueError(f"{hidden.shape[0]} hidden states recorded for {len(tokens) - start} tokens")
        # A generator runs under inference mode; what is stored must be an ordinary tensor, since the
        # update feeds it to layers that autograd records.
        with torch.inference_mode(False), torch.no_grad():
            self._check_frozen()
            query = torch.tensor([int(t) for t in tokens], dtype=torch.long)
            hidden = hidden.clone()
            if start > 0:
                entry, common = self._lookup(query[:start], with_layers=False)
                if entry is None or common < start:
                    self._unassembled += 1
                    return False
                hidden = torch.cat([entry.hidden[:start], hidden])
            self._recorded += len(tokens) - start
            self._insert(query, hidden, None)
        return True

    def _encode(
        self, tokens: list[int], start: int, prefix: list[LayerKV]
    ) -> tuple[torch.Tensor, list[LayerKV]]:
        """tokens[start:] through the frozen layers after the cached `prefix` (keys/values of tokens[:start])."""
        device = self.decoder.embed_tokens.weight.device
        hidden = self.decoder.embed_tokens(torch.tensor([tokens[start:]], dtype=torch.long, device=device))
        positions = torch.arange(start, len(tokens), device=device)[None]
        cache = DynamicCache(ddp_cache_data=prefix) if prefix else DynamicCache()
        bottom = self.decoder.layers[: self.split]
        if not prefix:
            hidden = self._run(bottom, hidden, positions, self._mask(hidden, positions, None, None), cache)
        else:
            # After a stored prefix: the generator's unmasked two-part attention (prefix_attention.py),
            # as fast as a causal call; a masked SDPA call takes the CPU's slow path.
            counter = PrefixCalls()
            with attention_implementation(self.model, PREFIX_ATTENTION):
                hidden = self._run(bottom, hidden, positions, None, cache, **{PREFIX_CALLS: counter})
            if counter.calls != self.split:
                raise RuntimeError(f"prefix attention ran in {counter.calls} of {self.split} frozen layers")
        return hidden[0], [(layer.keys, layer.values) for layer in cache.layers[: self.split]]

    # ------------------------------------------------------------------ top: trainable layers
    def top_padded(
        self, bottoms: Sequence[torch.Tensor], positions: Sequence[tuple[int, int]]
    ) -> torch.Tensor:
        """The final hidden states at (row, position) `positions` of rows padded into one pass (autograd on)."""
        lengths = [b.shape[0] for b in bottoms]
        width = max(lengths)
        hidden = bottoms[0].new_zeros((len(bottoms), width, bottoms[0].shape[-1]))
        mask = torch.zeros((len(bottoms), width), dtype=torch.long, device=hidden.device)
        for row, bottom in enumerate(bottoms):
            hidden[row, : lengths[row]] = bottom
            mask[row, : lengths[row]] = 1
        columns = torch.arange(width, device=hidden.device)[None]
        out = self._run(
            self.decoder.layers[self.split :], hidden, columns, self._mask(hidden, columns, mask, None), None
        )
        rows, cols = zip(*positions, strict=True)
        return self.decoder.norm(out[torch.tensor(rows), torch.tensor(cols)])

    def top_shared(
        self, bottoms: Sequence[torch.Tensor], prefix: int, positions: Sequence[tuple[int, int]]
    ) -> torch.Tensor:
        """As `top_padded`, with the rows' shared first `prefix` positions run once and every row's rest
        on top of its keys and values (gradients from every row flow back into the one prefix pass)."""
        device = bottoms[0].device
        top = self.decoder.layers[self.split :]
        cache = DynamicCache()
        head_in, head_positions = bottoms[0][:prefix][None], torch.arange(prefix, device=device)[None]
        head = self._run(
            top, head_in, head_positions, self._mask(head_in, head_positions, None, None), cache
        )[0]
        cache.batch_repeat_interleave(len(bottoms))
        rests = [b.shape[0] - prefix for b in bottoms]
        width = max(rests)
        if width == 0:  # every row ends inside the shared prefix
            return self.decoder.norm(head[torch.tensor([pos for _, pos in positions], device=device)])
        suffix = bottoms[0].new_zeros((len(bottoms), width, bottoms[0].shape[-1]))  # right-padded
        for row, bottom in enumerate(bottoms):
            suffix[row, : rests[row]] = bottom[prefix:]
        tail_positions = torch.arange(prefix, prefix + width, device=device)[None]
        # Two unmasked attention calls with exact gradients (split_attention.py): a masked SDPA call
        # takes the CPU's slow path, forward and backward.
        counter = SplitCalls()
        with attention_implementation(self.model, SPLIT_ATTENTION):
            tail = self._run(top, suffix, tail_positions, None, cache, **{SPLIT_CALLS: counter})
        if counter.calls != len(top):
            raise RuntimeError(f"split attention ran in {counter.calls} of {len(top)} trainable layers")
        flat = torch.cat([head, tail.reshape(-1, tail.shape[-1])])
        where = [pos if pos < prefix else prefix + row * width + (pos - prefix) for row, pos in positions]
        return self.decoder.norm(flat[torch.tensor(where, device=device)])

    # ------------------------------------------------------------------ the layer loop
    def _mask(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        past: DynamicCache | None,
    ) -> Any:
        """The attention mask `LlamaModel.forward` would make: for `hidden`'s queries after the keys and
        values of `past` (whose trainable layers hold them: the top's prefix) under the 2D `mask`."""
        return create_causal_mask(
            config=self.decoder.config,
            inputs_embeds=hidden,
            attention_mask=mask,
            past_key_values=past,
            position_ids=positions,
            layer_idx=None if past is None else self.split,
        )

    def _run(
        self,
        layers: Sequence[torch.nn.Module],
        hidden: torch.Tensor,
        positions: torch.Tensor,
        causal_mask: Any,
        cache: DynamicCache | None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """`LlamaModel.forward`'s loop over `layers` (no embedding, no final norm)."""
        embeddings = self.decoder.rotary_emb(hidden, position_ids=positions)
        for layer in layers:
            hidden = layer(
                hidden,
                attention_mask=causal_mask,
                position_embeddings=embeddings,
                position_ids=positions,
                past_key_values=cache,
                use_cache=cache is not None,
                **kwargs,
            )
        return hidden

    # ------------------------------------------------------------------ the store
    def _check_frozen(self) -> None:
        """Drop every entry when a frozen parameter changed; refuse when one became trainable."""
        parameters = [p for module in self._frozen for p in module.parameters()]
        if any(p.requires_grad for p in parameters):
            raise RuntimeError(
                f"a parameter below layer {self.split} became trainable after the FrozenTrunk was made; "
                "make a new one (FrozenTrunk.of) after changing which layers train"
            )
        fingerprint = tuple((p.data_ptr(), p._version) for p in parameters)
        if fingerprint != self._weights:
            self.clear()
            self._weights = fingerprint

    def _lookup(self, query: torch.Tensor, *, with_layers: bool) -> tuple[_Entry | None, int]:
        """The stored entry sharing the longest token prefix with `query` (only entries with keys and
        values when `with_layers`), and that length."""
        best_key, best = None, 0
        for key, entry in self._entries.items():
            if with_layers and entry.layers is None:
                continue
            n = min(query.numel(), entry.tokens.numel())
            if n <= best:
                continue
            differ = torch.nonzero(entry.tokens[:n] != query[:n])
            common = n if differ.numel() == 0 else int(differ[0, 0])
            if common > best:
                best_key, best = key, common
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key], best

    def _insert(self, tokens: torch.Tensor, hidden: torch.Tensor, layers: list[LayerKV] | None) -> None:
        """Store an entry; entries it covers (a token prefix of it) go, except keys and values that a
        record without them would lose (the shared system prompt must stay continuable)."""
        length = tokens.numel()
        covered = [
            key
            for key, entry in self._entries.items()
            if entry.tokens.numel() <= length
            and (layers is not None or entry.layers is None)
            and torch.equal(entry.tokens, tokens[: entry.tokens.numel()])
        ]
        for key in covered:
            self._bytes -= self._entries.pop(key).nbytes
        entry = _Entry(tokens, hidden, layers)
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next_key] = entry
        self._next_key += 1
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes

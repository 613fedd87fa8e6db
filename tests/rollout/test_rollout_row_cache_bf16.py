"""bfloat16 keys and values (a generator computing in bfloat16, prefix_cache.py `kv_dtype`): the caches
store bfloat16, the decode batch attends in one masked call (row_cache.py `_masked_row_attention`),
and every row still decodes what it decodes alone, through rows leaving, joining, regrowing buffers
and draft blocks, on the tiny models (multi-head and grouped-query).

Tolerance: logits within 0.05 of a float32 row encoded alone. bfloat16 keeps 8 bits of mantissa (a
relative rounding of 2^-9 per stored key and value and per product); the tiny model's logits are of
order 1, so rounding moves them by a few 1e-3; a row that attended over another row's columns, or over
a never-written one, moves them by far more (or makes them NaN).
"""

from __future__ import annotations

import pytest
import torch

from shopsimrl.rollout.generators.precision import compute_precision
from shopsimrl.rollout.generators.prefill import encode_rows, prefill_cached, prefill_padded
from shopsimrl.rollout.generators.prefix_cache import PrefixCache

BF16_LOGIT_TOL = 5e-2


def _prompt(length: int, seed: int) -> list[int]:
    return torch.randint(3, 250, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_bfloat16_rows_decode_what_each_decodes_alone_in_float32(model):
    prompts = [_prompt(n, seed) for seed, n in enumerate([37, 5, 90, 12])]
    store = PrefixCache(kv_dtype=torch.bfloat16)
    with torch.inference_mode(), compute_precision(torch.bfloat16):
        batch = prefill_cached(model, prompts[:3], store, room=16)
        seen = [list(p) for p in prompts[:3]]  # what each row has been fed, in the batch's order
        assert {layer._key_store.dtype for layer in batch.cache.layers} == {torch.bfloat16}
        assert {layer._value_store.dtype for layer in batch.cache.layers} == {torch.bfloat16}

        def step(tokens, drafts=None):
            batch.step(model, tokens, drafts)
            for b, (row, token) in enumerate(zip(seen, tokens, strict=True)):
                row.extend([token, *(drafts[b] if drafts else [])])

        step([7, 8, 9])
        step([10, 11, 12], drafts=[[20, 21, 22], [23], []])  # blocks of different widths: padded
        for b in range(len(seen)):
            fed = batch.fed[b]
            batch.keep_drawn(b, fed)  # every draft confirmed: the row has seen all it was fed
        seen = [seen[b] for b in batch.drop([1])]
        joining = [prompts[3], _prompt(200, 9)]  # one in place, one longer than the fill column: regrow
        encoded = encode_rows(model, joining, store)
        batch.admit(encoded.layers, encoded.logits, room=8)
        seen.extend(list(p) for p in joining)
        assert batch.cache.regrowths == 2
        for t in range(2):
            step([30 + t] * len(seen))
    assert batch.positions.tolist() == [len(row) for row in seen]
    with torch.inference_mode():
        for b, tokens in enumerate(seen):
            alone = prefill_padded(model, [tokens], pad_id=0).logits[0]
            got = batch.block(b)[-1]
            assert torch.isfinite(got).all(), b
            assert got == pytest.approx(alone, abs=BF16_LOGIT_TOL), b


def test_the_prefix_cache_stores_bfloat16_and_float32_stays_as_produced(model):
    ids = _prompt(40, 3)
    with torch.inference_mode(), compute_precision(torch.bfloat16):
        typed, plain = PrefixCache(kv_dtype=torch.bfloat16), PrefixCache()
        encode_rows(model, [ids], typed)
        encode_rows(model, [ids + [5, 6]], typed)  # extends a stored prefix: the reused part stays bfloat16
        encode_rows(model, [ids], plain)
    (layers_typed, reused), (layers_plain, _) = typed.lookup(ids + [5, 6, 7]), plain.lookup(ids)
    assert reused == len(ids) + 2
    assert {t.dtype for kv in layers_typed for t in kv} == {torch.bfloat16}
    # without kv_dtype, autocast's float32 keys promote the values on concatenation: float32 stored
    assert {t.dtype for kv in layers_plain for t in kv} == {torch.float32}
    # half the bytes a token: one entry of len + 2 tokens in bfloat16 against one of len tokens in float32
    assert typed.stats.stored_bytes * 2 * len(ids) == plain.stats.stored_bytes * (len(ids) + 2)

"""RowCache and row-by-row attention against the left-padded, masked batch they replace, on tiny models.

Tolerance: logits within 1e-4 (float32). Both compute the same attention over each row's real
tokens; the masked batch adds exp(-inf) = 0 terms for its padding, so they differ by float rounding.
"""

from __future__ import annotations

import copy

import pytest
import torch

from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators.decode_batch import RowBatch
from shopsimrl.rollout.generators.prefill import encode_rows, prefill_cached, prefill_padded
from shopsimrl.rollout.generators.prefix_cache import PrefixCache
from shopsimrl.rollout.generators.row_cache import ROW_ATTENTION, SLACK, RowCache, attending_by_rows
from shopsimrl.rollout.generators.sampling import draw

LOGIT_TOL = 1e-4


def _prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    lengths = [37, 5, 90, 12, 61]  # every row but the longest is padded in the masked batch
    return [torch.randint(3, 250, (n,), generator=generator).tolist() for n in lengths]


def test_row_batch_decodes_what_the_masked_batch_decodes_as_rows_leave(model):
    prompts = _prompts()
    feed = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        rows = prefill_cached(model, prompts, PrefixCache(), room=12)
        padded = prefill_padded(model, prompts, pad_id=0)
        assert torch.cat([rows.block(b) for b in range(len(prompts))]) == pytest.approx(padded.logits, abs=LOGIT_TOL)
        alive = list(range(len(prompts)))  # prompt index of each row, in the row batch's order
        alive_padded = list(range(len(prompts)))
        leaving = {3: [1], 6: [0, 4], 9: [2]}  # step -> prompts that finish there
        for step in range(11):
            if step in leaving:
                alive = [alive[b] for b in rows.drop([alive.index(p) for p in leaving[step]])]
                alive_padded = [alive_padded[b] for b in padded.drop([alive_padded.index(p) for p in leaving[step]])]
            tokens = torch.randint(3, 250, (len(prompts),), generator=feed).tolist()
            rows.step(model, [tokens[p] for p in alive])
            padded.step(model, [tokens[p] for p in alive_padded])
            by_prompt = dict(zip(alive_padded, padded.logits, strict=True))
            for b, p in enumerate(alive):
                assert rows.block(b)[-1] == pytest.approx(by_prompt[p], abs=LOGIT_TOL), (step, p)
        assert sorted(alive) == [3]


def test_a_row_keeps_exactly_what_it_has_seen(model):
    """After swap-removes, `row_layers` is that row's cache alone: a batch built from it continues
    exactly as the full batch does, and as encoding the row's tokens from scratch does."""
    prompts = _prompts()
    with torch.inference_mode():
        batch = prefill_cached(model, prompts, PrefixCache(), room=4)
        batch.step(model, [7, 8, 9, 10, 11])
        # swap-remove, highest first: prompt 4 moves into slot 2, then prompt 3 into slot 0
        assert batch.drop([0, 2]) == [3, 1, 4]
        kept = batch.row_layers(2)
        assert [k.shape[-2] for k, _ in kept] == [len(prompts[4]) + 1] * len(kept)
        alone = RowBatch(RowCache([kept], room=2), [len(prompts[4]) + 1], batch.block(2),
                         encoded_tokens=0, reused_tokens=0)
        batch.step(model, [13, 14, 12])
        alone.step(model, [12])
        reference = prefill_padded(model, [prompts[4] + [11, 12]], pad_id=0)
        assert alone.block(0)[-1] == pytest.approx(reference.logits[0], abs=LOGIT_TOL)
        assert batch.block(2)[-1] == pytest.approx(reference.logits[0], abs=LOGIT_TOL)


def test_rows_that_join_a_running_batch_continue_as_if_alone(model):
    """Continuous batching: rows admitted between steps, in place (a free slot, shorter than the fill
    column) and by regrowing the buffers (no free slot, longer than the fill column), decode what they
    decode alone, and the rows already there are not disturbed."""
    prompts = _prompts()
    long_prompt = torch.randint(3, 250, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    store = PrefixCache()
    with torch.inference_mode():
        batch = prefill_cached(model, prompts[:2], store, room=8)
        seen = [list(prompts[0]), list(prompts[1])]  # what each row has been fed, in the batch's order

        def step(tokens):
            batch.step(model, tokens)
            for row, token in zip(seen, tokens, strict=True):
                row.append(token)

        def join(new_prompts, room):
            encoded = encode_rows(model, new_prompts, store)
            batch.admit(encoded.layers, encoded.logits, room)
            seen.extend(list(p) for p in new_prompts)

        step([7, 8])
        seen = [seen[b] for b in batch.drop([1])]
        join([prompts[3]], room=4)
        assert batch.cache.regrowths == 1  # the first allocation only: the row went in place
        step([9, 10])
        join([prompts[2], long_prompt], room=4)
        assert batch.cache.regrowths == 2
        for t in range(3):
            step([11 + t] * len(seen))
        assert batch.positions.tolist() == [len(row) for row in seen]
        for b, tokens in enumerate(seen):
            alone = prefill_padded(model, [tokens], pad_id=0)
            assert batch.block(b)[-1] == pytest.approx(alone.logits[0], abs=LOGIT_TOL), b


def test_row_attention_only_decodes_and_the_attention_setting_is_restored(model):
    before = model.config._attn_implementation
    with pytest.raises(RuntimeError, match="decodes rows of a RowCache"):
        with attending_by_rows(model):
            assert model.config._attn_implementation == ROW_ATTENTION
            model(input_ids=torch.tensor([[5, 6, 7]]))  # a prompt is not a decode step
    assert model.config._attn_implementation == before
    with pytest.raises(ValueError, match="at least one row"):
        RowCache([], room=1)


def test_a_full_row_cache_says_so(model):
    with torch.inference_mode():
        batch = prefill_cached(model, [[5, 6, 7]], PrefixCache(), room=1)
        filled = 3 + SLACK  # the prompt, right-aligned after the spare columns
        columns = filled + 1 + SLACK  # its room, then the spare columns
        for _ in range(columns - filled):
            batch.step(model, [8])
        with pytest.raises(RuntimeError, match=f"RowCache is full: {columns + 1} columns needed, {columns} allocated"):
            batch.step(model, [9])


def test_draw_follows_the_weights_and_never_picks_a_zero_weight():
    weights = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0, 0.0])
    rng = torch.Generator().manual_seed(0)
    draws = 20_000
    counts = torch.bincount(torch.tensor([draw(weights, rng) for _ in range(draws)]), minlength=7)
    assert counts[[0, 2, 5, 6]].sum() == 0
    # 5 binomial standard deviations of a frequency at p = 0.5 and 20,000 draws: 0.018
    assert (counts.float() / draws)[[1, 3, 4]] == pytest.approx([0.5, 0.3, 0.2], abs=0.018)
    first, second = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert [draw(weights, first) for _ in range(50)] == [draw(weights, second) for _ in range(50)]


def test_a_layer_that_bypasses_row_attention_is_refused():
    """A layer that attends its own way (here: a config of its own that keeps SDPA) would read the
    unwritten columns outside its rows' spans; the step says so instead of returning its logits."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=0).eval()
    attention = model.model.layers[1].self_attn
    attention.config = copy.deepcopy(attention.config)
    with torch.inference_mode():
        batch = prefill_cached(model, _prompts(), PrefixCache(), room=2)
        with pytest.raises(RuntimeError, match=r"LlamaForCausalLM ran row attention in 1 of 2 layers"):
            batch.step(model, [5, 6, 7, 8, 9])

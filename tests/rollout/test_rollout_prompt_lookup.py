"""Prompt lookup: draft tokens copied from a row's context, fed after its last token and kept only as
far as the row's own draws confirm them.

Tolerance: tokens identical, log-probs and logits within 1e-4 (float32). A draft block computes the
same attention as one token at a time, in other matrix shapes (float rounding only).
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from shopsimrl.models import tiny_tokenizer
from shopsimrl.rollout.generators import BatchedLocalHFGenerator
from shopsimrl.rollout.generators.prefill import prefill_cached, prefill_padded
from shopsimrl.rollout.generators.prefix_cache import PrefixCache
from shopsimrl.rollout.generators.prompt_lookup import PromptLookup

TOL = 1e-4


def test_drafts_follow_the_latest_earlier_occurrence_of_the_longest_matching_suffix():
    assert PromptLookup([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]).draft(2) == [7, 5]
    # (5, 3) occurred before: its follower wins over the later follower of (3,) alone
    assert PromptLookup([5, 3, 8, 4, 3, 9, 5, 3]).draft(2) == [8, 4]
    assert PromptLookup([5, 3, 8, 4, 3, 9, 5, 3], max_ngram=1).draft(2) == [9, 5]
    assert PromptLookup([1, 2, 3]).draft(4) == []  # the suffix itself is no source
    assert PromptLookup([1, 1]).draft(4) == [1]
    assert PromptLookup([1, 2, 1, 2, 1]).draft(0) == []
    grown = PromptLookup([4, 6])
    grown.extend([4, 7, 8, 4])
    assert len(grown) == 6
    assert grown.draft(3) == PromptLookup([4, 6, 4, 7, 8, 4]).draft(3) == [7, 8, 4]
    with pytest.raises(ValueError, match="max_ngram"):
        PromptLookup([1], max_ngram=0)


def _prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(3, 250, (n,), generator=generator).tolist() for n in (23, 8, 41)]


def test_a_draft_block_scores_each_position_and_unconfirmed_drafts_leave_the_cache(model):
    """Rows fed their last token plus 0, 1 and 3 drafts: each logits row equals the logits of the
    prompt plus the tokens fed up to it; after `keep_drawn`, a row continues exactly as if only the
    confirmed tokens had ever been fed, and `row_layers` holds just those."""
    prompts = _prompts()
    tokens = [[11], [12], [13]]
    drafts = [[], [21], [31, 32, 33]]
    with torch.inference_mode():
        batch = prefill_cached(model, prompts, PrefixCache(), room=8)
        batch.step(model, [t[0] for t in tokens], drafts)
        for b, prompt in enumerate(prompts):
            fed = tokens[b] + drafts[b]
            assert batch.block(b).shape[0] == len(fed)
            for j in range(len(fed)):
                alone = prefill_padded(model, [prompt + fed[: j + 1]], pad_id=0)
                assert batch.block(b)[j] == pytest.approx(alone.logits[0], abs=TOL), (b, j)
        drawn = [1, 2, 2]  # row 2 confirms one of its three drafts
        for b, n in enumerate(drawn):
            batch.keep_drawn(b, n)
        kept = [prompts[b] + (tokens[b] + drafts[b])[: drawn[b]] for b in range(3)]
        assert batch.positions.tolist() == [len(k) for k in kept]
        assert [batch.row_layers(b)[0][0].shape[-2] for b in range(3)] == [len(k) for k in kept]
        batch.step(model, [40, 41, 42], [[43], [], [44, 45]])
        for b, feed in enumerate([[40, 43], [41], [42, 44, 45]]):
            for j in range(len(feed)):
                alone = prefill_padded(model, [kept[b] + feed[: j + 1]], pad_id=0)
                assert batch.block(b)[j] == pytest.approx(alone.logits[0], abs=TOL), (b, j)
        with pytest.raises(ValueError, match="cannot forget"):
            batch.cache.forget(0, 10_000)


# A random tiny model repeats itself: greedy and cool sampling draw what the context already holds.
PARAMS = [{"temperature": 0}, {"temperature": 0.3}, {"temperature": 0.5, "top_k": 20, "sampling_seed": 4}]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "seeded-stream", "sampling-seed"])
def test_drafts_change_the_steps_not_the_draws(model, params):
    """Concurrent callers, one with a second turn that joins the running batch, rows cut by
    `max_new_tokens` and by a stop id inside a confirmed run: with drafts each caller gets exactly
    what it gets without them (and without KV reuse), in no more decode steps."""
    tokenizer = tiny_tokenizer()
    prompts = [p * 2 for p in _prompts()]  # contexts that repeat themselves, as an agent's do

    def run(generator, stop_ids):
        async def two_turns():
            first = await generator.generate(prompts[0], {**params, "max_new_tokens": 9})
            follow = prompts[0] + first.token_ids + prompts[1][:5]
            return [first, await generator.generate(follow, {**params, "max_new_tokens": 30})]

        async def main():
            turns, *others = await asyncio.gather(
                two_turns(),
                generator.generate(prompts[1], {**params, "max_new_tokens": 40}),
                generator.generate(prompts[2], {**params, "max_new_tokens": 40, "stop_token_ids": stop_ids}),
            )
            return [*turns, *others]

        return asyncio.run(main())

    unstopped = run(BatchedLocalHFGenerator(model, tokenizer, seed=7, draft_tokens=0), [])
    stop = unstopped[-1].token_ids[12]  # a token drawn mid-turn: the row now stops at its first draw
    plain = BatchedLocalHFGenerator(model, tokenizer, seed=7, draft_tokens=0)
    drafting = BatchedLocalHFGenerator(model, tokenizer, seed=7, draft_tokens=4)
    uncached = BatchedLocalHFGenerator(model, tokenizer, seed=7, prefix_cache=False)
    want, got, padded = (run(generator, [stop]) for generator in (plain, drafting, uncached))
    assert want[-1].finish_reason.value == "stop" and len(want[-1].token_ids) <= 13
    for mine, other in ((got, want), (got, padded)):
        assert [r.token_ids for r in mine] == [r.token_ids for r in other]
        assert [r.finish_reason for r in mine] == [r.finish_reason for r in other]
        for a, b in zip(mine, other, strict=True):
            assert a.log_probs == pytest.approx(b.log_probs, abs=TOL)
    assert drafting.profile.decode_tokens == plain.profile.decode_tokens
    assert drafting.profile.drafts_confirmed > 0
    # a step lasts as long as its slowest row: confirmed drafts of other rows need not shorten it
    assert drafting.profile.decode_steps <= plain.profile.decode_steps
    if params["temperature"] == 0:
        assert drafting.profile.decode_steps < plain.profile.decode_steps
    assert plain.profile.drafts_fed == plain.profile.drafts_confirmed == 0


def test_synchronous_batches_draft_too(model):
    tokenizer = tiny_tokenizer()
    requests = [(p * 2, {"temperature": 0, "max_new_tokens": 24}) for p in _prompts()]
    drafting = BatchedLocalHFGenerator(model, tokenizer, draft_tokens=3)
    plain = BatchedLocalHFGenerator(model, tokenizer, draft_tokens=0)
    got, want = drafting.generate_batch_sync(requests), plain.generate_batch_sync(requests)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    for a, b in zip(got, want, strict=True):
        assert a.log_probs == pytest.approx(b.log_probs, abs=TOL)
    assert drafting.profile.decode_steps < plain.profile.decode_steps


def test_draft_tokens_must_not_be_negative(model):
    with pytest.raises(ValueError, match="draft_tokens=-1"):
        BatchedLocalHFGenerator(model, tiny_tokenizer(), draft_tokens=-1)

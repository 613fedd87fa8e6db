"""KV reuse in the local generators, on the tiny model: the cached path gives what the uncached one gives.

Tolerance: tokens identical, log-probs within 1e-4 (float32). Reuse changes only which matrix
shapes compute the same numbers (a prefix read from the cache instead of recomputed), so the
differences are float rounding, orders of magnitude below the tolerance.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from shopsimrl.config import ShopSimOptions
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, LocalHFGenerator
from shopsimrl.rollout.generators.prefix_cache import PrefixCache
from shopsimrl.rollout.prompting import ChatRenderer, initial_messages
from shopsimrl.shop import ShopEnv, generate_catalog, load_split

LOGPROB_TOL = 1e-4
# Stop on any of 40 common bytes, or after three newlines (greedy repeats "\n"), so the random
# model's turns end (and episodes go on) quickly.
STOPS = {"stop_token_ids": list(range(ord("a"), ord("a") + 40)), "stop": ["\n\n\n"]}


@pytest.fixture(scope="module")
def setup():
    tokenizer = tiny_tokenizer()
    catalog = generate_catalog(seed=0, num_products=500)
    return tokenizer, tiny_model(tokenizer, seed=0), catalog


def _options(tmp_path) -> ShopSimOptions:
    return ShopSimOptions(run_dir=str(tmp_path), max_turns=3, max_new_tokens_per_turn=24, max_context_tokens=8192)


def _groups(generator, tokenizer, catalog, options, params, *, siblings=2, tasks=2):
    """`tasks` groups of `siblings` concurrent episodes (siblings share task and prompt), as the driver runs them."""
    chosen = load_split(catalog, "train")[:tasks]

    async def main():
        return await asyncio.gather(
            *(
                run_trajectory(
                    task=task,
                    catalog=catalog,
                    tokenizer=tokenizer,
                    generator=generator,
                    options=options,
                    skill_texts=["Compare every attribute before you buy."],
                    sampling_params=dict(params),
                )
                for task in chosen
                for _ in range(siblings)
            )
        )

    return asyncio.run(main())


def _assert_same_episodes(cached, uncached):
    for mine, reference in zip(cached, uncached, strict=True):
        assert mine.num_turns == reference.num_turns
        assert [s.tokens for s in mine.segments] == [s.tokens for s in reference.segments]
        assert [s.loss_mask for s in mine.segments] == [s.loss_mask for s in reference.segments]
        for segment, ref_segment in zip(mine.segments, reference.segments, strict=True):
            assert segment.rollout_log_probs == pytest.approx(ref_segment.rollout_log_probs, abs=LOGPROB_TOL)


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0},
        {"temperature": 0.7, "top_p": 0.9, "top_k": 50},  # row seeds from the generator's stream
        {"temperature": 1.0, "sampling_seed": 5},
    ],
    ids=["greedy", "seeded-stream", "sampling-seed"],
)
def test_cached_batched_episodes_equal_uncached_and_reuse_turns_and_siblings(tmp_path, setup, params):
    tokenizer, model, catalog = setup
    options = _options(tmp_path)
    params = {**params, **STOPS}
    cached = BatchedLocalHFGenerator(model, tokenizer, seed=3)
    uncached = BatchedLocalHFGenerator(model, tokenizer, seed=3, prefix_cache=False)
    with_cache = _groups(cached, tokenizer, catalog, options, params)
    without = _groups(uncached, tokenizer, catalog, options, params)
    assert sum(t.num_turns for t in with_cache) >= 10
    _assert_same_episodes(with_cache, without)
    assert cached.stats.requests == uncached.stats.requests
    # Uncached: every turn encodes each whole segment. Cached: each group's prompt is encoded once
    # (its siblings encode only the last prompt token), later turns only what is new.
    assert uncached.profile.reused_tokens == 0
    assert uncached.profile.prefill_tokens == sum(sum(_turn_inputs(t)) for t in without)
    assert cached.profile.reused_tokens + cached.profile.prefill_tokens == uncached.profile.prefill_tokens
    assert cached.profile.prefill_tokens < uncached.profile.prefill_tokens / 4
    # Only the very first request finds nothing: even the other group shares the system prompt.
    assert cached.cache_stats.hits == cached.cache_stats.lookups - 1
    assert cached.profile.decode_tokens == uncached.profile.decode_tokens == sum(
        sum(s.response_length - s.loss_mask.count(0) for s in t.segments) for t in with_cache
    )
    # Memory: one entry per distinct episode (its latest turn), the rest was replaced. (Siblings with
    # the same sampling_seed are identical episodes and end on one entry.)
    assert cached.cache_stats.entries == len({tuple(t.segments[-1].tokens) for t in with_cache})


def _turn_inputs(trajectory) -> list[int]:
    """Input length of every turn: a segment's prompt, then the segment so far after each observation."""
    lengths = []
    for segment in trajectory.segments:
        seen = len(segment.prompt_ids)
        for value, run in _runs(segment.loss_mask):
            if value == 1:  # a model turn starts here
                lengths.append(seen)
            seen += run
    return lengths


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    runs: list[list[int]] = []
    for value in mask:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return [(value, length) for value, length in runs]


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 0.8, "sampling_seed": 9}])
def test_cached_local_hf_equals_uncached_turn_by_turn(tmp_path, setup, params):
    tokenizer, model, catalog = setup
    options = _options(tmp_path)
    params = {**params, **STOPS}
    cached = LocalHFGenerator(model, tokenizer, seed=1)
    uncached = LocalHFGenerator(model, tokenizer, seed=1, prefix_cache=False)
    with_cache = _groups(cached, tokenizer, catalog, options, params)
    without = _groups(uncached, tokenizer, catalog, options, params)
    _assert_same_episodes(with_cache, without)
    assert cached.cache_stats.reused_tokens > 0
    assert uncached.cache_stats is None


def test_a_turn_cut_at_max_new_tokens_is_reused_whole(setup):
    """A turn that ended on max_new_tokens fed its last token (LocalHF) or not (batched): both store
    exactly what the model saw, and the next turn reuses all of it."""
    tokenizer, model, _ = setup
    prompt = [257, *b"user\nhello", 258, 10, 257, *b"assistant\n"]
    params = {"temperature": 0, "max_new_tokens": 5}
    for generator in (LocalHFGenerator(model, tokenizer), BatchedLocalHFGenerator(model, tokenizer)):
        first = asyncio.run(generator.generate(prompt, params))
        follow = prompt + first.token_ids + [258, 10]
        second = asyncio.run(generator.generate(follow, params))
        reference = LocalHFGenerator(model, tokenizer, prefix_cache=False).generate_sync(follow, params)
        assert second.token_ids == reference.token_ids
        assert second.log_probs == pytest.approx(reference.log_probs, abs=LOGPROB_TOL)
        assert generator.cache_stats.reused_tokens >= len(prompt) + len(first.token_ids) - 1


def test_a_new_tool_set_shares_only_the_prefix_before_the_tools(tmp_path, setup):
    """A segment boundary re-renders the system prompt with other tools: the cache serves at most the
    tokens before the first difference, and the result equals an uncached generation."""
    tokenizer, model, catalog = setup
    env = ShopEnv(catalog, max_turns=4)
    instruction, _ = env.reset(task=load_split(catalog, "train")[0], seed=0)
    messages = initial_messages([], instruction)
    tools = env.offered_tools()
    checkout = {"type": "function", "function": {"name": "checkout", "description": "Buy the cart.",
                                                 "parameters": {"type": "object", "properties": {}}}}
    renderer = ChatRenderer(tokenizer)
    before = list(tokenizer.encode(renderer.prompt_text(messages, tools), add_special_tokens=False))
    fewer = list(tokenizer.encode(renderer.prompt_text(messages, [*tools, checkout]), add_special_tokens=False))
    common = next(i for i, (a, b) in enumerate(zip(before, fewer, strict=False)) if a != b)
    assert 0 < common < len(before) - 100  # the tool block sits in the system prompt, well before the end
    params = {"temperature": 0, "max_new_tokens": 6}
    generator = BatchedLocalHFGenerator(model, tokenizer)
    asyncio.run(generator.generate(before, params))
    got = asyncio.run(generator.generate(fewer, params))
    assert generator.profile.reused_tokens == common
    want = LocalHFGenerator(model, tokenizer, prefix_cache=False).generate_sync(fewer, params)
    assert got.token_ids == want.token_ids
    assert got.log_probs == pytest.approx(want.log_probs, abs=LOGPROB_TOL)


def test_a_weight_update_drops_the_cache(setup):
    tokenizer, _, _ = setup
    model = tiny_model(tokenizer, seed=2)
    prompt = [257, *b"user\nred scarf", 258, 10, 257, *b"assistant\n"]
    params = {"temperature": 0, "max_new_tokens": 6}
    generator = BatchedLocalHFGenerator(model, tokenizer)
    asyncio.run(generator.generate(prompt, params))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = model(input_ids=torch.tensor([prompt]), labels=torch.tensor([prompt])).loss
    loss.backward()
    optimizer.step()  # in place, as the GRPO update does
    got = asyncio.run(generator.generate(prompt, params))
    want = LocalHFGenerator(model, tokenizer, prefix_cache=False).generate_sync(prompt, params)
    assert generator.cache_stats.reused_tokens == 0  # the stale cache was not used
    assert got.token_ids == want.token_ids
    assert got.log_probs == pytest.approx(want.log_probs, abs=LOGPROB_TOL)


def _layers(length: int, width: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, 1, length, width), torch.zeros(1, 1, length, width))]


def test_prefix_cache_replaces_covered_entries_and_evicts_least_recently_used():
    per_token = 2 * 4 * 4  # keys + values, width 4, float32
    cache = PrefixCache(max_bytes=10 * per_token)
    cache.insert([1, 2, 3], _layers(3))
    cache.insert([1, 2, 3, 4, 5], _layers(5))  # the next turn of the same episode covers the first
    assert (cache.stats.entries, cache.stats.stored_tokens) == (1, 5)
    layers, reused = cache.lookup([1, 2, 3, 9, 9])
    assert reused == 3 and layers[0][0].shape == (1, 1, 3, 4)
    assert cache.lookup([1, 2, 3, 4, 5])[1] == 4  # the last input token is always encoded
    assert cache.lookup([7])[1] == 0
    cache.insert([7, 8, 9], _layers(3))
    cache.lookup([1, 2, 3, 4, 5, 6])  # [1..5] is now the most recently used
    cache.insert([5, 6, 7, 8], _layers(4))  # 12 tokens > 10: the least recently used goes
    assert cache.stats.stored_tokens == 9 and cache.stats.evictions == 1
    assert cache.lookup([7, 8, 9, 10])[1] == 0
    assert cache.lookup([1, 2, 3, 4, 5, 6])[1] == 5
    cache.insert([4] * 11, _layers(11))  # larger than the whole budget: not stored
    assert cache.stats.stored_tokens == 9
    with pytest.raises(ValueError, match=r"^cache of \[2\] tokens stored for 3 tokens$"):
        cache.insert([1, 2, 3], _layers(2))
    with pytest.raises(ValueError, match=r"^max_bytes=-1 must be >= 0 \(0 stores nothing\)$"):
        PrefixCache(max_bytes=-1)
    cache.clear()
    assert cache.stats.entries == 0 and cache.stats.stored_bytes == 0


def test_a_small_cap_evicts_but_never_changes_results(tmp_path, setup):
    tokenizer, model, catalog = setup
    options = _options(tmp_path)
    params = {"temperature": 0, **STOPS}
    per_token = 2 * 2 * model.config.hidden_size * 4  # 2 layers x (keys + values) x hidden x float32
    # ~2,000-token prompts: room for one episode's cache at a time.
    small = BatchedLocalHFGenerator(model, tokenizer, cache_max_bytes=4000 * per_token)
    uncached = BatchedLocalHFGenerator(model, tokenizer, prefix_cache=False)
    _assert_same_episodes(
        _groups(small, tokenizer, catalog, options, params),
        _groups(uncached, tokenizer, catalog, options, params),
    )
    assert small.cache_stats.evictions > 0
    assert small.cache_stats.reused_tokens > 0
    assert small.cache_stats.stored_bytes <= 4000 * per_token
    small.clear_cache()
    assert small.cache_stats.entries == 0

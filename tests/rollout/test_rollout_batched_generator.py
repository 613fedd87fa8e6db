"""BatchedLocalHFGenerator on the tiny model: same tokens and log-probs as LocalHFGenerator, per-row stops."""

from __future__ import annotations

import asyncio

import pytest
import torch

from shopsimrl.config import ShopSimOptions
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, FinishReason, Generator, LocalHFGenerator
from shopsimrl.rollout.generators.batched_local import BatchStats
from shopsimrl.shop import generate_catalog, load_split


@pytest.fixture(scope="module")
def setup():
    tokenizer = tiny_tokenizer()
    return tokenizer, tiny_model(tokenizer, seed=0)


def _chat(user: str) -> list[int]:
    return [257, *b"user\n", *user.encode(), 258, 10, 257, *b"assistant\n"]


# Four prompts of different lengths (13 to 46 tokens), so every row but the longest is left-padded.
PROMPTS = [
    _chat("hi"),
    _chat("find me a red wool scarf under 30 dollars"),
    _chat("ok?"),
    _chat("size 9 boots"),
]


def _gather(generator, requests):
    async def main():
        return await asyncio.gather(*(generator.generate(ids, params) for ids, params in requests))

    return asyncio.run(main())


def _full_forward_log_probs(model, prompt, tokens, temperature):
    """Log-probs of `tokens` under softmax(logits / T) from one unpadded forward of the whole sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    rows = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return [float(rows[i, token]) for i, token in enumerate(tokens)]


def test_it_is_a_generator_and_validates_its_own_arguments(setup):
    tokenizer, model = setup
    assert isinstance(BatchedLocalHFGenerator(model, tokenizer), Generator)
    with pytest.raises(ValueError, match=r"^max_batch=0 must be >= 1$"):
        BatchedLocalHFGenerator(model, tokenizer, max_batch=0)
    with pytest.raises(ValueError, match=r"^settle_rounds=0 must be >= 1$"):
        BatchedLocalHFGenerator(model, tokenizer, settle_rounds=0)


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 1.0, "top_k": 1}])
def test_greedy_rows_equal_local_hf_token_for_token_in_one_batch(setup, params):
    tokenizer, model = setup
    params = {**params, "max_new_tokens": 20}
    expected = [LocalHFGenerator(model, tokenizer).generate_sync(p, params) for p in PROMPTS]
    generator = BatchedLocalHFGenerator(model, tokenizer)
    results = _gather(generator, [(p, params) for p in PROMPTS])
    assert generator.stats == BatchStats(batches=1, requests=4, largest=4)
    for prompt, want, got in zip(PROMPTS, expected, results, strict=True):
        assert got.token_ids == want.token_ids
        assert got.finish_reason is want.finish_reason is FinishReason.LENGTH
        assert got.text == tokenizer.decode(want.token_ids, skip_special_tokens=False)
        assert got.log_probs == pytest.approx(want.log_probs, abs=1e-4)
        assert got.log_probs == pytest.approx(
            _full_forward_log_probs(model, prompt, got.token_ids, 1.0), abs=1e-4
        )


def test_sampled_log_probs_match_a_full_forward_of_each_row(setup):
    tokenizer, model = setup
    temperatures = [0.7, 1.0, 1.3, 0.7]
    requests = [
        (prompt, {"temperature": t, "top_p": 0.9, "top_k": 50, "max_new_tokens": 16})
        for prompt, t in zip(PROMPTS, temperatures, strict=True)
    ]
    results = _gather(BatchedLocalHFGenerator(model, tokenizer, seed=7), requests)
    for (prompt, params), result in zip(requests, results, strict=True):
        assert len(result.token_ids) == 16
        want = _full_forward_log_probs(model, prompt, result.token_ids, params["temperature"])
        assert result.log_probs == pytest.approx(want, abs=1e-4)


def test_rows_are_reproducible_for_a_seed_and_sampling_seed_matches_local_hf(setup):
    tokenizer, model = setup
    requests = [(p, {"temperature": 1.0, "max_new_tokens": 12}) for p in PROMPTS]
    first = _gather(BatchedLocalHFGenerator(model, tokenizer, seed=3), requests)
    again = _gather(BatchedLocalHFGenerator(model, tokenizer, seed=3), requests)
    other = _gather(BatchedLocalHFGenerator(model, tokenizer, seed=4), requests)
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert [r.log_probs for r in first] == [r.log_probs for r in again]
    assert [r.token_ids for r in first] != [r.token_ids for r in other]
    # Identical prompts in one batch still draw from separate streams.
    twins = _gather(BatchedLocalHFGenerator(model, tokenizer, seed=3), [requests[0], requests[0]])
    assert twins[0].token_ids != twins[1].token_ids
    seeded = {"temperature": 1.0, "max_new_tokens": 12, "sampling_seed": 11}
    alone = LocalHFGenerator(model, tokenizer).generate_sync(PROMPTS[1], seeded)
    batched = _gather(
        BatchedLocalHFGenerator(model, tokenizer), [(PROMPTS[0], requests[0][1]), (PROMPTS[1], seeded)]
    )
    assert batched[1].token_ids == alone.token_ids


def test_each_row_stops_on_its_own_stop_token_string_or_length(setup):
    tokenizer, model = setup
    greedy = {"temperature": 0, "max_new_tokens": 10}
    free = [LocalHFGenerator(model, tokenizer).generate_sync(p, greedy) for p in PROMPTS]
    stop_token = free[0].token_ids[3]
    stop_text = tokenizer.decode(free[2].token_ids[:2])
    requests = [
        (PROMPTS[0], {**greedy, "stop_token_ids": [stop_token]}),
        (PROMPTS[1], {**greedy, "max_new_tokens": 4}),
        (PROMPTS[2], {**greedy, "stop": [stop_text]}),
        (PROMPTS[3], greedy),
    ]
    results = _gather(BatchedLocalHFGenerator(model, tokenizer), requests)
    cut = free[0].token_ids.index(stop_token) + 1
    assert (results[0].token_ids, results[0].finish_reason) == (free[0].token_ids[:cut], FinishReason.STOP)
    assert (results[1].token_ids, results[1].finish_reason) == (free[1].token_ids[:4], FinishReason.LENGTH)
    assert (results[2].token_ids, results[2].finish_reason) == (free[2].token_ids[:2], FinishReason.STOP)
    assert (results[3].token_ids, results[3].finish_reason) == (free[3].token_ids, FinishReason.LENGTH)
    # The rows still decoding after others stopped keep their log-probs exact.
    assert results[3].log_probs == pytest.approx(
        _full_forward_log_probs(model, PROMPTS[3], results[3].token_ids, 1.0), abs=1e-4
    )


def _favouring(tokenizer, token_id):
    """The tiny model with an output bias of +50 on `token_id`, so greedy decoding emits it first."""
    model = tiny_model(tokenizer, seed=0)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[token_id] = 50.0
    model.lm_head = head
    return model


@pytest.mark.parametrize("stop_name", ["eos", "<|im_end|>"])
def test_eos_and_im_end_stop_every_row_and_are_kept(setup, stop_name):
    tokenizer, _ = setup
    token_id = tokenizer.eos_token_id if stop_name == "eos" else tokenizer.convert_tokens_to_ids(stop_name)
    model = _favouring(tokenizer, token_id)
    generator = BatchedLocalHFGenerator(model, tokenizer)
    results = _gather(generator, [(p, {"temperature": 0, "max_new_tokens": 8}) for p in PROMPTS])
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert (result.token_ids, result.finish_reason) == ([token_id], FinishReason.STOP)
        assert result.log_probs == pytest.approx(
            _full_forward_log_probs(model, prompt, [token_id], 1.0), abs=1e-4
        )


def test_a_single_request_and_a_zero_length_request_work(setup):
    tokenizer, model = setup
    params = {"temperature": 0, "max_new_tokens": 5}
    want = LocalHFGenerator(model, tokenizer).generate_sync(PROMPTS[1], params)
    generator = BatchedLocalHFGenerator(model, tokenizer)
    got = asyncio.run(generator.generate(PROMPTS[1], params))
    assert (got.token_ids, got.finish_reason) == (want.token_ids, FinishReason.LENGTH)
    assert got.log_probs == pytest.approx(want.log_probs, abs=1e-4)
    empty = asyncio.run(generator.generate(PROMPTS[1], {"max_new_tokens": 0}))
    assert (empty.token_ids, empty.log_probs, empty.finish_reason, empty.text) == (
        [],
        [],
        FinishReason.LENGTH,
        "",
    )
    assert generator.stats == BatchStats(batches=2, requests=2, largest=1)


def test_max_batch_splits_the_queue_and_keeps_each_callers_result(setup):
    tokenizer, model = setup
    params = {"temperature": 0, "max_new_tokens": 6}
    prompts = [*PROMPTS, _chat("blue")]
    want = [LocalHFGenerator(model, tokenizer).generate_sync(p, params) for p in prompts]
    generator = BatchedLocalHFGenerator(model, tokenizer, max_batch=2)
    got = _gather(generator, [(p, params) for p in prompts])
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert generator.stats == BatchStats(batches=3, requests=5, largest=2)
    sync = generator.generate_batch_sync([(p, params) for p in prompts])
    assert [r.token_ids for r in sync] == [r.token_ids for r in want]


def test_an_error_in_the_batch_reaches_every_caller_and_the_generator_recovers(setup):
    tokenizer, model = setup
    params = {"temperature": 0, "max_new_tokens": 4}
    generator = BatchedLocalHFGenerator(model, tokenizer)
    out_of_vocabulary = [len(tokenizer) + 5]

    async def main():
        calls = [generator.generate(PROMPTS[0], params), generator.generate(out_of_vocabulary, params)]
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=30)

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes] == [IndexError, IndexError]
    assert str(outcomes[0]) == "index out of range in self"
    assert outcomes[0] is outcomes[1]
    again = asyncio.run(generator.generate(PROMPTS[0], params))
    assert again.token_ids == LocalHFGenerator(model, tokenizer).generate_sync(PROMPTS[0], params).token_ids


def test_bad_params_fail_their_own_caller_only_and_a_cancelled_caller_is_skipped(setup):
    tokenizer, model = setup
    params = {"temperature": 0, "max_new_tokens": 3}
    generator = BatchedLocalHFGenerator(model, tokenizer)

    async def main():
        good = asyncio.ensure_future(generator.generate(PROMPTS[0], params))
        bad = asyncio.ensure_future(generator.generate(PROMPTS[1], {"top_p": 0}))
        empty = asyncio.ensure_future(generator.generate([], params))
        doomed = asyncio.ensure_future(generator.generate(PROMPTS[2], params))
        await asyncio.sleep(0)  # every call is queued (or rejected) before the flush
        doomed.cancel()
        return await asyncio.gather(good, bad, empty, doomed, return_exceptions=True)

    good, bad, empty, doomed = asyncio.run(main())
    assert good.token_ids == LocalHFGenerator(model, tokenizer).generate_sync(PROMPTS[0], params).token_ids
    assert isinstance(bad, ValueError) and str(bad) == "invalid sampling_params: top_p=0.0 is outside (0, 1]"
    assert isinstance(empty, ValueError)
    assert str(empty) == "input_ids is empty: a generation needs at least one prompt token"
    assert isinstance(doomed, asyncio.CancelledError)
    assert generator.stats == BatchStats(batches=1, requests=1, largest=1)


def test_model_mode_is_restored(setup):
    tokenizer, model = setup
    model.train()
    try:
        asyncio.run(BatchedLocalHFGenerator(model, tokenizer).generate(PROMPTS[0], {"max_new_tokens": 2}))
        assert model.training
    finally:
        model.eval()


def test_concurrent_agent_episodes_share_batches_and_equal_sequential_local_hf(tmp_path, setup):
    tokenizer, model = setup
    catalog = generate_catalog(seed=0, num_products=500)
    tasks = load_split(catalog, "train")[:4]
    options = ShopSimOptions(
        run_dir=str(tmp_path), max_turns=3, max_new_tokens_per_turn=256, max_context_tokens=8192
    )
    # Every turn samples with the same `sampling_seed`, so sequential LocalHFGenerator calls draw the
    # same streams as the batched rows; stop on any of 40 common bytes so random turns end quickly.
    stops = list(range(ord("a"), ord("a") + 40))
    params = {"temperature": 1.0, "max_new_tokens": 24, "stop_token_ids": stops, "sampling_seed": 5}

    def episode(task, generator):
        return run_trajectory(
            task=task,
            catalog=catalog,
            tokenizer=tokenizer,
            generator=generator,
            options=options,
            skill_texts=[],
            sampling_params=params,
        )

    async def concurrent(generator):
        return await asyncio.gather(*(episode(task, generator) for task in tasks))

    batched = BatchedLocalHFGenerator(model, tokenizer)
    together = asyncio.run(concurrent(batched))
    alone = [asyncio.run(episode(task, LocalHFGenerator(model, tokenizer))) for task in tasks]
    assert [t.num_turns for t in together] == [3, 3, 3, 3]
    assert batched.stats == BatchStats(batches=3, requests=12, largest=4)  # one batch per turn
    for mine, reference in zip(together, alone, strict=True):
        assert [s.tokens for s in mine.segments] == [s.tokens for s in reference.segments]
        assert [s.loss_mask for s in mine.segments] == [s.loss_mask for s in reference.segments]
        assert mine.messages == reference.messages
    # Different instructions, different prompt lengths: the batches were left-padded.
    assert len({len(t.segments[0].prompt_ids) for t in together}) == 4


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 1.0}], ids=["greedy", "seeded-stream"])
def test_a_callers_next_request_joins_the_running_batch(setup, params):
    """Continuous batching: a caller whose turn ended sends its next request while a longer row still
    decodes; with KV reuse it joins that batch instead of waiting for it (one decode step fewer here),
    and every caller gets what the batch-by-batch path (no KV reuse) gives it, stream for stream.
    Prompt lookup is off: it would change the step count this test counts."""
    tokenizer, model = setup
    short, long = {**params, "max_new_tokens": 2}, {**params, "max_new_tokens": 12}

    def run(generator):
        async def two_turns():
            first = await generator.generate(PROMPTS[0], short)
            second = await generator.generate(PROMPTS[0] + first.token_ids + PROMPTS[2], short)
            return [first, second]

        async def main():
            turns, other = await asyncio.gather(two_turns(), generator.generate(PROMPTS[1], long))
            return [*turns, other]

        return asyncio.run(main())

    continuous = BatchedLocalHFGenerator(model, tokenizer, seed=5, draft_tokens=0)
    by_batch = BatchedLocalHFGenerator(model, tokenizer, seed=5, prefix_cache=False)
    joined, waited = run(continuous), run(by_batch)
    assert [len(r.token_ids) for r in waited] == [2, 2, 12]  # the scenario: no row stopped early
    assert [r.token_ids for r in joined] == [r.token_ids for r in waited]
    for mine, reference in zip(joined, waited, strict=True):
        assert mine.log_probs == pytest.approx(reference.log_probs, abs=1e-4)
    # 12 tokens of the long row take 11 steps; the second turn's 2 tokens rode along with them.
    assert (continuous.profile.decode_steps, by_batch.profile.decode_steps) == (11, 12)
    assert continuous.stats == by_batch.stats == BatchStats(batches=2, requests=3, largest=2)


def test_a_stream_cancelled_between_steps_cancels_its_callers(setup):
    """The flusher is cancelled (the loop shuts down) while rows still decode: their callers are
    cancelled too, none waits forever."""
    tokenizer, model = setup
    generator = BatchedLocalHFGenerator(model, tokenizer)

    async def main():
        short = asyncio.ensure_future(generator.generate(PROMPTS[0], {"temperature": 0, "max_new_tokens": 1}))
        long = asyncio.ensure_future(generator.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 40}))
        await short  # the stream now waits a round for the short caller's next turn
        next(iter(generator._queues.values())).flusher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(long, timeout=30)

    asyncio.run(main())

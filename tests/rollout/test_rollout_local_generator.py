"""LocalHFGenerator on the tiny model: determinism, stops, greedy, truncation rules, log-probs."""

from __future__ import annotations

import asyncio

import pytest
import torch

from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import FinishReason, LocalHFGenerator


@pytest.fixture(scope="module")
def setup():
    tokenizer = tiny_tokenizer()
    return tokenizer, tiny_model(tokenizer, seed=0)


PROMPT = [257, *b"user\nhi", 258, 10, 257, *b"assistant\n"]


def _logits_after(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


def test_same_seed_same_tokens_and_logprobs_match_a_full_forward(setup):
    tokenizer, model = setup
    params = {"temperature": 0.7, "max_new_tokens": 12}
    first = asyncio.run(LocalHFGenerator(model, tokenizer, seed=3).generate(PROMPT, params))
    again = asyncio.run(LocalHFGenerator(model, tokenizer, seed=3).generate(PROMPT, params))
    assert (first.token_ids, first.log_probs) == (again.token_ids, again.log_probs)
    assert first.text == tokenizer.decode(first.token_ids)
    ids = list(PROMPT)
    for token, log_prob in zip(first.token_ids, first.log_probs, strict=True):
        expected = torch.log_softmax(_logits_after(model, ids) / 0.7, dim=-1)[token]
        assert log_prob == pytest.approx(float(expected), abs=1e-4)
        ids.append(token)


def test_greedy_is_argmax_with_temperature_one_logprobs(setup):
    tokenizer, model = setup
    result = asyncio.run(LocalHFGenerator(model, tokenizer).generate(PROMPT, {"temperature": 0, "max_new_tokens": 4}))
    logits = _logits_after(model, PROMPT)
    assert result.token_ids[0] == int(torch.argmax(logits))
    assert result.log_probs[0] == pytest.approx(float(torch.log_softmax(logits, -1).max()), abs=1e-5)
    assert result.finish_reason is FinishReason.LENGTH and len(result.token_ids) == 4


def test_top_k_one_equals_greedy_and_sampling_seed_overrides(setup):
    tokenizer, model = setup
    generator = LocalHFGenerator(model, tokenizer, seed=0)
    greedy = generator.generate_sync(PROMPT, {"temperature": 0, "max_new_tokens": 6})
    top1 = generator.generate_sync(PROMPT, {"temperature": 1.0, "top_k": 1, "max_new_tokens": 6})
    assert top1.token_ids == greedy.token_ids
    nucleus = generator.generate_sync(PROMPT, {"temperature": 1.0, "top_p": 1e-6, "max_new_tokens": 6})
    assert nucleus.token_ids == greedy.token_ids
    a = generator.generate_sync(PROMPT, {"max_new_tokens": 8, "sampling_seed": 5})
    b = generator.generate_sync(PROMPT, {"max_new_tokens": 8, "sampling_seed": 5})
    assert a.token_ids == b.token_ids


def test_stop_token_is_included_and_stop_strings_end_the_turn(setup):
    tokenizer, model = setup
    generator = LocalHFGenerator(model, tokenizer, seed=0)
    free = generator.generate_sync(PROMPT, {"temperature": 0, "max_new_tokens": 6})
    stop_at = free.token_ids[2]
    stopped = generator.generate_sync(PROMPT, {"temperature": 0, "max_new_tokens": 6, "stop_token_ids": [stop_at]})
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(stop_at) + 1]
    assert stopped.finish_reason is FinishReason.STOP
    text = tokenizer.decode(free.token_ids[:3])
    by_string = generator.generate_sync(PROMPT, {"temperature": 0, "max_new_tokens": 6, "stop": text})
    assert by_string.token_ids == free.token_ids[:3] and by_string.finish_reason is FinishReason.STOP


def test_model_mode_is_restored_and_bad_params_are_rejected(setup):
    tokenizer, model = setup
    model.train()
    LocalHFGenerator(model, tokenizer).generate_sync(PROMPT, {"max_new_tokens": 1})
    assert model.training
    model.eval()
    with pytest.raises(ValueError, match=r"invalid sampling_params: temperature=-1.0 is negative; top_p=0.0 is outside \(0, 1\]; top_k=0 must be -1 \(off\) or >= 1"):
        LocalHFGenerator(model, tokenizer).generate_sync(PROMPT, {"temperature": -1, "top_p": 0, "top_k": 0})
    with pytest.raises(ValueError, match="input_ids is empty"):
        LocalHFGenerator(model, tokenizer).generate_sync([], {})

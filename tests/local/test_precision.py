"""`model.compute_dtype: bfloat16` (rollout/generators/precision.py): the rollout's, warm start's and
update's forwards under `torch.autocast("cpu", bfloat16)`, float32 weights and optimizer state.

bfloat16 keeps 8 significant bits (machine epsilon 7.8e-3, float32's is 1.2e-7), so the bfloat16 path
is not held to float32 rounding: it computes the same function to ~2-3 significant digits. Tolerances,
on the tiny model (hidden 64, rows of tens of tokens; SmolLM2's are in test_trunk_smollm2.py):

* `BF16_VALUES` 5e-2 absolute on log-probs, losses and metrics (values of order 1-10 after a few
  layers of products rounded to 8 bits; measured on AMD EPYC: warm-start loss 3.3e-5, GRPO metrics
  1.5e-4). A path that skipped autocast would agree to 1e-6, and the tests also check the bfloat16
  side is not float32's (it moved by > 1e-5).
* `BF16_GRADIENTS` 0.1 relative per parameter tensor (||g_bf16 - g_fp32|| <= 0.1 ||g_fp32||): the
  direction of every tensor's gradient to about 6 degrees (measured: 1.1%). A lost gradient path or
  a wrong position gives errors of order 1.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from shopsimrl.analyst.config import TrialSettings
from shopsimrl.config.precision import cpu_flags, native_bfloat16
from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.episode_config import GeneratorConfig
from shopsimrl.local.config import ComputeDtype, run_config_from_mapping
from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, TrainItem
from shopsimrl.local.run import freeze_below
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.local.warm_start import sft_step
from shopsimrl.local.warm_start_cache import warm_start_key
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, LocalHFGenerator
from shopsimrl.rollout.generators.precision import InferencePrecision, compute_precision

BF16_VALUES = 5e-2
BF16_GRADIENTS = 0.1
FLOAT32_ROUNDING = 1e-5


def _model(layers: int = 4, trainable: int = 2, seed: int = 5):
    model = tiny_model(tiny_tokenizer(), seed=seed, num_layers=layers)
    freeze_below(model, trainable)
    return model


def _items() -> list[TrainItem]:
    """A group of two sharing a 40-token prompt and a lone row; advantages of both signs."""
    prompt = list(range(30, 70))

    def item(tokens: list[int], response: int, key: str, advantage: float) -> TrainItem:
        return TrainItem(tokens=tokens, response_length=response, loss_mask=[1] * response,
                         advantage=advantage, rollout_key=key)  # fmt: skip

    return [
        item(prompt + [5, 6, 7, 8], 4, "a", 0.8),
        item(prompt + [9, 10, 11], 3, "b", -0.4),
        item([*range(200, 230)], 6, "c", -1.0),
    ]


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _largest_relative_gradient_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((b[name] - a[name]).norm() / a[name].norm()) for name in a)


def test_float32_is_the_default_and_another_precision_is_refused_where_it_is_named(tiny_config) -> None:
    raw = tiny_config().model_dump(mode="json", exclude={"model": {"compute_dtype"}})
    assert run_config_from_mapping(raw, "t.yaml").model.compute_dtype is ComputeDtype.FLOAT32
    bf16 = run_config_from_mapping({**raw, "model": {"name": "tiny", "compute_dtype": "bfloat16"}}, "t.yaml")
    assert bf16.model.compute_dtype.torch is torch.bfloat16
    with pytest.raises(ConfigError, match=r"in t\.yaml .*\n  - model\.compute_dtype: Input should be 'float32', 'bfloat16' or 'auto'$"):
        run_config_from_mapping({**raw, "model": {"name": "tiny", "compute_dtype": "float16"}}, "t.yaml")
    with pytest.raises(ValueError, match=r"compute dtype torch\.float16 is not one of torch\.float32, torch\.bfloat16"):
        compute_precision(torch.float16)
    with pytest.raises(ValueError, match=r"compute dtype torch\.float16"):
        BatchedLocalHFGenerator(_model(), tiny_tokenizer(), compute_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"compute dtype torch\.float16"):
        LocalHFGenerator(_model(), tiny_tokenizer(), compute_dtype=torch.float16)
    # the gate's/evaluation's and the Analyst trials' generators take the same value
    assert GeneratorConfig().compute_dtype is TrialSettings().compute_dtype is ComputeDtype.FLOAT32
    assert GeneratorConfig(compute_dtype="bfloat16").compute_dtype.torch is torch.bfloat16
    for settings in (GeneratorConfig, TrialSettings):
        with pytest.raises(ValidationError, match="compute_dtype\n  Input should be 'float32', 'bfloat16' or 'auto'"):
            settings(compute_dtype="float16")


def test_the_warm_start_cache_key_names_bfloat16_and_keeps_float32s(tiny_config) -> None:
    """Cached float32 warm starts stay valid (their key has no new entry); a bfloat16 one is another entry."""
    config = tiny_config()
    key = warm_start_key(config)
    assert "compute_dtype" not in key
    bf16 = config.model_copy(update={"model": config.model.model_copy(update={"compute_dtype": ComputeDtype.BFLOAT16})})
    assert warm_start_key(bf16) == {**key, "compute_dtype": "bfloat16"}


@pytest.mark.parametrize("with_trunk", [False, True])
def test_a_bfloat16_grpo_step_agrees_with_float32_to_bfloat16_rounding_on_float32_weights(with_trunk: bool) -> None:
    """The old-log-prob pass and a step with entropy, shared-prefix and padded micro-batches."""
    items = _items()
    config = GrpoConfig(entropy_coef=0.01, clip_grad=1e9, max_tokens_per_microbatch=60, reuse_old_log_probs=False)
    runs = []
    for dtype in (torch.float32, torch.bfloat16):
        model = _model()
        trunk = FrozenTrunk.of(model) if with_trunk else None
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        trainer = GrpoTrainer(model, optimizer, config, trunk=trunk, compute_dtype=dtype)
        result = trainer.train_rollout(items, rollout_id=0, global_batch_size=3)
        assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights
        assert {s.dtype for state in optimizer.state.values() for s in state.values()} == {torch.float32}
        runs.append((result.step_metrics[0], _grads(model)))
    (fp32_metrics, fp32_grads), (bf16_metrics, bf16_grads) = runs
    assert bf16_metrics == pytest.approx(fp32_metrics, abs=BF16_VALUES)
    assert _largest_relative_gradient_difference(fp32_grads, bf16_grads) <= BF16_GRADIENTS
    assert _largest_relative_gradient_difference(fp32_grads, bf16_grads) > FLOAT32_ROUNDING  # autocast ran


def test_a_bfloat16_warm_start_step_agrees_with_float32_to_bfloat16_rounding() -> None:
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        model = _model()
        results.append((sft_step(model, _items(), 60, FrozenTrunk.of(model), dtype), _grads(model)))
    (fp32_loss, fp32_grads), (bf16_loss, bf16_grads) = results
    assert bf16_loss == pytest.approx(fp32_loss, abs=BF16_VALUES)
    assert abs(bf16_loss - fp32_loss) > FLOAT32_ROUNDING
    assert _largest_relative_gradient_difference(fp32_grads, bf16_grads) <= BF16_GRADIENTS


def test_a_bfloat16_rollout_hands_float32_hidden_states_that_the_update_reads_back() -> None:
    """The demo's wiring in bfloat16: the cached generator (KV reuse, prompt lookup) records for the
    trunk; the residual stream stays float32 under autocast, so the recorded hidden states are float32,
    are read back without encoding, and agree with the trunk's own bfloat16 computation. Greedy tokens
    and log-probs stay close to the float32 rollout's."""
    tokenizer = tiny_tokenizer()
    prompt = list(range(40, 60)) * 2
    params = {"temperature": 0.0, "max_new_tokens": 12}
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = _model(layers=3, trainable=1)
        trunk = FrozenTrunk.of(model)
        generator = BatchedLocalHFGenerator(model, tokenizer, seed=3, recorder=trunk, compute_dtype=dtype)
        first = generator.generate_batch_sync([(prompt + [7], params), (prompt + [8, 9], params)])
        results[dtype] = (trunk, first)
    trunk, first = results[torch.bfloat16]
    sequences = [p + r.token_ids[:-1] for p, r in zip([prompt + [7], prompt + [8, 9]], first, strict=True)]
    recorded = trunk.hidden(sequences)
    assert trunk.stats.encoded_tokens == 0 and trunk.stats.recorded_tokens > 0
    with compute_precision(torch.bfloat16):
        computed = FrozenTrunk.of(_model(layers=3, trainable=1)).hidden(sequences)
    for a, b in zip(recorded, computed, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=BF16_VALUES, rtol=0)
    for fp32, bf16 in zip(results[torch.float32][1], first, strict=True):
        pairs = list(zip(fp32.token_ids, bf16.token_ids, strict=False))
        same = next((i for i, (x, y) in enumerate(pairs) if x != y), len(pairs))
        assert same > 0  # the first token drawn agrees; later ones may not (a near tie in bfloat16)
        diffs = [abs(x - y) for x, y in zip(fp32.log_probs[:same], bf16.log_probs[:same], strict=True)]
        assert max(diffs) <= BF16_VALUES


def test_the_sequential_generator_in_bfloat16_draws_from_bfloat16_logits() -> None:
    """`LocalHFGenerator` (the gate's generator at concurrency 1) under autocast: greedy tokens start as
    float32's, the log-probs agree to bfloat16 rounding and are not float32's."""
    params = {"temperature": 0.0, "max_new_tokens": 8}
    prompt = list(range(40, 80))
    fp32, bf16 = (
        LocalHFGenerator(_model(), tiny_tokenizer(), compute_dtype=dtype).generate_sync(prompt, params)
        for dtype in (torch.float32, torch.bfloat16)
    )
    assert bf16.token_ids[0] == fp32.token_ids[0]
    assert abs(bf16.log_probs[0] - fp32.log_probs[0]) <= BF16_VALUES
    assert bf16.log_probs[0] != fp32.log_probs[0]


def _autocast_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(), compute_precision(torch.bfloat16):
        return model(input_ids=ids).logits


def test_inference_precision_computes_autocasts_products_from_kept_bfloat16_weights() -> None:
    """A generator's bfloat16 forwards compute the linears with bfloat16 copies of their weights
    (precision.py): the copy rounds as autocast's own cast does, so the logits are autocast's exactly
    (same operands, same kernels on one machine), not merely close. The copies are taken on entry: a
    weight changed inside does not reach the products (which is how the test sees the copies are
    used), and the next entry sees it. The model's parameters stay its own float32 tensors throughout,
    trainable ones still trainable, also after a forward that raised."""
    model = _model()
    ids = torch.tensor([list(range(40, 70))])
    precision = InferencePrecision(model, torch.bfloat16)
    parameters = dict(model.named_parameters())
    trainable = next(m for m in reversed(list(model.modules())) if isinstance(m, torch.nn.Linear) and m.weight.requires_grad)
    saved = trainable.weight.detach().clone()
    with torch.inference_mode(), precision.forwards():
        kept = model(input_ids=ids).logits
        assert dict(model.named_parameters()) == parameters
        with torch.inference_mode(False), torch.no_grad():
            trainable.weight.add_(0.05)  # what an optimizer step does: in place, the same tensor
        assert torch.equal(model(input_ids=ids).logits, kept)
    stepped = _autocast_logits(model, ids)
    assert (stepped - kept).abs().max() > BF16_VALUES
    with torch.inference_mode(), precision.forwards():
        assert torch.equal(model(input_ids=ids).logits, stepped)
    with torch.no_grad():
        trainable.weight.copy_(saved)  # in place again: a new version, the old values
    with torch.inference_mode(), precision.forwards():
        assert torch.equal(model(input_ids=ids).logits, kept)
    assert torch.equal(kept, _autocast_logits(model, ids))
    assert dict(model.named_parameters()) == parameters
    assert all(p.dtype == torch.float32 for p in parameters.values())
    assert any(p.requires_grad for p in parameters.values())

    with pytest.raises(RuntimeError, match="inside the forward"), precision.forwards():
        raise RuntimeError("inside the forward")
    assert "forward" not in vars(trainable)  # the class's forward again
    assert torch.equal(_autocast_logits(model, ids), kept)


def test_float32_inference_precision_leaves_the_model_alone() -> None:
    model = _model()
    ids = torch.tensor([list(range(40, 60))])
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
    with torch.inference_mode(), InferencePrecision(model, torch.float32).forwards():
        assert not any("forward" in vars(m) for m in model.modules())
        assert torch.equal(model(input_ids=ids).logits, plain)


def test_the_run_header_names_bfloat16_forwards_over_float32_weights(tiny_config) -> None:
    from shopsimrl.local.run import summary_line

    raw = tiny_config().model_dump(mode="json")
    fp32 = run_config_from_mapping(raw, "t.yaml")
    bf16 = run_config_from_mapping({**raw, "model": {**raw["model"], "compute_dtype": "bfloat16"}}, "t.yaml")
    model = _model()
    assert " dtype=float32 model=" in summary_line(fp32, model)
    assert " dtype=float32 compute=bfloat16 model=" in summary_line(bf16, model)


def _native_bfloat16_by_torch() -> bool:
    """torch's own answer (its cpuinfo library reads CPUID), independent of our /proc/cpuinfo reading."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def test_auto_is_bfloat16_exactly_where_the_cpu_multiplies_bfloat16_natively(tmp_path) -> None:
    assert native_bfloat16({"avx2", "avx512f", "avx512_bf16"}) and native_bfloat16({"amx_tile", "amx_bf16"})
    assert not native_bfloat16({"avx2", "avx512f", "avx512_vnni"}) and not native_bfloat16(set())
    cpuinfo = tmp_path / "cpuinfo"  # Linux's layout: one block per core, tab-padded names
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")  # fmt: skip
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_flags(arm) == frozenset() and cpu_flags(tmp_path / "absent") == frozenset()  # -> float32
    # On this machine, `auto` follows what the CPU really has (torch's CPUID reading, not ours).
    expected = ComputeDtype.BFLOAT16 if _native_bfloat16_by_torch() else ComputeDtype.FLOAT32
    assert ComputeDtype.AUTO.resolved is expected
    assert ComputeDtype.AUTO.torch is expected.torch
    assert ComputeDtype.FLOAT32.resolved is ComputeDtype.FLOAT32 and ComputeDtype.BFLOAT16.resolved is ComputeDtype.BFLOAT16


def test_auto_names_its_choice_in_the_run_header_and_shares_the_warm_start_entries_of_it(tiny_config) -> None:
    from shopsimrl.local.run import summary_line

    raw = tiny_config().model_dump(mode="json")
    auto = run_config_from_mapping({**raw, "model": {**raw["model"], "compute_dtype": "auto"}}, "t.yaml")
    chosen = ComputeDtype.BFLOAT16 if _native_bfloat16_by_torch() else ComputeDtype.FLOAT32
    same = run_config_from_mapping({**raw, "model": {**raw["model"], "compute_dtype": chosen.value}}, "t.yaml")
    compute = " compute=bfloat16" if chosen is ComputeDtype.BFLOAT16 else ""
    assert f" dtype=float32{compute} (auto) model=" in summary_line(auto, _model())
    assert warm_start_key(auto) == warm_start_key(same)

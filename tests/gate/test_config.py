"""Every shipped gate config validates; the example's design is the validated default; bad input is listed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shopsimrl.errors import ConfigError
from shopsimrl.gate.config import DesignConfig, load_gate_config
from shopsimrl.ops import compose_schema
from shopsimrl.skills.candidates import CandidatePool, apply_interventions
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import file_sha256

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "configs/archive/trace2skill_online_gate.example.yaml",
    "configs/trace2skill_online_gate.yaml",
    "configs/local/gate.yaml",
]
# The production config names no round: the `gate` compose service sets these keys from WANDB_GROUP
# and the checkpoint SGLang serves (tests/ops/test_compose_services.py runs the service's command).
ROUND_KEYS = {
    "round": "qwen35-4b-round-001",
    "inputs.checkpoint": "checkpoints/qwen35-4b-round-001/hf/rollout-199",
    "inputs.candidate_pool": "runs/qwen35-4b-round-001/analysis/candidate_pool.json",
    "inputs.proposal_ledger": "runs/qwen35-4b-round-001/analysis/proposal_ledger.jsonl",
}


def _load_shipped(path: str, overrides: dict | None = None):
    return load_gate_config(ROOT / path, {**(ROUND_KEYS if path == SHIPPED[1] else {}), **(overrides or {})})


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_configs_validate(path):
    config = _load_shipped(path)
    assert config.design.split == "validation"


def test_example_and_round_config_carry_the_validated_design():
    """The example carries the validated design (200 tasks, the power budget, the sequential gate). The
    production config runs on the 2,000-product catalog, whose validation split has 62 tasks (1/8 of its
    families): it keeps every other setting of the design and takes the whole split (the round refuses
    more before training); the power budget sizes the pairs to those 62 tasks."""
    assert _load_shipped(SHIPPED[0]).design == DesignConfig()
    production = _load_shipped(SHIPPED[1]).design
    assert production == DesignConfig(tasks=62)
    from shopsimrl.shop import generate_catalog, load_split

    assert len(load_split(generate_catalog(seed=0, num_products=2000), "validation")) == production.tasks


def test_the_production_config_names_no_round():
    with pytest.raises(ConfigError) as info:
        load_gate_config(ROOT / SHIPPED[1])
    assert info.value.problems == ["round: Field required", "inputs.checkpoint: Field required",
                                   "inputs.candidate_pool: Field required"]


def test_demo_pool_belongs_to_the_demo_skillbank_and_applies():
    config = load_gate_config(ROOT / "configs/local/gate.yaml")
    pool = CandidatePool.model_validate_json((ROOT / config.inputs.candidate_pool).read_text())
    skillbank = ROOT / config.inputs.skillbank
    assert pool.skillbank_sha256 == file_sha256(skillbank)
    apply_interventions(load_skillbank(skillbank), list(pool.interventions), config.round)


def test_every_problem_is_reported_at_once(tmp_path):
    raw = yaml.safe_load((ROOT / SHIPPED[0]).read_text())
    raw["design"]["tasks"] = 500
    raw["generator"]["url"] = None
    raw["episode"]["colour"] = "red"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_gate_config(path)
    # Field errors come first; the cross-field check (url) runs only on a structurally valid config.
    assert info.value.problems == [
        "design.tasks: Input should be less than or equal to 200",
        "episode.colour: Extra inputs are not permitted",
    ]


def test_sglang_backend_needs_a_url_and_overrides_apply(tmp_path):
    with pytest.raises(ConfigError, match="generator.url is required with generator.backend: sglang"):
        _load_shipped(SHIPPED[1], {"generator.url": None})
    config = _load_shipped(SHIPPED[1], {"design.tasks": 8, "design.pairing": "bare", "design.replicates": 3})
    assert (config.design.tasks, config.design.pairing.value, config.design.episodes) == (8, "bare", 48)


def test_compose_gate_service_serves_the_checkpoint_with_sglang_on_the_gpus():
    services = compose_schema.read_compose(ROOT / "compose.yaml")["services"]
    gate, train = services["gate"], services["train"]
    for key in ("image", "deploy", "ipc", "shm_size", "ulimits", "volumes", "env_file"):
        assert gate[key] == train[key], key
    # scripts/with_sglang.sh serves the checkpoint (tests/ops/test_with_sglang.py), then the gate runs.
    assert gate["command"][2:6] == ["bash", "/opt/shopsimrl/scripts/with_sglang.sh", "bash", "-c"]
    assert "exec shopsimrl training online-gate configs/trace2skill_online_gate.yaml" in gate["command"][-1]


def _with_design(tmp_path, **design):
    raw = yaml.safe_load((ROOT / SHIPPED[0]).read_text())
    raw["design"].pop("min_effect", None)
    raw["design"].update(design)
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_min_effect_per_outcome_and_the_older_single_form(tmp_path):
    """One bound per outcome; the older single `min_effect` still sets both (fails before: extra keys)."""
    design = load_gate_config(_with_design(tmp_path, min_effect_success=0.10, min_effect_reward=0.05)).design
    assert (design.min_effect_for("success"), design.min_effect_for("reward")) == (0.10, 0.05)
    older = load_gate_config(_with_design(tmp_path, min_effect=0.2)).design
    assert (older.min_effect_success, older.min_effect_reward, older.min_effect) == (0.2, 0.2, None)
    assert "min_effect" not in older.model_dump()  # folded in: the manifest records the two bounds only
    same = load_gate_config(_with_design(tmp_path, min_effect=0.2, min_effect_success=0.2)).design
    assert same == older
    with pytest.raises(ConfigError) as info:
        load_gate_config(_with_design(tmp_path, min_effect=0.2, min_effect_reward=0.05))
    assert info.value.problems == [
        "design: min_effect 0.2 (the older form: one bound for both outcomes) conflicts with min_effect_reward "
        "0.05: give either min_effect or min_effect_success and min_effect_reward"
    ]


def test_a_gate_registered_with_the_single_min_effect_still_resumes():
    from shopsimrl.gate.manifest import ManifestMismatchError, build_manifest, check_resume

    def manifest(design):
        return build_manifest(round_name="r", hashes={"a": "1"}, design=design, episode={}, backend="local")

    fresh = manifest(DesignConfig().model_dump(mode="json"))
    older = {k: v for k, v in fresh["design"].items() if not k.startswith("min_effect_")} | {"min_effect": 0.1}
    check_resume(manifest(older), fresh, "stored")  # the same bounds, written the older way: no difference
    with pytest.raises(ManifestMismatchError) as info:
        check_resume(manifest(older | {"min_effect": 0.2}), fresh, "stored")
    assert info.value.problems[:2] == ["design.min_effect_reward: stored 0.2, now 0.1",
                                       "design.min_effect_success: stored 0.2, now 0.1"]

"""The shipped round configs validate, each stage's config follows from `round:`, and the next group's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from round_helpers import ROOT

from shopsimrl.errors import ConfigError
from shopsimrl.gate.power import planned_pairs
from shopsimrl.round import load_round_config, next_group

SHIPPED = sorted((ROOT / "configs" / "local").glob("*round*.yaml"))


def test_the_round_configs_are_shipped():
    assert [p.name for p in SHIPPED] == ["demo_round.yaml", "learning_rounds.yaml", "round.yaml", "tiny_round.yaml"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_round_config_derives_three_stage_configs_from_one_group(path: Path):
    config = load_round_config(path)
    train = config.train_config()
    analysis = config.analysis_config("checkpoints/x/rollout-0001")
    gate = config.gate_config("checkpoints/x/rollout-0001")
    assert train.run.group == analysis.run.group == gate.round == config.group
    assert train.stage_dir == analysis.train_dir == Path(config.round.runs_root) / config.group / "train"
    assert gate.gate_dir == train.stage_dir.parent / "gate"
    assert train.driver.save_interval is not None  # the gate's fixed checkpoint is always saved
    assert analysis.trial.model == gate.inputs.checkpoint == "checkpoints/x/rollout-0001"
    assert analysis.shopsim_config == str(train.stage_dir.parent / "train_config.yaml")
    assert gate.inputs.skillbank == train.shopsim.skillbank
    assert gate.inputs.candidate_pool == str(train.stage_dir.parent / "analysis" / "candidate_pool.json")
    assert (gate.catalog.seed, gate.catalog.num_products) == (train.shopsim.catalog.seed, train.shopsim.catalog.num_products)
    assert gate.episode.tool_call_format == train.shopsim.tool_call_format
    assert planned_pairs(gate.design, candidates=1, tasks=gate.design.tasks) >= 20  # the fewest the estimator decides on


def test_the_demo_training_is_the_demo_rounds_train_section(tmp_path: Path):
    """One source: `training demo` (and the benches) run demo_round.yaml's `train:` section, which `make demo`'s
    round trains too; an edit there changes both, and no other file under configs/ holds a copy of it."""
    from shopsimrl.local.commands import DEFAULT_DEMO_CONFIG
    from shopsimrl.local.config import load_round_train_config, load_run_config

    path = ROOT / "configs" / "local" / "demo_round.yaml"
    assert ROOT / DEFAULT_DEMO_CONFIG == path
    demo = load_round_train_config(path)
    config = load_round_config(path)
    assert (demo.run.group, demo.run.mode.value) == (config.group, "demo")
    # The round owns its seeds (round/seeds.py) and always saves the final checkpoint; the rest is the demo's.
    expected = demo.model_dump(exclude={"run"})
    expected["driver"].update(save_interval=2, rollout_seed=config.seeds.rollout)
    expected["shopsim"]["round_seed"] = config.seeds.curriculum
    assert config.train_config().model_dump(exclude={"run"}) == expected

    edited = tmp_path / "demo_round.yaml"
    edited.write_text(path.read_text(encoding="utf-8").replace("lr: 2.0e-6", "lr: 3.0e-6"), encoding="utf-8")
    assert load_round_train_config(edited).driver.lr == load_round_config(edited).train_config().driver.lr == 3.0e-6

    copies = []
    for other in sorted((ROOT / "configs").rglob("*.yaml")):
        try:
            run = load_run_config(other)
        except ConfigError:
            continue  # not a run config
        if run.model_dump(exclude={"run", "shopsim"}) == demo.model_dump(exclude={"run", "shopsim"}):
            copies.append(other.relative_to(ROOT).as_posix())
    assert copies == []


def test_the_demo_training_refuses_a_file_that_is_not_a_round_config():
    from shopsimrl.local.config import load_round_train_config

    with pytest.raises(ConfigError) as excinfo:
        load_round_train_config(ROOT / "configs" / "local" / "smoke.yaml")
    assert excinfo.value.problems == ["round: expected a mapping (a round config), got NoneType",
                                      "train: expected a mapping (a round config), got NoneType"]  # fmt: skip


def test_overrides_apply_before_validation(tmp_path: Path):
    path = ROOT / "configs" / "local" / "demo_round.yaml"
    config = load_round_config(path, {"train.driver.num_rollout": 1, "gate.design.tasks": 25})
    assert config.train_config().driver.num_rollout == 1
    assert config.gate_config("c").design.tasks == 25
    with pytest.raises(ConfigError) as excinfo:
        load_round_config(path, {"round.group": "x"})
    assert excinfo.value.source == str(path) and excinfo.value.problems[0].startswith("round.group: String should")
    with pytest.raises(ConfigError) as excinfo:
        load_round_config(tmp_path / "none.yaml")
    assert excinfo.value.problems == ["file not found"]


@pytest.mark.parametrize(("group", "expected"), [
    ("qwen35-4b-round-000", "qwen35-4b-round-001"),
    ("local-demo-round-009", "local-demo-round-010"),
    ("a-round-999", "a-round-1000"),
])  # fmt: skip
def test_next_group(group: str, expected: str):
    assert next_group(group) == expected


def test_a_group_without_a_round_number_has_no_next():
    with pytest.raises(ValueError, match="does not end in -round-NNN"):
        next_group("qwen35-4b")


def test_the_next_round_trains_on_from_the_start_checkpoint():
    path = ROOT / "configs" / "local" / "demo_round.yaml"
    config = load_round_config(path, {"round.start_checkpoint": "checkpoints/r0/rollout-0001",
                                      "round.start_checkpoint_sha256": "a" * 64})
    assert config.train_config().model.checkpoint == "checkpoints/r0/rollout-0001"
    assert load_round_config(path).train_config().model.checkpoint is None


def test_each_round_derives_its_own_seeds_from_the_base_seed_and_its_index():
    path = ROOT / "configs" / "local" / "demo_round.yaml"
    first = load_round_config(path)
    second = load_round_config(path, {"round.group": "local-demo-round-001"})
    again = load_round_config(path, {"round.group": "local-demo-round-001"})
    other_base = load_round_config(path, {"round.group": "local-demo-round-001", "round.seed": 1})
    assert (first.index, second.index) == (0, 1)
    assert second.seeds == again.seeds  # a re-run reproduces its seeds
    for a, b in ((first.seeds, second.seeds), (second.seeds, other_base.seeds)):
        assert a.rollout != b.rollout and a.curriculum != b.curriculum and a.gate != b.gate
    assert len({second.seeds.rollout, second.seeds.curriculum, second.seeds.gate}) == 3
    # The stages get them: data order, curriculum draws, the gate's design.
    train = second.train_config()
    assert (train.driver.rollout_seed, train.shopsim.round_seed) == (second.seeds.rollout, second.seeds.curriculum)
    assert second.gate_config("c").design.seed == second.seeds.gate
    # sha256("shopsimrl/round-seed/rollout/0/1")[:4] & 0x7fffffff, the documented derivation
    import hashlib

    digest = hashlib.sha256(b"shopsimrl/round-seed/rollout/0/1").digest()
    assert second.seeds.rollout == int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def test_a_stage_section_cannot_set_a_seed_the_round_derives(tmp_path: Path):
    path = ROOT / "configs" / "local" / "demo_round.yaml"
    with pytest.raises(ConfigError) as excinfo:
        load_round_config(path, {"train.driver.rollout_seed": 42, "train.shopsim.round_seed": 1234,
                                 "gate.design.seed": 0})
    assert excinfo.value.problems == [
        "train.driver.rollout_seed: set by the round (round.seed and the round's index (shopsimrl/round/seeds.py)); remove it",
        "train.shopsim.round_seed: set by the round (round.seed and the round's index (shopsimrl/round/seeds.py)); remove it",
        "gate.design.seed: set by the round (round.seed and the round's index (shopsimrl/round/seeds.py)); remove it",
    ]


def test_a_config_parsed_from_a_mapping_keeps_the_source_it_was_given():
    from shopsimrl.round.config import RoundConfig

    config = load_round_config(ROOT / "configs" / "local" / "demo_round.yaml")
    planned = RoundConfig.parsed(config.model_dump(), "runs/x/round-000/next_round.yaml (planned)")
    assert planned.source == "runs/x/round-000/next_round.yaml (planned)"
    assert planned.model_dump() == config.model_dump()

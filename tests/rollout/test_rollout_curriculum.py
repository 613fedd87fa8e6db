"""Curriculum: arm and mask are a pure function of (round seed, group key); frequencies match q and rho."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from shopsimrl.config import ShopSimOptions
from shopsimrl.contract import Arm
from shopsimrl.errors import ConfigError
from shopsimrl.rollout.curriculum import Curriculum, advance_rollout_step, rollout_step, uniform
from shopsimrl.skills.skillbank import validate_skillbank


def _bank(*ids: str, inactive: tuple[str, ...] = ()):
    chunks = [
        {"logical_chunk_id": cid, "text": f"Skill {cid}.", "provenance": {"source": "seed"}, "active": cid not in inactive}
        for cid in ids
    ]
    return validate_skillbank({"schema_version": 1, "chunks": chunks})


def _options(tmp_path, **overrides) -> ShopSimOptions:
    return ShopSimOptions(run_dir=str(tmp_path), **overrides)


def test_uniform_is_the_documented_blake2b_formula():
    digest = hashlib.blake2b(b"7\x1ftask-3#g12\x1farm", digest_size=8, person=b"shopsim-curric").digest()
    assert uniform(7, "task-3#g12", "arm") == int.from_bytes(digest, "big") / 2**64
    assert 0.0 <= uniform(0, "", "") < 1.0


def test_assignment_is_pure_and_independent_of_call_order(tmp_path):
    options = _options(tmp_path, round_seed=11, default_rho=0.5)
    first = Curriculum(_bank("a", "b", "c"), options)
    second = Curriculum(_bank("a", "b", "c"), options)
    keys = [f"task-{i}#g{i}" for i in range(50)]
    forward = [first.assign(key, q=0.3) for key in keys]
    backward = [second.assign(key, q=0.3) for key in reversed(keys)][::-1]
    assert forward == backward
    assert forward == [first.assign(key, q=0.3) for key in keys]  # repeated calls: identical


def test_round_seed_changes_the_draw(tmp_path):
    bank = _bank("a", "b", "c")
    keys = [f"k{i}" for i in range(200)]
    one = [Curriculum(bank, _options(tmp_path, round_seed=1)).assign(k, q=0.5) for k in keys]
    two = [Curriculum(bank, _options(tmp_path, round_seed=2)).assign(k, q=0.5) for k in keys]
    assert sum(a.arm != b.arm or a.mask != b.mask for a, b in zip(one, two, strict=True)) > 100


def test_arm_and_inclusion_frequencies_match_q_and_rho(tmp_path):
    options = _options(tmp_path, round_seed=3, rho={"a": 0.2, "b": 0.7}, default_rho=0.5)
    curriculum = Curriculum(_bank("a", "b", "c"), options)
    n, q = 20000, 0.3
    draws = [curriculum.assign(f"task-{i % 97}#g{i}", q=q) for i in range(n)]
    skill_free = sum(d.arm is Arm.SKILL_FREE for d in draws)
    assert abs(skill_free / n - q) < 4 * math.sqrt(q * (1 - q) / n)
    assisted = [d for d in draws if d.arm is not Arm.SKILL_FREE]  # assisted + assisted_empty
    for chunk_id, rho in {"a": 0.2, "b": 0.7, "c": 0.5}.items():
        rate = sum(chunk_id in d.mask for d in assisted) / len(assisted)
        assert abs(rate - rho) < 4 * math.sqrt(rho * (1 - rho) / len(assisted)), chunk_id
    empty = sum(d.arm is Arm.ASSISTED_EMPTY for d in draws) / len(assisted)
    expected_empty = 0.8 * 0.3 * 0.5
    assert abs(empty - expected_empty) < 4 * math.sqrt(expected_empty * (1 - expected_empty) / len(assisted))
    assert all(d.mask == () for d in draws if d.arm is not Arm.ASSISTED)
    assert all(d.rho == {"a": 0.2, "b": 0.7, "c": 0.5} and d.q == q for d in draws)


def test_mask_is_in_skillbank_order_and_skips_inactive_chunks(tmp_path):
    curriculum = Curriculum(_bank("z", "m", "a", "off", inactive=("off",)), _options(tmp_path, default_rho=1.0))
    draw = curriculum.assign("g", q=0.0)
    assert draw.arm is Arm.ASSISTED
    assert draw.mask == ("z", "m", "a")
    assert curriculum.skill_texts(draw) == ["Skill z.", "Skill m.", "Skill a."]
    assert "off" not in draw.rho


def test_adding_a_chunk_does_not_change_other_chunks_draws(tmp_path):
    options = _options(tmp_path, round_seed=5)
    small = Curriculum(_bank("a", "b"), options)
    large = Curriculum(_bank("a", "new", "b"), options)
    for i in range(300):
        before, after = small.assign(f"g{i}", q=0.2), large.assign(f"g{i}", q=0.2)
        assert before.arm == Arm.SKILL_FREE or after.arm != Arm.SKILL_FREE
        assert tuple(c for c in after.mask if c != "new") == before.mask


def test_q_edges_and_full_skill(tmp_path):
    curriculum = Curriculum(_bank("a", "b", "c"), _options(tmp_path, default_rho=0.0))
    assert all(curriculum.assign(f"g{i}", q=1.0).arm is Arm.SKILL_FREE for i in range(100))
    assert all(curriculum.assign(f"g{i}", q=0.0).arm is Arm.ASSISTED_EMPTY for i in range(100))
    full = curriculum.full_skill("g1", q=0.4)
    assert (full.arm, full.mask, full.q) == (Arm.ASSISTED, ("a", "b", "c"), 0.4)
    with pytest.raises(ValueError, match=r"q=1.5 is outside \[0, 1\]"):
        curriculum.assign("g", q=1.5)


def test_q_schedule_and_rollout_step_clock(tmp_path):
    options = _options(tmp_path, q={"start": 0.6, "end": 0.2, "steps": 4})
    curriculum = Curriculum(_bank("a"), options)
    assert [curriculum.q_at(s) for s in range(6)] == pytest.approx([0.6, 0.5, 0.4, 0.3, 0.2, 0.2])

    class Args:
        start_rollout_id = 3

    args = Args()
    assert rollout_step(args) == 3
    assert advance_rollout_step(args) == 4
    assert rollout_step(args) == 4


def test_rho_for_an_unknown_chunk_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        Curriculum(_bank("a", "b", inactive=("b",)), _options(tmp_path, rho={"b": 0.1, "zz": 0.3}))
    assert info.value.problems == [
        "shopsim.rho['b']: no active chunk with this id in the skillbank",
        "shopsim.rho['zz']: no active chunk with this id in the skillbank",
    ]


def test_assignment_round_trips_through_json(tmp_path):
    draw = Curriculum(_bank("a", "b"), _options(tmp_path)).assign("task#g1", q=0.1)
    assert type(draw).model_validate(json.loads(draw.model_dump_json())) == draw

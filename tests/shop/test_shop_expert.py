"""The scripted expert solves every task at noise 0 on every split; noise is seeded."""

from __future__ import annotations

import pytest

from shopsimrl.shop import ExpertPolicy, ShopEnv, generate_catalog, load_split


def _episode(env, task, expert, seed=0):
    env.reset(task=task, seed=seed)
    while True:
        _, reward, terminated, truncated, _ = env.step(expert.next_action(env))
        if terminated or truncated:
            return env.outcome(), env.state.turn


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_expert_succeeds_on_every_task_at_noise_zero(catalog, split):
    env = ShopEnv(catalog)
    tasks = load_split(catalog, split, limit=60)
    for task in tasks:
        outcome, turns = _episode(env, task, ExpertPolicy(noise=0.0))
        assert (outcome.reward, outcome.strict_reward, outcome.success) == (1.0, 1.0, True), task.task_id
        assert turns == 4 + len(task.gold.options)  # search, view, one select per option, add, checkout
        assert outcome.breakdown["policy_failures"] == 0


def test_expert_on_a_100k_catalog_every_split():
    big = generate_catalog(seed=3, num_products=100_000)
    env = ShopEnv(big)
    for split in ("train", "validation", "test"):
        for task in load_split(big, split, limit=10):
            outcome, _ = _episode(env, task, ExpertPolicy())
            assert outcome.success, task.task_id


def test_noisy_expert_is_seeded_and_recovers_often(catalog):
    env = ShopEnv(catalog, max_turns=20)
    tasks = load_split(catalog, "train", limit=40)
    runs = [
        [_episode(env, t, ExpertPolicy(noise=0.3, seed=i))[0].reward for i, t in enumerate(tasks)]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    failures = sum(
        _episode(env, t, ExpertPolicy(noise=0.3, seed=i))[0].breakdown["policy_failures"]
        for i, t in enumerate(tasks)
    )
    assert failures > 0
    assert sum(r == 1.0 for r in runs[0]) >= 30


def test_noise_must_be_a_probability():
    with pytest.raises(ValueError, match=r"noise must be in \[0, 1\], got 1.5"):
        ExpertPolicy(noise=1.5)

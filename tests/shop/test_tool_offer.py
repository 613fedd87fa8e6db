"""The shop's tool offer (docs/environment.md "Tools and the dynamic tool schema"): `dynamic`, the
production profile, lists the tools usable now; `all`, the CPU demo's, lists every tool from the
first turn, so an episode is one segment while the state's preconditions still hold."""

from __future__ import annotations

import asyncio
import json

import pytest

from shopsimrl.config.options import CatalogOptions, ShopSimOptions, validate_options
from shopsimrl.config.round_shop import catalog_problems
from shopsimrl.errors import ConfigError
from shopsimrl.local.warm_start import ScriptedGenerator, expert_turns
from shopsimrl.models import tiny_tokenizer
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.shop import ExpertPolicy, ShopEnv, ToolCall, generate_catalog, load_split


def _expert_infos(catalog, task) -> list[dict]:
    env = ShopEnv(catalog, max_turns=8)
    env.reset(task=task, seed=0)
    policy = ExpertPolicy(noise=0.0, seed=0)
    infos = []
    while True:
        _, _, terminated, truncated, info = env.step(policy.next_action(env))
        infos.append(info)
        if terminated or truncated:
            assert env.outcome().success
            return infos


def test_all_lists_every_tool_from_the_first_turn_and_the_schema_never_changes():
    everything = generate_catalog(seed=0, num_products=200, level="budget", tools="all")
    dynamic = generate_catalog(seed=0, num_products=200, level="budget")
    env = ShopEnv(everything)
    task = load_split(everything, "train")[0]
    env.reset(task=task, seed=0)
    assert env.offered_tools() == env.all_tools()
    infos = _expert_infos(everything, task)
    assert [info["tool_schema_changed"] for info in infos] == [False] * len(infos)
    assert len({info["tool_schema_hash"] for info in infos}) == 1
    # the production offer changes the list as the expert goes (search -> product tools -> cart tools)
    assert any(info["tool_schema_changed"] for info in _expert_infos(dynamic, task))


def test_a_call_the_state_does_not_allow_is_still_refused_when_every_tool_is_listed():
    catalog = generate_catalog(seed=0, num_products=200, level="budget", tools="all")
    env = ShopEnv(catalog)
    env.reset(task=load_split(catalog, "train")[0], seed=0)
    observation, reward, terminated, _, info = env.step(ToolCall("checkout", {}))
    assert (reward, terminated, info["policy_failure"]) == (0.0, False, "tool_not_offered")
    assert "checkout is not offered now" in observation


def test_the_tool_offer_draws_nothing_tasks_and_products_are_the_same():
    def shop(tools: str) -> str:
        catalog = generate_catalog(seed=3, num_products=200, level="budget", tools=tools)
        tasks = [(t.task_id, t.instruction, repr(t.gold)) for s in ("train", "validation") for t in load_split(catalog, s)]
        return json.dumps([tasks, catalog.price_cents.tolist(), catalog.attrs.tolist()])

    assert shop("all") == shop("dynamic")


def test_an_episode_of_the_all_offer_is_one_segment_through_the_agent_loop(tmp_path):
    tokenizer = tiny_tokenizer()
    lengths = {}
    for tools in ("dynamic", "all"):
        options = ShopSimOptions(run_dir=str(tmp_path), tool_call_format="json", max_turns=6,
                                 catalog=CatalogOptions(num_products=200, level="budget", tools=tools))  # fmt: skip
        catalog = options.catalog.build()
        task = load_split(catalog, "train")[0]
        turns = expert_turns(task, catalog, options, noise=0.0, seed=0)
        trajectory = asyncio.run(run_trajectory(task=task, catalog=catalog, tokenizer=tokenizer,
                                                generator=ScriptedGenerator(tokenizer, turns), options=options,
                                                skill_texts=[], sampling_params={}))  # fmt: skip
        assert trajectory.outcome.success
        lengths[tools] = [len(segment.tokens) for segment in trajectory.segments]
    assert len(lengths["all"]) == 1 and len(lengths["dynamic"]) == len(turns)
    # each dynamic segment re-renders the conversation so far: far more tokens through the model
    assert sum(lengths["dynamic"]) > 2 * sum(lengths["all"])


def test_an_unknown_tool_offer_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError) as err:
        validate_options({"run_dir": "runs/x/train", "catalog": {"tools": "some"}}, "train.yaml")
    assert err.value.problems == ["shopsim.catalog.tools: Input should be 'dynamic' or 'all'"]
    with pytest.raises(ValueError, match=r"^unknown tool offer 'some'; expected one of: dynamic, all$"):
        generate_catalog(seed=0, num_products=200, tools="some")


def test_a_round_recorded_before_the_tool_offer_existed_is_the_production_offer(tmp_path):
    record = tmp_path / "round-000" / "train_config.yaml"
    record.parent.mkdir()
    record.write_text("shopsim:\n  catalog: {seed: 0, num_products: 1000, level: budget}\n", encoding="utf-8")
    mine = CatalogOptions(num_products=1000, level="budget")
    assert catalog_problems(mine, runs_root=tmp_path, group="round-000", key="catalog") == []
    assert catalog_problems(mine.model_copy(update={"tools": "all"}), runs_root=tmp_path, group="round-000",
                            key="catalog") == [  # fmt: skip
        f"catalog: not the catalog round round-000 trained on ({record}): tools 'all' vs 'dynamic'; its episodes "
        "would list other tools than the round's policy was trained with"]  # fmt: skip

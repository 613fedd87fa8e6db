"""Environment checker over every split (Gymnasium env_checker spirit), the dynamic tool schema,
the policy-failure observations and the technical-error path."""

from __future__ import annotations

import json

import pytest

from shopsimrl.errors import TechnicalError
from shopsimrl.shop import ExpertPolicy, ShopEnv, ToolCall, format_tool_call, generate_catalog, load_split

SPLITS = ("train", "validation", "test")


def _random_actions(seed: int, n: int) -> list:
    """A fixed, seeded mix of good, noisy and malformed actions (texts and ToolCalls)."""
    return [("expert", seed + k) if k % 3 else ("noise", seed + k) for k in range(n)]


def _run(env, task, plan, seed) -> list[tuple[str, str, float, bool, bool]]:
    env.reset(task=task, seed=seed)
    trace = []
    for kind, s in plan:
        action = ExpertPolicy(noise=1.0 if kind == "noise" else 0.0, seed=s).next_action(env)
        if s % 2:
            action = format_tool_call(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and json.loads(obs) is not None
        assert 0.0 <= reward <= 1.0
        assert set(info) >= {
            "turn",
            "tool",
            "policy_failure",
            "finish",
            "tool_schema_changed",
            "tool_schema_hash",
        }
        trace.append((env.state_hash(), obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return trace


@pytest.mark.parametrize("split", SPLITS)
def test_same_seed_same_actions_same_state_hash(catalog, split):
    tasks = load_split(catalog, split, limit=8)
    for i, task in enumerate(tasks):
        plan = _random_actions(100 * i, 14)
        first = _run(ShopEnv(catalog), task, plan, seed=i)
        second = _run(ShopEnv(generate_catalog(seed=0, num_products=2000)), task, plan, seed=i)
        assert first == second
        assert len({h for h, *_ in first}) == len(first)  # every step changes the state (turn counter)


def test_reset_is_complete_and_seed_is_part_of_the_hash(catalog):
    task = load_split(catalog, "train", limit=1)[0]
    env = ShopEnv(catalog)
    instruction, info = env.reset(task=task, seed=5)
    fresh = env.state_hash()
    assert instruction == task.instruction
    assert info == {"task_id": task.task_id, "split": "train", "seed": 5, "max_turns": 12,
                    "tool_schema_hash": env.tool_schema_hash()}  # fmt: skip
    for _ in range(3):
        env.step(ExpertPolicy().next_action(env))
    env.reset(task=task, seed=5)
    assert env.state_hash() == fresh
    env.reset(task=task, seed=6)
    assert env.state_hash() != fresh


def test_dynamic_tool_schema_follows_state(catalog):
    task = load_split(catalog, "train", limit=1)[0]
    env = ShopEnv(catalog)
    env.reset(task=task, seed=0)

    def names():
        return [t["function"]["name"] for t in env.offered_tools()]

    hashes = [env.tool_schema_hash()]
    assert names() == ["search"]
    expert = ExpertPolicy()
    seen = []
    while True:
        action = expert.next_action(env)
        _, _, terminated, _, info = env.step(action)
        seen.append((action.name, names(), info["tool_schema_changed"]))
        assert info["tool_schema_hash"] == env.tool_schema_hash()
        hashes.append(env.tool_schema_hash())
        if terminated:
            break
    after_view = ["search", "view_product", "select_option", "add_to_cart"]
    with_cart = after_view + ["remove_from_cart", "view_cart", "checkout"]
    assert seen[0] == ("search", ["search", "view_product"], True)
    assert seen[1] == ("view_product", after_view, True)
    assert all(s == ("select_option", after_view, False) for s in seen[2:-2])
    assert seen[-2] == ("add_to_cart", with_cart, True)
    assert seen[-1] == ("checkout", with_cart, False)
    assert len(set(hashes)) == 4  # the hash changes exactly when the offered set changes


def _obs(env, action):
    obs, reward, terminated, truncated, info = env.step(action)
    return json.loads(obs), reward, terminated, truncated, info


def test_policy_failures_are_observations_never_exceptions(catalog):
    task = load_split(catalog, "train", limit=1)[0]
    env = ShopEnv(catalog)
    env.reset(task=task, seed=0)
    obs, reward, term, trunc, info = _obs(env, "I think I will buy shoes.")
    assert obs == {"error": "malformed_tool_call",
                   "message": "no tool call found; reply with exactly one <tool_call>...</tool_call> block"}  # fmt: skip
    assert (reward, term, trunc, info["policy_failure"]) == (0.0, False, False, "malformed_tool_call")
    obs, *_, info = _obs(env, ToolCall("browse", {}))
    assert obs["message"] == ("unknown tool 'browse'; tools: search, view_product, select_option, add_to_cart, "
                              "remove_from_cart, view_cart, checkout")  # fmt: skip
    assert info["policy_failure"] == "unknown_tool"
    obs, *_, info = _obs(env, ToolCall("checkout", {}))
    assert obs == {
        "error": "tool_not_offered",
        "message": "tool checkout is not offered now; offered tools: search",
    }
    obs, *_, info = _obs(env, ToolCall("search", {"query": "boots"}))
    assert obs == {"error": "bad_arguments", "message": "unexpected argument(s) for search: query; allowed: "
                   "keywords, category, max_price, min_rating, page"}  # fmt: skip
    obs, *_, info = _obs(env, ToolCall("search", {"keywords": "boots", "page": 0}))
    assert obs == {"error": "bad_arguments", "message": "page must be at least 1, got 0"}
    obs, *_ = _obs(env, ToolCall("search", {"keywords": "boots"}))
    assert obs["total_results"] > 0
    obs, *_, info = _obs(env, ToolCall("view_product", {"product_id": "P999999"}))
    assert obs == {
        "error": "invalid_action",
        "message": "unknown product id 'P999999'; product ids look like P000123",
    }
    pid = task.gold.family_product_ids["base"]
    other = task.gold.family_product_ids["over_budget"]
    _obs(env, ToolCall("view_product", {"product_id": pid}))
    obs, *_ = _obs(env, ToolCall("select_option", {"product_id": other, "option": "colour", "value": "red"}))
    assert obs == {
        "error": "invalid_action",
        "message": f"product {other} has not been viewed; call view_product first",
    }
    obs, *_ = _obs(env, ToolCall("select_option", {"product_id": pid, "option": "flavour", "value": "x"}))
    assert obs["message"].startswith(f"product {pid} has no option 'flavour'; its options: ")
    assert env.state.policy_failures == 8


def test_turn_limit_truncates_with_reward_zero(catalog):
    task = load_split(catalog, "validation", limit=1)[0]
    env = ShopEnv(catalog, max_turns=3)
    env.reset(task=task, seed=0)
    results = [env.step(ToolCall("search", {"keywords": "lamp"})) for _ in range(3)]
    _, reward, terminated, truncated, info = results[-1]
    assert (reward, terminated, truncated, info["finish"], info["truncation"]) == (
        0.0,
        False,
        True,
        "turn_limit",
        "turn_limit",
    )
    assert env.outcome().reward == 0.0 and env.outcome().breakdown["finish"] == "turn_limit"
    assert "no purchase before the turn limit" in env.gold_audit()["failed_constraints"]
    with pytest.raises(
        TechnicalError, match="environment: step\\(\\) called after the episode ended; call reset\\(\\)"
    ):
        env.step(ToolCall("view_cart", {}))


def test_internal_exception_becomes_technical_error_environment():
    """A corrupted catalog (a category id out of range) makes a tool crash: that is our bug, so the
    step raises TechnicalError(kind=environment) instead of returning an observation or reward 0."""
    broken = generate_catalog(seed=0, num_products=400)
    task = load_split(broken, "train", limit=1)[0]
    index = int(task.gold.family_product_ids["base"][1:])
    broken._a_category[index] = 99
    env = ShopEnv(broken)
    env.reset(task=task, seed=0)
    env.step(ToolCall("search", {"keywords": "x"}))
    with pytest.raises(TechnicalError) as err:
        env.step(ToolCall("view_product", {"product_id": task.gold.family_product_ids["base"]}))
    assert err.value.kind.value == "environment"
    assert err.value.message.startswith(
        f"IndexError: tuple index out of range (task {task.task_id}, turn 2, action view_product("
    )


def test_step_before_reset_and_bad_max_turns(catalog):
    with pytest.raises(RuntimeError, match="no episode: call reset"):
        ShopEnv(catalog).step(ToolCall("view_cart", {}))
    with pytest.raises(ValueError, match="max_turns must be at least 1, got 0"):
        ShopEnv(catalog, max_turns=0)


@pytest.mark.parametrize(
    ("arguments", "failure"),
    [
        ('{"keywords": "mug", "max_price": 1e999}', "malformed_tool_call"),
        ('{"keywords": "mug", "max_price": NaN}', "malformed_tool_call"),
        ('{"keywords": "mug", "max_price": -Infinity}', "malformed_tool_call"),
        ('{"keywords": "mug", "max_price": ' + "9" * 400 + "}", "bad_arguments"),
        ('{"keywords": "mug", "page": ' + "9" * 400 + "}", "bad_arguments"),
        ('{"keywords": ' + "[" * 100_000 + "]" * 100_000 + "}", "malformed_tool_call"),
    ],
)
def test_numbers_the_shop_cannot_hold_are_policy_failures_not_technical_errors(catalog, arguments, failure):
    env = ShopEnv(catalog)
    env.reset(task=load_split(catalog, "train", limit=1)[0], seed=0)
    text = '<tool_call>\n{"name": "search", "arguments": ' + arguments + "}\n</tool_call>"
    obs, reward, terminated, truncated, info = _obs(env, text)
    assert (obs["error"], info["policy_failure"], reward, terminated) == (failure, failure, 0.0, False)
    assert len(obs["message"]) < 200
    # The ToolCall path (a caller that built the call itself) takes the same checks.
    obs, *_, info = _obs(env, ToolCall("search", {"keywords": "mug", "max_price": float("nan")}))
    assert obs == {
        "error": "bad_arguments",
        "message": "argument max_price of search must be a finite number, got nan",
    }

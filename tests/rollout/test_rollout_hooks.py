"""slime hook contract (slime.md section 3) and the hooks end to end, loaded by dotted path."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from expert_generator import ExpertTextGenerator
from sglang_fake_server import fake_sglang, ok_reply

from shopsimrl.config import options_from_args
from shopsimrl.contract import DynamicFilterOutput, Sample, get_meta
from shopsimrl.models import tiny_tokenizer
from shopsimrl.rollout.curriculum import Curriculum
from shopsimrl.rollout.datasource import TaskGroupSource, group_key
from shopsimrl.shop import generate_catalog, load_split
from shopsimrl.skills.skillbank import load_skillbank

REPO = Path(__file__).resolve().parents[2]
SKILLBANK = REPO / "configs" / "skillbank.example.json"
CATALOG = {"seed": 0, "num_products": 500}


def load_function(path: str):
    """slime's `slime/utils/misc.py::load_function` rule: module path, last dot, attribute."""
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


HOOKS = {
    "shopsimrl.slime_hooks.generate": (True, ["args", "sample", "sampling_params", "evaluation"]),
    "shopsimrl.slime_hooks.reward": (True, ["args", "samples", "kwargs"]),
    "shopsimrl.slime_hooks.reward_post_process": (False, ["args", "samples"]),
    "shopsimrl.slime_hooks.dynamic_sampling_filter": (False, ["args", "samples", "kwargs"]),
}


@pytest.mark.parametrize("path", sorted(HOOKS))
def test_hook_signature_and_async_ness(path):
    fn = load_function(path)
    is_async, names = HOOKS[path]
    assert inspect.iscoroutinefunction(fn) is is_async
    assert list(inspect.signature(fn).parameters) == names


def test_generate_passes_evaluation_only_because_it_is_in_the_signature():
    parameter = inspect.signature(load_function("shopsimrl.slime_hooks.generate")).parameters["evaluation"]
    assert parameter.default is False
    reward_kwargs = inspect.signature(load_function("shopsimrl.slime_hooks.reward")).parameters["kwargs"]
    assert reward_kwargs.kind is inspect.Parameter.VAR_KEYWORD


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(**CATALOG)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _args(tmp_path, **extra):
    shopsim = {"run_dir": str(tmp_path / "run"), "skillbank": str(SKILLBANK), "round_seed": 3,
               "q": {"start": 0.0}, "default_rho": 0.5, "catalog": CATALOG, "max_turns": 2}
    return SimpleNamespace(shopsim=shopsim, **extra)


def _group(catalog, n=1):
    source = TaskGroupSource(load_split(catalog, "train")[:1], n_samples_per_prompt=n)
    source.get_samples(2)  # move the counters on so group_index/index are not 0
    return source.get_samples(1)[0]


def test_generate_and_reward_against_sglang_over_http(tmp_path, catalog, tokenizer):
    text_ids = tokenizer.encode("hello", add_special_tokens=False) + [258]
    with fake_sglang([ok_reply(text_ids, [-0.5] * len(text_ids))]) as server:
        host, port = server.url.removeprefix("http://").split(":")
        args = _args(tmp_path, sglang_router_ip=host, sglang_router_port=int(port), shopsim_tokenizer=tokenizer)
        generate = load_function("shopsimrl.slime_hooks.generate")
        sample = _group(catalog)[0]
        segments = asyncio.run(generate(args, sample, {"temperature": 1.0, "max_new_tokens": 64}))
    assert len(server.requests) == 2  # two turns (max_turns=2), both malformed tool calls
    assert server.requests[0]["sampling_params"] == {"temperature": 1.0, "max_new_tokens": 64, "stop_token_ids": [258]}
    assert len(segments) == 1
    meta = get_meta(segments[0])
    expected = Curriculum(load_skillbank(SKILLBANK), options_from_args(args)).assign(
        group_key(sample.metadata["task_id"], 2), q=0.0)
    assert (sample.group_index, sample.index) == (2, 2)
    assert (meta.group_key, meta.arm.value, meta.mask, meta.q) == (
        expected.group_key, expected.arm.value, list(expected.mask), 0.0)
    assert meta.outcome.scorable and meta.outcome.success is False
    assert segments[0].rollout_id == sample.index == 2
    assert segments[0].status is Sample.Status.COMPLETED
    assert sample.rollout_id is None and sample.tokens == []  # slime's sample is not modified

    reward = load_function("shopsimrl.slime_hooks.reward")
    assert asyncio.run(reward(args, segments)) == [meta.outcome.reward]
    assert asyncio.run(reward(args, segments[0])) == meta.outcome.reward
    keep = load_function("shopsimrl.slime_hooks.dynamic_sampling_filter")(args, [segments])
    assert isinstance(keep, DynamicFilterOutput)


def test_model_service_failure_gives_nan_reward_and_the_filter_drops_the_group(tmp_path, catalog, tokenizer):
    with fake_sglang([lambda request: (503, {"error": "overloaded"})]) as server:
        host, port = server.url.removeprefix("http://").split(":")
        args = _args(tmp_path, sglang_router_ip=host, sglang_router_port=int(port), shopsim_tokenizer=tokenizer)
        group = _group(catalog, n=2)
        generate = load_function("shopsimrl.slime_hooks.generate")
        siblings = [asyncio.run(generate(args, sample, {"temperature": 1.0})) for sample in group]
    for segments in siblings:
        meta = get_meta(segments[0])
        assert meta.outcome.technical_error.model_dump() == {
            "kind": "model_service", "message": f'HTTP 503 from {server.url}/generate: {{"error": "overloaded"}}'}
        assert segments[0].status is Sample.Status.FAILED and segments[0].remove_sample
        rewards = asyncio.run(load_function("shopsimrl.slime_hooks.reward")(args, segments))
        assert len(rewards) == 1 and math.isnan(rewards[0])
    decision = load_function("shopsimrl.slime_hooks.dynamic_sampling_filter")(args, siblings)
    assert decision.keep is False and decision.keep_when_insufficient is False


def test_generate_with_an_injected_local_generator_scores_the_expert(tmp_path, catalog, tokenizer):
    sample = _group(catalog)[0]
    task = load_split(catalog, "train")[0]
    args = _args(tmp_path, shopsim_tokenizer=tokenizer, shopsim_catalog=catalog,
                 shopsim_generator=ExpertTextGenerator(catalog, task, tokenizer))
    args.shopsim["max_turns"] = 12
    segments = asyncio.run(load_function("shopsimrl.slime_hooks.generate")(args, sample, {}))
    assert len(segments) == 4
    assert asyncio.run(load_function("shopsimrl.slime_hooks.reward")(args, segments)) == [1.0] * 4
    assert {(s.rollout_id, s.group_index) for s in segments} == {(sample.index, sample.group_index)}


def test_evaluation_runs_skill_free(tmp_path, catalog, tokenizer):
    task = load_split(catalog, "train")[0]
    sample = Sample(index=0, metadata={"task_id": task.task_id, "split": "train"})  # eval: no group_index
    args = _args(tmp_path, shopsim_tokenizer=tokenizer, shopsim_catalog=catalog,
                 shopsim_generator=ExpertTextGenerator(catalog, task, tokenizer))
    args.shopsim["q"] = {"start": 0.0}
    segments = asyncio.run(load_function("shopsimrl.slime_hooks.generate")(args, sample, {}, evaluation=True))
    meta = get_meta(segments[0])
    assert (meta.arm.value, meta.mask, meta.group_key) == ("skill_free", [], f"{task.task_id}#eval0")
    assert "# Shopping skills" not in segments[0].metadata["shopsim"]["messages"][0]["content"]


def test_missing_sglang_address_is_a_clear_config_error(tmp_path, tokenizer, catalog):
    from shopsimrl.errors import ConfigError

    args = _args(tmp_path, shopsim_tokenizer=tokenizer, shopsim_catalog=catalog)
    with pytest.raises(ConfigError) as info:
        asyncio.run(load_function("shopsimrl.slime_hooks.generate")(args, _group(catalog)[0], {}))
    assert info.value.problems == [
        "sglang_router_ip/sglang_router_port are not set and no args.shopsim_generator was injected"]


def test_sample_without_task_id_is_rejected(tmp_path, tokenizer, catalog):
    args = _args(tmp_path, shopsim_tokenizer=tokenizer, shopsim_catalog=catalog,
                 shopsim_generator=object())
    with pytest.raises(ValueError, match=r"sample index=9 names no task: expected metadata\['task_id'\]"):
        asyncio.run(load_function("shopsimrl.slime_hooks.generate")(args, Sample(index=9, group_index=1), {}))


def test_prompt_data_is_what_the_hooks_read(tmp_path, catalog):
    from shopsimrl.rollout.datasource import export_prompt_data

    path = tmp_path / "prompts.jsonl"
    tasks = load_split(catalog, "train")[:3]
    assert export_prompt_data(tasks, path) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"prompt": [{"role": "user", "content": tasks[0].instruction}], "label": tasks[0].task_id,
                        "metadata": {"schema_version": 2, "task_id": tasks[0].task_id, "split": "train"}}
    text = path.read_text()
    assert not [pid for task in tasks for pid in task.gold.gold_product_ids if pid in text]

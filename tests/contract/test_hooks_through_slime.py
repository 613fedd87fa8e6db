"""Our hooks run through slime v0.3.1's own call sites, not through an imitation of them.

- the filter hub: `call_dynamic_filter` + `should_drop_dynamic_filter_output` + `MetricGatherer`;
- the RM hub: `async_rm` (one sample) and `batched_async_rm` (the list a fan-out generate returns);
- the over-sampling loop itself, `slime.rollout.sglang_rollout.generate_rollout_async`, with
  SGLang and Ray stubbed the way slime's own tests/plugin_contracts stub them (a state without
  servers, `abort` with no engines), driving our generate output, RM, filter and all-samples hook;
- `args` carries our options the way `--custom-config-path` puts them there: every top-level YAML
  key set on `args` (slime/utils/arguments.py).

Before the fix, our filter returned a look-alike `DynamicFilterOutput`; slime wrapped it as
`keep=<object>` (always truthy) and never dropped a group: the loop test then trains the technical
group (NaN reward) and logs no `rollout/dynamic_filter/drop_*` counter.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import types
from argparse import Namespace
from contextlib import contextmanager

import pytest
import yaml
from scenario_groups import ACCEPTED, DROP_METRICS, RHO, scenario_groups
from slime_source import requires_slime

from shopsimrl import slime_metrics
from shopsimrl.contract import get_meta
from shopsimrl.metrics.groups import flatten_group
from shopsimrl.slime_hooks import reward_post_process

pytestmark = requires_slime

HOOKS = {
    "custom_rm_path": "shopsimrl.slime_hooks.reward",
    "dynamic_sampling_filter_path": "shopsimrl.slime_hooks.dynamic_sampling_filter",
    "rollout_all_samples_process_path": "shopsimrl.slime_metrics.record_generated_rollout_groups",
}
P = "rollout/shopsim/"


@pytest.fixture(autouse=True)
def _fresh_process_state():
    slime_metrics.reset_process_state()
    yield
    slime_metrics.reset_process_state()


def _args(tmp_path, **slime_args) -> Namespace:
    """slime's args, then our YAML applied as `--custom-config-path` applies it."""
    config = tmp_path / "shopsim.yaml"
    config.write_text(
        yaml.safe_dump(
            {"shopsim": {"run_dir": str(tmp_path / "train"), "q": {"start": 0.5}, "rho": RHO,
                         "reward_key": "reward", "full_skill_retry": False}}
        )
    )
    args = Namespace(custom_rm_path=None, rm_type=None, reward_key=None, group_rm=False, use_wandb=False,
                     start_rollout_id=None, **slime_args)
    with open(config) as f:  # slime_validate_args: `for k, v in data.items(): setattr(args, k, v)`
        for key, value in (yaml.safe_load(f) or {}).items():
            setattr(args, key, value)
    return args


def test_filter_through_slimes_call_site_drops_technical_and_surplus_zero_std_groups(tmp_path):
    from slime.rollout.filter_hub.base_types import (
        MetricGatherer,
        call_dynamic_filter,
        should_drop_dynamic_filter_output,
    )
    from slime.utils.misc import load_function

    args = _args(tmp_path)
    fn = load_function(HOOKS["dynamic_sampling_filter_path"])
    groups = {flatten_group(g)[0].group_index: g for g in scenario_groups(fan_out=True)}
    gatherer = MetricGatherer()

    def drops(group_index: int, remaining: int, target: int) -> bool:
        output = call_dynamic_filter(fn, args, groups[group_index])
        dropped = should_drop_dynamic_filter_output(output, remaining_batch_size=remaining, target_data_size=target)
        if dropped:
            gatherer.on_dynamic_filter_drop(reason=output.reason)
        return dropped

    assert drops(1, remaining=9, target=3) is False  # mixed rewards: kept
    assert drops(2, remaining=4, target=3) is True  # zero-std with slack: dropped
    assert drops(3, remaining=3, target=3) is False  # zero-std, no slack left: kept when insufficient
    assert drops(4, remaining=1, target=3) is True  # technical failure: dropped even without slack
    assert gatherer.collect() == DROP_METRICS


def test_rm_hub_calls_our_reward_for_one_sample_and_for_a_fan_out_list(tmp_path):
    from slime.rollout.rm_hub import async_rm, batched_async_rm

    args = _args(tmp_path, **{})
    args.custom_rm_path = HOOKS["custom_rm_path"]
    technical_group = scenario_groups()[3]  # g4: first trajectory is a technical failure
    for sample in technical_group:
        sample.reward = None
    rewards = asyncio.run(batched_async_rm(args, technical_group))
    assert math.isnan(rewards[0])  # unscorable is never 0
    assert rewards[1:] == [0.0, 0.4, 0.0]
    assert asyncio.run(async_rm(args, technical_group[2])) == 0.4


class _NoServerGenerateState:
    """slime's GenerateState without tokenizer or SGLang servers (as slime's contract tests patch it)."""

    def __init__(self, args) -> None:
        self.args = args
        self.aborted = False
        self.remaining_batch_size = 0
        self.pendings: set = set()
        self.sampling_params: dict = {}
        self.group_sampling_seeds = [0] * args.n_samples_per_prompt

        class _Semaphore:
            async def __aenter__(self):
                return None

            async def __aexit__(self, *exc):
                return False

        self.semaphore = _Semaphore()

    @contextmanager
    def dp_rank_context(self):
        yield 0

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings = set()
        self.aborted = False


@pytest.fixture
def sglang_rollout(monkeypatch):
    """slime's rollout module with Ray and sglang_router stubbed, as slime's plugin contracts do."""
    ray = types.ModuleType("ray")
    ray._private = types.SimpleNamespace(services=types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1"))
    monkeypatch.setitem(sys.modules, "ray", sys.modules.get("ray", ray))
    monkeypatch.setitem(sys.modules, "sglang_router", sys.modules.get("sglang_router", types.ModuleType("sglang_router")))
    from slime.rollout import sglang_rollout as module

    state_cls = type("_State", (_NoServerGenerateState,), {"submit_generate_tasks": module.GenerateState.submit_generate_tasks})
    monkeypatch.setattr(module, "GenerateState", state_cls)

    async def _no_engines_to_abort(args, rollout_id):
        return []

    monkeypatch.setattr(module, "abort", _no_engines_to_abort)
    return module


# What our generate returned for each group of the scenario, keyed by group_index; the generate
# below hands slime one trajectory's segments per sample, as shopsimrl.slime_hooks.generate does.
_EPISODES: dict[int, list[list]] = {}


async def scenario_generate(args, sample, sampling_params, evaluation=False):
    await asyncio.sleep(0.01 * sample.group_index)  # groups finish in group order, one per wait
    segments = _EPISODES[sample.group_index][sample.index % 4]
    for segment in segments:
        segment.reward = None  # slime then calls the custom RM on the list
    return segments


def test_slimes_over_sampling_loop_with_our_hooks_trains_only_what_it_should(tmp_path, sglang_rollout):
    _EPISODES.clear()
    extra_groups = [g for g in scenario_groups(fan_out=True)]
    for group in extra_groups:
        _EPISODES[flatten_group(group)[0].group_index] = group
    # a second wave would ask for groups 7..10; give them mixed outcomes (they are never reached)
    for gi in range(7, 11):
        _EPISODES[gi] = _EPISODES[1]

    args = _args(
        tmp_path,
        rollout_global_dataset=True,
        rollout_batch_size=3,
        over_sampling_batch_size=4,
        n_samples_per_prompt=4,
        partial_rollout=False,
        mask_offpolicy_in_partial_rollout=False,
        custom_generate_function_path=f"{__name__}.scenario_generate",
        rollout_sample_hook_path=[],
        rollout_sample_filter_path=None,
        sglang_enable_deterministic_inference=False,
        **{key: value for key, value in HOOKS.items() if key != "custom_rm_path"},
    )
    args.custom_rm_path = HOOKS["custom_rm_path"]
    next_group = iter(range(1, 100))

    def data_source(n):
        from slime.utils.types import Sample

        groups = []
        for _ in range(n):
            gi = next(next_group)
            groups.append([Sample(group_index=gi, index=gi * 4 + k) for k in range(4)])
        return groups

    output, aborted = asyncio.run(sglang_rollout.generate_rollout_async(args, 0, data_source))

    kept = [flatten_group(group)[0].group_index for group in output.samples]
    assert kept == list(ACCEPTED)  # g2 (zero-std, slack) and g4 (technical) dropped; g3 kept when insufficient
    assert output.metrics == DROP_METRICS  # slime's own counters, from our reasons
    trained = [s for group in output.samples for s in flatten_group(group)]
    assert all(not math.isnan(s.reward) for s in trained)
    assert all(get_meta(s).outcome.scorable for s in trained)

    # RolloutManager then normalises rewards through our post-process hook: finite advantages only
    raw, advantages = reward_post_process(args, trained)
    assert len(raw) == len(advantages) == len(trained)
    assert all(math.isfinite(a) for a in advantages)

    # slime logs its counters and the rollout through our log hook: the drop rates read slime's numbers
    extra = dict(output.metrics)
    assert slime_metrics.enrich_rollout_metrics(0, args, trained, extra, 1.0) is False
    assert extra[P + "zero_std_group_drop_rate"] == pytest.approx(1 / 3)
    assert extra[P + "technical_group_drop_count"] == 1
    assert extra[P + "completed_group_count"] == 5  # all-samples hook saw g1..g5, g6 was still running
    # ... and appends slime's whole dict after the merge, with rollout/step, to the run's metrics.jsonl:
    # under slime nothing else writes a local record of it (slime logs to W&B and stdout only).
    rows = [json.loads(line) for line in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{**extra, "rollout/step": 0}]

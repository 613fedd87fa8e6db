"""Hook-signature contracts, in the style of slime's tests/plugin_contracts/.

Each hook is loaded by the dotted path slime would be given, exactly as slime's
`slime/utils/misc.py::load_function` does (rpartition, importlib, getattr), and must be a plain
function with slime v0.3.1's parameter names and sync/async nature (reference/slime.md section 3).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest
from slime_source import requires_slime


def load_function(path: str):
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# dotted path -> (parameter names, must be a coroutine function, **kwargs accepted)
CONTRACTS = {
    "shopsimrl.slime_metrics.record_generated_rollout_groups": (("args", "all_groups", "data_source"), False, False),
    "shopsimrl.slime_metrics.enrich_rollout_metrics": (
        ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"), False, False),
    # --rollout-data-postprocess-path (ppo): slime's call `(self.args, rollout_id, rollout_data)`, actor.py:500
    "shopsimrl.slime_metrics.add_ppo_spread_metrics": (("args", "rollout_id", "rollout_data"), False, False),
    "shopsimrl.rollout.filters.dynamic_sampling_filter": (("args", "samples"), False, True),
    "shopsimrl.rollout.advantages.reward_post_process": (("args", "samples"), False, False),
}


@pytest.mark.parametrize("path", sorted(CONTRACTS))
def test_hook_signature(path):
    names, is_async, var_kw = CONTRACTS[path]
    fn = load_function(path)
    assert inspect.isfunction(fn), f"{path} must be a plain function"
    assert inspect.iscoroutinefunction(fn) is is_async
    params = inspect.signature(fn).parameters.values()
    positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    assert positional == names
    assert all(p.default is p.empty for p in params if p.name in names), "slime passes every argument"
    assert any(p.kind is p.VAR_KEYWORD for p in params) is var_kw
    assert not any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params)


_IMPORT_PROBE = (
    "import importlib, json, sys\n"
    "for p in {paths!r}: importlib.import_module(p.rpartition('.')[0])\n"
    "import shopsimrl.contract as c\n"
    "heavy = sorted(m for m in ('slime', 'sglang', 'ray', 'wandb', 'torch', 'transformers') if m in sys.modules)\n"
    "print(json.dumps([heavy, c.Sample.__module__, c.DynamicFilterOutput.__module__]))\n"
)


def _import_probe(env: dict[str, str]) -> list:
    code = _IMPORT_PROBE.format(paths=sorted(CONTRACTS) + ["shopsimrl.slime_hooks.generate"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def test_without_slime_the_hooks_import_nothing_heavy_and_use_the_replicas():
    # a user's CPU laptop: no slime on the path
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    heavy, sample_module, filter_module = _import_probe(env)
    assert heavy == []
    assert sample_module == filter_module == "shopsimrl.contract._replica"


@requires_slime
def test_with_slime_the_hooks_hand_slime_its_own_classes():
    # inside slime's RolloutManager: slime's types (whose module imports torch), still no sglang/ray/wandb
    heavy, sample_module, filter_module = _import_probe(dict(os.environ))
    assert heavy == ["slime", "torch"]
    assert sample_module == "slime.utils.types"
    assert filter_module == "slime.rollout.filter_hub.base_types"

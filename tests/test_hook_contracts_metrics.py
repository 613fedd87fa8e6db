"""Hook-signature contracts, in the style of slime's tests/plugin_contracts/.

Each hook is loaded by the dotted path slime would be given, exactly as slime's
`slime/utils/misc.py::load_function` does (rpartition, importlib, getattr), and must be a plain
function with slime v0.3.1's parameter names and sync/async nature (reference/slime.md section 3).
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest


def load_function(path: str):
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# dotted path -> (parameter names, must be a coroutine function, **kwargs accepted)
CONTRACTS = {
    "shopsimrl.slime_metrics.record_generated_rollout_groups": (("args", "all_groups", "data_source"), False, False),
    "shopsimrl.slime_metrics.enrich_rollout_metrics": (
        ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"), False, False),
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


def test_hooks_import_without_slime_sglang_ray_wandb_or_torch():
    code = (
        "import json, sys\n"
        f"paths = {sorted(CONTRACTS)!r}\n"
        "import importlib\n"
        "for p in paths: importlib.import_module(p.rpartition('.')[0])\n"
        "print(json.dumps(sorted(m for m in ('slime', 'sglang', 'ray', 'wandb', 'torch') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_metrics_and_rollout_modules_import_in_any_order():
    # shopsimrl.metrics and shopsimrl.rollout import each other's modules; either may come first.
    for first in ("shopsimrl.metrics", "shopsimrl.rollout.filters", "shopsimrl.slime_metrics", "shopsimrl.records"):
        subprocess.run([sys.executable, "-c", f"import {first}; import shopsimrl.slime_metrics"], check=True)

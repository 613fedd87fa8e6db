"""pytest plugin for running slime's own tests/plugin_contracts against our dotted paths.

Loaded with `-p slime_contract_prep` in a subprocess whose cwd is slime's source root (slime's
call-site checks read `slime/ray/rollout.py` relative to it). It supplies what slime's real pipeline
guarantees before our hooks run, and nothing else:

- `args` gets our options the way `--custom-config-path` puts them there (`setattr` of every
  top-level YAML key; slime/utils/arguments.py), from the file named by SHOPSIM_CONTRACT_CONFIG;
- every contract sample gets `metadata["shopsim"]`, a scorable outcome equal to its reward, as our
  generate hook writes on every sample it returns.

Cases that assert a side effect of slime's *reference* implementation rather than the contract
(`args.logged_rollout_id`, `args.processed_group_count`), that build bare `args` objects no
`--custom-config-path` could reach, or that would run a real ShopSim episode against SGLang, are
deselected by the caller with the reason (tests/contract/test_slime_plugin_contracts.py).
"""

from __future__ import annotations

import os

import yaml

from shopsimrl.contract import Arm, Outcome, ShopSimMeta, set_meta


def _options() -> dict:
    with open(os.environ["SHOPSIM_CONTRACT_CONFIG"]) as f:
        return yaml.safe_load(f) or {}


def _prepared_make_args(make_args):
    def make_args_with_custom_config(**overrides):
        args = make_args(**overrides)
        for key, value in _options().items():
            setattr(args, key, value)
        return args

    return make_args_with_custom_config


def _prepared_make_sample(make_sample):
    def make_sample_as_our_generate_returns_it(index, reward=1.0):
        sample = make_sample(index, reward)
        sample.group_index = 0
        sample.rollout_id = index
        meta = ShopSimMeta(
            task_id=f"contract-{index}", group_key="contract#g0", arm=Arm.SKILL_FREE, q=0.5,
            outcome=Outcome(reward=float(reward), strict_reward=float(reward == 1.0),
                            success=reward == 1.0, scorable=True),
        )
        set_meta(sample, meta)
        return sample

    return make_sample_as_our_generate_returns_it


def pytest_collection_modifyitems(session, config, items):
    for module in {item.module for item in items}:
        if hasattr(module, "make_args"):
            module.make_args = _prepared_make_args(module.make_args)
        if hasattr(module, "make_sample"):
            module.make_sample = _prepared_make_sample(module.make_sample)

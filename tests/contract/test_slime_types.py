"""The replicas in shopsimrl.contract._replica against slime v0.3.1's own classes and rules.

The replicas serve only where slime is absent; these tests keep them true to slime field for field,
and check that wherever slime is importable the package hands out slime's own classes.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools

import pytest
from slime_source import requires_slime

from shopsimrl.contract import _replica

pytestmark = requires_slime


def _fields(cls) -> dict[str, tuple[object, object]]:
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, enum.Enum):  # two Status classes: compare the member, not the class
            default = (type(default).__qualname__, default.name, default.value)
        out[f.name] = (str(f.type), default)
    return out


def test_the_package_uses_slimes_own_classes_when_slime_is_importable():
    from slime.rollout.filter_hub import base_types
    from slime.utils import types

    import shopsimrl.contract as contract

    assert contract.SLIME_AVAILABLE is True
    assert contract.Sample is types.Sample
    assert contract.DynamicFilterOutput is base_types.DynamicFilterOutput
    assert contract.call_dynamic_filter is base_types.call_dynamic_filter
    assert contract.should_drop_dynamic_filter_output is base_types.should_drop_dynamic_filter_output


def test_replica_sample_fields_are_slimes_fields_in_slimes_order():
    from slime.utils.types import Sample

    ours, theirs = _fields(_replica.Sample), _fields(Sample)
    # every replica field exists in slime with the same annotation and default, in the same order
    assert {name: theirs[name] for name in ours} == ours
    assert [n for n in theirs if n in ours] == list(ours)
    # what the replica leaves out is what our code never touches
    assert set(theirs) - set(ours) == {
        "multimodal_inputs", "multimodal_train_inputs", "multimodal_train_input_id",
        "rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts",
        "teacher_log_probs", "spec_info", "prefix_cache_info",
    }
    assert [(s.name, s.value) for s in _replica.Sample.Status] == [(s.name, s.value) for s in Sample.Status]


def test_replica_sample_methods_agree_with_slimes():
    from slime.utils.types import Sample

    args_plain = type("Args", (), {"reward_key": None})()
    args_keyed = type("Args", (), {"reward_key": "score"})()
    for cls in (Sample, _replica.Sample):
        assert cls(reward=0.5).get_reward_value(args_plain) == 0.5
        assert cls(reward={"score": 0.25}).get_reward_value(args_keyed) == 0.25
        assert cls(response_length=5, loss_mask=[1, 0, 1]).effective_response_length == 2
        assert cls(response_length=5).effective_response_length == 5


def test_replica_filter_output_fields_equal_slimes():
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput

    for ours, theirs in zip(
        dataclasses.fields(_replica.DynamicFilterOutput), dataclasses.fields(DynamicFilterOutput), strict=True
    ):
        assert (ours.name, str(ours.type), ours.default) == (theirs.name, str(theirs.type), theirs.default)


def test_replica_drop_rule_equals_slimes_on_every_case():
    from slime.rollout.filter_hub import base_types

    for keep, fallback, remaining, target in itertools.product((True, False), (True, False), range(4), range(1, 4)):
        ours = _replica.DynamicFilterOutput(keep=keep, keep_when_insufficient=fallback)
        theirs = base_types.DynamicFilterOutput(keep=keep, keep_when_insufficient=fallback)
        assert _replica.should_drop_dynamic_filter_output(
            ours, remaining_batch_size=remaining, target_data_size=target
        ) is base_types.should_drop_dynamic_filter_output(
            theirs, remaining_batch_size=remaining, target_data_size=target
        )


@pytest.mark.parametrize("legacy", [True, False, 0, 1])
def test_replica_call_site_wraps_legacy_returns_like_slimes(legacy):
    from slime.rollout.filter_hub import base_types

    ours = _replica.call_dynamic_filter(lambda *a: legacy, None)
    theirs = base_types.call_dynamic_filter(lambda *a: legacy, None)
    assert (ours.keep, ours.reason, ours.keep_when_insufficient) == (
        theirs.keep, theirs.reason, theirs.keep_when_insufficient
    )
    assert _replica.call_dynamic_filter(None).keep is base_types.call_dynamic_filter(None).keep is True

"""Each failure mode, classified from a real episode's gold audit and messages (scripted actions)."""

from __future__ import annotations

import pytest
from analyst_helpers import Scripts, catalog, play, train_tasks

from shopsimrl.analyst.evidence import evidence_turns
from shopsimrl.shop.failure_modes import FailureMode, classify_trajectory, group_mode

CAT = catalog()
TASK = next(t for t in train_tasks(CAT) if t.gold.options)


@pytest.mark.parametrize(
    "mode",
    [m for m in FailureMode if m is not FailureMode.UNCLASSIFIED],
)
def test_each_failure_mode_is_classified_from_a_real_episode(mode):
    audit, messages = play(CAT, TASK, getattr(Scripts(CAT, TASK), mode.value)())
    assert audit["success"] is False
    assert classify_trajectory(audit, messages).mode is mode


def test_the_successful_script_succeeds():
    # The scripts' baseline: buying the base product with every option is a success, so each
    # failure above comes from the one step its script changes.
    audit, _ = play(CAT, TASK, Scripts(CAT, TASK).success())
    assert audit["success"] is True


def test_policy_failures_are_counted_by_kind():
    audit, messages = play(CAT, TASK, Scripts(CAT, TASK).invalid_tool_use())
    diagnosis = classify_trajectory(audit, messages)
    assert diagnosis.policy_failures == {"unknown_tool": 12}
    assert diagnosis.turns == 12 and diagnosis.finish == "turn_limit"


def test_no_gold_audit_is_unclassified():
    assert classify_trajectory(None, []).mode is FailureMode.UNCLASSIFIED


def test_group_mode_is_the_most_frequent_then_the_first_listed():
    m = FailureMode
    assert group_mode([m.OVER_BUDGET, m.WRONG_OPTION, m.WRONG_OPTION]) is m.WRONG_OPTION
    assert group_mode([m.WRONG_OPTION, m.OVER_BUDGET]) is m.OVER_BUDGET  # tie: OVER_BUDGET is listed first
    assert group_mode([]) is m.UNCLASSIFIED


def test_evidence_turns_point_at_the_first_failure_the_off_path_product_and_the_end():
    scripts = Scripts(CAT, TASK)
    audit, messages = play(CAT, TASK, [scripts.invalid_tool_use()[0], *scripts.attribute_mismatch()])
    turns = evidence_turns(0, messages, audit)
    swap = TASK.gold.family_product_ids["attribute_swap"]
    assert [(t.turn, t.note) for t in turns] == [
        (1, "policy failure: unknown_tool"),
        (3, f"acted on non-gold product {swap}"),
        (7, "last turn (episode finish: checkout)"),
    ]
    assert turns[1].excerpt.startswith("<tool_call>")

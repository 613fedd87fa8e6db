"""The firewall rejects every kind of planted leak, with its reason, and passes clean text."""

from __future__ import annotations

import pytest
from analyst_helpers import Scripts, catalog, play, train_tasks

from shopsimrl.analyst.cards import build_card
from shopsimrl.analyst.firewall import Firewall
from shopsimrl.analyst.lessons import RULE_LESSONS
from shopsimrl.records import GroupTrace, OutcomeRecord, SegmentTrace, TrajectoryTrace, TriageRecord
from shopsimrl.shop import load_split

CAT = catalog()
TASK = next(t for t in train_tasks(CAT) if len(t.gold.options) == 2)


def _card():
    audit, messages = play(CAT, TASK, Scripts(CAT, TASK).over_budget())
    trajectory = TrajectoryTrace(
        rollout_id=0, outcome=OutcomeRecord(reward=audit["reward"], strict_reward=0.0, success=False, scorable=True),
        gold_audit=audit,
        segments=[SegmentTrace(segment_index=0, segment_count=1, sample_index=0, status="completed", total_tokens=1,
                               response_tokens=1, trained_tokens=1, messages=messages)],
    )  # fmt: skip
    trace = GroupTrace(rollout_step=0, group_index=0, group_key=f"{TASK.task_id}#g0", task_id=TASK.task_id,
                       split="train", arm="skill_free", mask=[], q=1.0, rho={}, technical_error=False,
                       all_wrong=True, zero_std=True, trajectories=[trajectory])  # fmt: skip
    triage = TriageRecord(triage_id="0-0", rollout_step=0, group_index=0, group_key=trace.group_key,
                          task_id=TASK.task_id, split="train", arm="skill_free", mask=[], reasons=["all_wrong"],
                          outcomes=[trajectory.outcome], rollout_ids=[0], technical_errors=[],
                          trace_path="traces/step-0/group-0.json")  # fmt: skip
    return build_card(triage, trace, None)


CARD = _card()
WALL = Firewall.for_evidence([CARD], catalog=CAT, banned_terms=["internal codename"])
GOLD = TASK.gold
BOUGHT = CARD.audit["siblings"][0]["purchased"][0]
SIZE_LIKE = next(v for v in GOLD.options.values())
VALIDATION = load_split(CAT, "validation")[0]

LEAKS = {
    "a product id": (f"Buy {GOLD.gold_product_ids[0]} at once.", f"product id {GOLD.gold_product_ids[0]!r}"),
    "any product id": ("Product P000001 is a good default.", "product id 'P000001'"),
    "the gold product type": (f"Look for {GOLD.product_type} first.", "gold product type of card-0-0"),
    "a gold attribute value": (f"Prefer {next(iter(GOLD.attributes.values()))} products.", "gold attribute value"),
    "a gold option value": (f"Always pick {SIZE_LIKE} for this option.", "gold option value"),
    "the price ceiling": (f"Stay below {GOLD.price_ceiling:.2f} dollars.", "price ceiling of card-0-0"),
    "a purchased product's price": (f"Do not pay {BOUGHT['price']:.2f}.", "price of a purchased product"),
    "a purchased product's title": (f"Avoid the {BOUGHT['title']}.", "title of a purchased product"),
    "validation task text": (f"Example request: {VALIDATION.instruction}", "text of a validation/test task"),
    "a configured banned term": ("Use the internal codename here.", "banned term: 'internal codename'"),
}


@pytest.mark.parametrize("kind", sorted(LEAKS))
def test_each_planted_leak_is_rejected_with_its_reason(kind):
    text, reason = LEAKS[kind]
    verdict = WALL.check(text)
    assert not verdict.ok
    assert any(reason in r for r in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("mode", sorted(RULE_LESSONS))
def test_every_rules_lesson_passes(mode):
    assert WALL.check(RULE_LESSONS[mode]).ok


def test_clean_text_and_near_misses_pass():
    ceiling = f"{GOLD.price_ceiling:.2f}"
    clean = [
        "Select every option the instruction names before add_to_cart.",
        f"Pay attention to the price; {ceiling}1 is not a leak of anything.",  # a longer number
        "I'm sure the shopping task asks for one product.",  # short values match only with their case
        "I need a product, and it must be under the limit.",  # template words shared with train tasks
    ]
    for text in clean:
        assert WALL.check(text).ok, (text, WALL.check(text).reasons)


def test_every_reason_is_reported_at_once():
    verdict = WALL.check(f"Buy P000001 in {SIZE_LIKE} under {GOLD.price_ceiling:.2f}.")
    assert len(verdict.reasons) == 3

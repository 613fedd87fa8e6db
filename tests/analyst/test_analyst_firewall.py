"""The firewall rejects every kind of planted leak, with its kind and a hash, and passes clean text;
it screens lessons before their trial, and the gate's check of a pool uses it."""

from __future__ import annotations

import pytest
from analyst_helpers import Scripts, catalog, play, train_tasks

from shopsimrl.analyst.cards import CardStatus, Lesson, build_card
from shopsimrl.analyst.compiler import screen_lessons
from shopsimrl.analyst.config import CompilerSettings, TrialSettings
from shopsimrl.analyst.firewall import Firewall, GoldFacts, pool_problems, value_digest
from shopsimrl.analyst.lessons import RULE_LESSONS
from shopsimrl.analyst.trial import LeakyLessonError, TrialRunner
from shopsimrl.config.options import ShopSimOptions
from shopsimrl.records import GroupTrace, OutcomeRecord, SegmentTrace, TrajectoryTrace, TriageRecord
from shopsimrl.shop import load_split
from shopsimrl.shop.failure_modes import FailureMode
from shopsimrl.skills.candidates import Intervention, LedgerEvent
from shopsimrl.skills.skillbank import empty_skillbank

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
EVIDENCE = (CARD.card_id,)
ATTRIBUTE = next(iter(GOLD.attributes.values()))

LEAKS = {  # kind -> (text, the reason's kind and source, the value its hash is of)
    "a product id": (f"Buy {GOLD.gold_product_ids[0]} at once.", "product id of any product",
                     GOLD.gold_product_ids[0]),
    "any product id": ("Product P000001 is a good default.", "product id of any product", "P000001"),
    "the gold product type": (f"Look for {GOLD.product_type} first.", "gold product type of card-0-0",
                              GOLD.product_type),
    "a gold attribute value": (f"Prefer {ATTRIBUTE} products.", "gold attribute value of card-0-0", ATTRIBUTE),
    "a gold option value": (f"Always pick {SIZE_LIKE} for this option.", "gold option value of card-0-0",
                            SIZE_LIKE),
    "the price ceiling": (f"Stay below {GOLD.price_ceiling:.2f} dollars.", "price ceiling of card-0-0",
                          f"{GOLD.price_ceiling:.2f}"),
    "a purchased product's price": (f"Do not pay {BOUGHT['price']:.2f}.", "price of a purchased product of card-0-0",
                                    f"{BOUGHT['price']:.2f}"),
    "a purchased product's title": (f"Avoid the {BOUGHT['title']}.", "title of a purchased product of card-0-0",
                                    BOUGHT["title"]),
    "validation task text": (f"Example request: {VALIDATION.instruction}", "product of a validation/test task of "
                             "validation", VALIDATION.gold.product_type),
    "a configured banned term": ("Use the internal codename here.", "banned term of the config", "internal codename"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(LEAKS))
def test_each_planted_leak_is_rejected_with_its_kind_and_a_hash_never_the_value(kind):
    text, reason, value = LEAKS[kind]
    verdict = WALL.check(text, EVIDENCE)
    assert not verdict.ok
    assert f"{reason} [sha256:{value_digest(value)}]" in verdict.reasons, verdict.reasons
    for leaked in [value, *GOLD.attributes.values(), GOLD.product_type, f"{GOLD.price_ceiling:.2f}"]:
        if len(leaked) > 2:
            assert all(leaked.lower() not in r.lower() for r in verdict.reasons), (leaked, verdict.reasons)


@pytest.mark.parametrize("mode", sorted(RULE_LESSONS))
def test_every_rules_lesson_passes_even_as_a_lesson_of_the_card(mode):
    assert WALL.check(RULE_LESSONS[mode], EVIDENCE).ok


def test_clean_text_and_near_misses_pass():
    far = f"{GOLD.price_ceiling * 3:.2f}"  # far from every price: near ones (within 5%) are leaks
    clean = [
        "Select every option the instruction names before add_to_cart.",
        f"Pay attention to the price; {far} is not a leak of anything.",
        "I'm sure the shopping task asks for one product.",  # short values match only as a size
        "I need a product, and it must be under the limit.",  # template words shared with train tasks
    ]
    for text in clean:
        assert WALL.check(text, EVIDENCE).ok, (text, WALL.check(text, EVIDENCE).reasons)


def test_every_reason_is_reported_at_once():
    verdict = WALL.check(f"Buy P000001 in size {SIZE_LIKE} under {GOLD.price_ceiling:.2f}.", EVIDENCE)
    assert verdict.kinds == ("product id", "gold option value", "price ceiling")


def test_a_cards_gold_blocks_only_the_lessons_built_from_that_card():
    # Before: gold values of every card were banned in every text, so a common word that was one
    # card's gold value ("down", "10", a colour) blocked that word in every generic lesson.
    down = next(t for t in train_tasks(CAT) if "down" in t.gold.attributes.values())
    wall = Firewall.for_evidence([], catalog=CAT)
    wall.evidence["down-card"] = GoldFacts.of_gold("down-card", down.gold.model_dump())
    generic = "Scroll down the result list only when the first page has no match."
    assert wall.check(generic, ["down-card"]).ok  # a common word alone is no leak
    assert wall.check(generic, ["another-card"]).ok
    assert wall.check(f"Prefer down {down.gold.product_type}.", ["another-card"]).ok
    assert not wall.check(f"Prefer down {down.gold.product_type}.", ["down-card"]).ok
    assert not wall.check("Prefer down products.", ["down-card"]).ok  # a product's property


@pytest.mark.parametrize("written", ["P 000-123", "P000\u200b123", "\u0420000123", "P00O123", "p.000.l23",
                                     "\uff30\uff10\uff10\uff10\uff11\uff12\uff13"])
def test_product_ids_through_separators_and_look_alikes(written):
    verdict = Firewall().check(f"Buy {written} now.")
    assert verdict.reasons == (f"product id of any product [sha256:{value_digest('P000123')}]",)


def test_a_held_out_task_worded_anew_is_a_leak_and_its_hash_not_its_text_is_recorded():
    gold = VALIDATION.gold
    a, b = list(gold.attributes.values())[:2]
    verdict = WALL.check(f"Someone wanted {b}, {a} {gold.product_type}s.")
    assert verdict.kinds == ("product of a validation/test task",)
    assert verdict.reasons == (f"product of a validation/test task of validation "
                               f"[sha256:{value_digest(gold.product_type)}]",)  # fmt: skip


def test_the_gate_check_of_a_pool_names_the_intervention_and_the_kind():
    leaky = Intervention(intervention_id="iv-01-x", logical_chunk_id="x", operation="add",
                         text=f"Example: {VALIDATION.instruction}", proposal_id="p1")  # fmt: skip
    clean = Intervention(intervention_id="iv-02-y", logical_chunk_id="y", operation="add",
                         text=RULE_LESSONS[FailureMode.OVER_BUDGET], proposal_id="p2")  # fmt: skip
    [problem] = pool_problems([leaky, clean], Firewall.for_evidence([], catalog=CAT))
    assert problem.startswith("intervention iv-01-x carries privileged facts: text of a validation/test task of ")
    assert VALIDATION.gold.product_type not in problem


def test_a_leaky_lesson_is_screened_before_its_trial_and_the_trial_refuses_it(tmp_path):
    leaky = CARD.model_copy(update={"status": CardStatus.ANALYZED, "lesson": Lesson(
        text=f"Pick {GOLD.product_type} at {GOLD.price_ceiling:.2f}.", backend="llm", failure_mode=CARD.failure_mode)})
    clean = leaky.model_copy(update={"card_id": "card-0-1", "lesson": Lesson(
        text=RULE_LESSONS[CARD.failure_mode], backend="llm", failure_mode=CARD.failure_mode)})  # fmt: skip
    cards, entries = screen_lessons([leaky, clean], firewall=WALL, skillbank=empty_skillbank(),
                                    round_name="round-001", settings=CompilerSettings(), now="2026-12-02T00:00:00Z")
    assert [c.status for c in cards] == [CardStatus.ANALYSIS_ERROR, CardStatus.ANALYZED]
    assert cards[0].lesson is None
    assert cards[0].analysis_error == "lesson rejected by the firewall before its trial (gold product type, price ceiling)"
    [entry] = entries
    assert (entry.event, entry.evidence_card_ids, entry.details["stage"]) == (
        LedgerEvent.FIREWALL_REJECTED, (CARD.card_id,), "before_trial")
    assert GOLD.product_type not in entry.model_dump_json()
    runner = TrialRunner(TrialSettings(), ShopSimOptions(run_dir=str(tmp_path)), CAT, empty_skillbank(), None, None, WALL)
    with pytest.raises(LeakyLessonError, match=r"^trial of card-0-0 refused: the lesson carries privileged facts "
                                               r"\(gold product type, price ceiling\)$"):  # fmt: skip
        runner.run(leaky, leaky.lesson.text)

"""Records that leak nothing: a lesson backend that writes gold into its lessons, through the real
analysis stage; no gold value of the round's evidence tasks is in any file of the artifact."""

from __future__ import annotations

import re

import pytest
from analyst_helpers import (
    ExpertPolicyGenerator,
    Scripts,
    catalog,
    play,
    read_lines,
    train_tasks,
    write_configs,
    write_group,
)

from shopsimrl.analyst.cards import CardStatus, FailureCard, Lesson, read_cards
from shopsimrl.analyst.config import load_analysis_config
from shopsimrl.analyst.lessons import RULE_LESSONS, LessonResult
from shopsimrl.analyst.stage import run_analysis
from shopsimrl.errors import StageIncomplete
from shopsimrl.models import tiny_tokenizer
from shopsimrl.skills.candidates import LedgerEvent
from shopsimrl.tracking import WandbSettings


class GoldQuotingBackend:
    """Writes the card's own gold into the lesson of every card but the first (as a model that
    copies the instruction would); the first card gets the generic rules lesson."""

    name = "llm"

    def lessons(self, cards: list[FailureCard]) -> list[LessonResult]:
        out = []
        for n, card in enumerate(cards):
            gold = card.audit["gold"]
            text = RULE_LESSONS[card.failure_mode] if n == 0 else (
                f"Buy the {' '.join(gold['attributes'].values())} {gold['product_type']}s for "
                f"${gold['price_ceiling']:.2f}.")  # fmt: skip
            out.append(LessonResult(card.card_id, Lesson(text=text, backend=self.name, failure_mode=card.failure_mode)))
        return out


def _gold_values(cards: list[FailureCard]) -> set[str]:
    values: set[str] = set()
    for card in cards:
        gold = card.audit["gold"]
        values |= {gold["product_type"], *gold["attributes"].values(), *gold["options"].values(),
                   f"{gold['price_ceiling']:.2f}", *gold["gold_product_ids"], *gold["family_product_ids"].values()}
        for sibling in card.audit.get("siblings") or []:
            values |= {line["title"] for line in sibling.get("purchased") or []}
    return {v for v in values if len(v) >= 3}


def test_gold_in_lessons_is_stopped_before_the_trial_and_no_artifact_file_carries_it(tmp_path):
    cat = catalog()
    tasks = train_tasks(cat)[:3]
    train = tmp_path / "runs" / "round-000" / "train"
    for n, task in enumerate(tasks):
        episode = play(cat, task, Scripts(cat, task).over_budget())
        write_group(train, step=0, group_index=n, task=task, episodes=[episode, episode])
    config = load_analysis_config(write_configs(tmp_path, trial={"attempts": 1}))
    tokenizer = tiny_tokenizer()
    generator = ExpertPolicyGenerator(cat, tasks, tokenizer)
    with pytest.raises(StageIncomplete) as excinfo:
        run_analysis(config, settings=WandbSettings(enabled=False), echo=lambda _: None, keep_cards_local=True,
                     policy=(tokenizer, generator), lesson_backend=GoldQuotingBackend())  # fmt: skip
    result = excinfo.value.result
    cards, _ = read_cards(config.analysis_dir)
    assert [c.status for c in cards] == [CardStatus.ELIGIBLE, CardStatus.ANALYSIS_ERROR, CardStatus.ANALYSIS_ERROR]
    # Only the clean lesson was tried: the expert generator saw one card's episodes, not three.
    assert {c.card_id for c in cards if c.trial is not None} == {cards[0].card_id}
    ledger = read_lines(config.analysis_dir / "proposal_ledger.jsonl")
    rejected = [e for e in ledger if e["event"] == LedgerEvent.FIREWALL_REJECTED.value]
    assert [(e["evidence_card_ids"], e["details"]["stage"]) for e in rejected] == [
        ([cards[1].card_id], "before_trial"), ([cards[2].card_id], "before_trial")]  # fmt: skip

    assert [f.name for f in result.artifact_files] == [
        "analysis_summary.json", "candidate_pool.json", "proposal_ledger.jsonl"]  # fmt: skip
    values = _gold_values(cards)
    assert len(values) >= 10
    for path in result.artifact_files:
        text = path.read_text(encoding="utf-8").casefold()
        found = [v for v in values if re.search(rf"(?<![\w.]){re.escape(v.casefold())}(?![\w])", text)]
        assert found == [], (path.name, found)

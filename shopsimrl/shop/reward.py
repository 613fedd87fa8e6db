"""Reward from the final state (docs/reward.md), and the privileged gold-audit record.

For one purchased line:
    r = r_type * (matched attributes + matched options + 1[price <= ceiling]) / (|attributes| + |options| + 1)
with r_type = 1 for the asked product type, 0.5 for another type of the same category, 0.1 otherwise.
A task without a price ceiling (a difficulty level that states none) has no price term:
    r = r_type * (matched attributes + matched options) / (|attributes| + |options|).
An episode's reward is the mean over purchased lines (0 without a purchase); strict_reward is 1 only
for exactly one line with r = 1; success is strict_reward == 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shopsimrl.shop.catalog import Catalog, product_id
from shopsimrl.shop.state import CartLine, EpisodeState, Finish
from shopsimrl.shop.tasks import Task

GOLD_AUDIT_SCHEMA_VERSION = 1
R_TYPE_EXACT = 1.0
R_TYPE_SAME_CATEGORY = 0.5
R_TYPE_OTHER = 0.1


@dataclass(frozen=True)
class LineScore:
    product_id: str
    r_type: float
    attributes_matched: int
    attributes_total: int
    options_matched: int
    options_total: int
    price_ok: bool
    reward: float
    failed: tuple[str, ...]  # privileged: names the gold values; only for the gold audit

    def counts(self) -> dict[str, Any]:
        return {
            "product_id": self.product_id,
            "r_type": self.r_type,
            "attributes_matched": self.attributes_matched,
            "attributes_total": self.attributes_total,
            "options_matched": self.options_matched,
            "options_total": self.options_total,
            "price_ok": self.price_ok,
            "reward": self.reward,
        }


@dataclass(frozen=True)
class EpisodeOutcome:
    reward: float
    strict_reward: float
    success: bool
    breakdown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "strict_reward": self.strict_reward, "success": self.success,
                "breakdown": self.breakdown}  # fmt: skip


def partial_credit(r_type: float, matched_attributes: int, matched_options: int, price_ok: bool,
                   n_attributes: int, n_options: int, *, has_ceiling: bool = True) -> float:  # fmt: skip
    """The WebShop-style formula itself, on counts (what the hand-computed tests check).
    Without a ceiling the price is no constraint, so it earns no free credit either."""
    if not has_ceiling:
        return r_type * (matched_attributes + matched_options) / (n_attributes + n_options)
    return r_type * (matched_attributes + matched_options + int(price_ok)) / (n_attributes + n_options + 1)


def score_line(catalog: Catalog, task: Task, line: CartLine) -> LineScore:
    gold = task.gold
    index = line.product
    ptype = catalog.type_of(index)
    category = catalog.category_of(index).name
    failed: list[str] = []
    if ptype == gold.product_type:
        r_type = R_TYPE_EXACT
    else:
        r_type = R_TYPE_SAME_CATEGORY if category == gold.category else R_TYPE_OTHER
        failed.append(f"type: wanted {gold.product_type!r}, got {ptype!r}")
    attributes = catalog.attributes_of(index)
    attributes_matched = 0
    for name, wanted in gold.attributes.items():
        got = attributes.get(name)
        if got == wanted:
            attributes_matched += 1
        else:
            failed.append(f"attribute {name}: wanted {wanted!r}, got {got!r}")
    selected = line.options_dict()
    options_matched = 0
    for name, wanted in gold.options.items():
        got = selected.get(name)
        if got == wanted:
            options_matched += 1
        else:
            failed.append(f"option {name}: wanted {wanted!r}, got {got!r}")
    price = catalog.price(index)
    has_ceiling = gold.price_ceiling is not None
    price_ok = not has_ceiling or price <= gold.price_ceiling
    if not price_ok:
        failed.append(f"price: {price:.2f} is over the ceiling {gold.price_ceiling:.2f}")
    n_attr, n_opt = len(gold.attributes), len(gold.options)
    reward = partial_credit(r_type, attributes_matched, options_matched, price_ok, n_attr, n_opt,
                            has_ceiling=has_ceiling)  # fmt: skip
    return LineScore(product_id(index), r_type, attributes_matched, n_attr, options_matched, n_opt, price_ok,
                     reward, tuple(failed))  # fmt: skip


def compute_outcome(catalog: Catalog, task: Task, state: EpisodeState) -> EpisodeOutcome:
    """The outcome of the episode as it stands (reward 0 until a checkout)."""
    purchased = state.cart if state.finish is Finish.CHECKOUT else []
    scores = [score_line(catalog, task, line) for line in purchased]
    reward = sum(s.reward for s in scores) / len(scores) if scores else 0.0
    strict = 1.0 if len(scores) == 1 and scores[0].reward == 1.0 else 0.0
    breakdown = {
        "finish": state.finish.value,
        "turns": state.turn,
        "policy_failures": state.policy_failures,
        "purchased_lines": len(scores),
        # counts only: the breakdown may be shown to people and logged; the gold values are not in it
        "lines": [s.counts() for s in scores],
    }
    return EpisodeOutcome(reward=reward, strict_reward=strict, success=strict == 1.0, breakdown=breakdown)


def gold_audit(catalog: Catalog, task: Task, state: EpisodeState) -> dict[str, Any]:
    """Privileged record for triage and failure cards: the gold, what was bought, what failed.

    Never put this (or anything derived from its gold values) into a prompt or a skill.
    """
    purchased = state.cart if state.finish is Finish.CHECKOUT else []
    failed: list[str] = []
    bought = []
    for line in purchased:
        score = score_line(catalog, task, line)
        failed.extend(f"{score.product_id}: {f}" for f in score.failed)
        product = catalog.product(line.product)
        bought.append({
            "product_id": product.product_id,
            "title": product.title,
            "product_type": product.product_type,
            "attributes": product.attributes,
            "selected_options": line.options_dict(),
            "price": product.price,
            "reward": score.reward,
            "is_gold_product": product.product_id in task.gold.gold_product_ids,
        })  # fmt: skip
    if state.finish is Finish.TURN_LIMIT:
        failed.append("no purchase before the turn limit")
    elif state.finish is Finish.IN_PROGRESS:
        failed.append("episode still in progress: nothing bought yet")
    elif len(purchased) > 1:
        failed.append(f"bought {len(purchased)} lines; the task asks for exactly one product")
    outcome = compute_outcome(catalog, task, state)
    return {
        "schema_version": GOLD_AUDIT_SCHEMA_VERSION,
        "privileged": True,
        "task_id": task.task_id,
        "split": task.split.value,
        "instruction": task.instruction,
        "gold": task.gold.model_dump(mode="json"),
        "purchased": bought,
        "failed_constraints": failed,
        "finish": state.finish.value,
        "turns": state.turn,
        "reward": outcome.reward,
        "strict_reward": outcome.strict_reward,
        "success": outcome.success,
    }

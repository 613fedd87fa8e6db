"""Failure modes: why a scorable trajectory failed, classified from its gold audit and its messages.

The modes extend docs/error_taxonomy.md: its policy-failure kinds (observations the model saw) and
the reward's outcome-level failures (docs/reward.md: type, attributes, options, price, lines).
One mode per trajectory, by this precedence (the first that applies):

    no checkout:  truncated_turn (a turn hit its token limit; the episode never reached checkout)
                  malformed_tool_call / invalid_tool_use (at least half the turns were such failures)
                  never_checked_out (something reached the cart), else turn_limit
    checkout:     multiple_items, wrong_product_type, attribute_mismatch, over_budget,
                  option_not_selected, wrong_option

A group's mode is its siblings' most frequent mode, ties broken by the order of `FailureMode`.

It lives with the shop because it reads only the shop's own vocabulary (the reward's gold audit and
the observation failure kinds), and three stages share it: the Analyst's cards, the evaluation
runner and the behaviour analysis.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shopsimrl.shop.observations import PolicyFailureKind


class FailureMode(StrEnum):
    TRUNCATED_TURN = "truncated_turn"
    MALFORMED_TOOL_CALL = "malformed_tool_call"
    INVALID_TOOL_USE = "invalid_tool_use"
    NEVER_CHECKED_OUT = "never_checked_out"
    TURN_LIMIT = "turn_limit"
    MULTIPLE_ITEMS = "multiple_items"
    WRONG_PRODUCT_TYPE = "wrong_product_type"
    ATTRIBUTE_MISMATCH = "attribute_mismatch"
    OVER_BUDGET = "over_budget"
    OPTION_NOT_SELECTED = "option_not_selected"
    WRONG_OPTION = "wrong_option"
    UNCLASSIFIED = "unclassified"  # no gold audit (should not happen for a scorable trajectory)


_ORDER = {mode: rank for rank, mode in enumerate(FailureMode)}
_MALFORMED = {PolicyFailureKind.MALFORMED_TOOL_CALL.value}
_INVALID = {
    PolicyFailureKind.UNKNOWN_TOOL.value,
    PolicyFailureKind.TOOL_NOT_OFFERED.value,
    PolicyFailureKind.BAD_ARGUMENTS.value,
    PolicyFailureKind.INVALID_ACTION.value,
}


@dataclass(frozen=True)
class Diagnosis:
    mode: FailureMode
    policy_failures: dict[str, int] = field(default_factory=dict)  # observation error kind -> count
    finish: str | None = None
    turns: int = 0  # assistant turns in the messages


def observation_error(content: Any) -> str | None:
    """The policy-failure kind of a tool observation (`{"error": kind, ...}`), or None."""
    if not isinstance(content, str) or not content.startswith('{"error"'):
        return None
    try:
        payload = json.loads(content)
    except json.JSONDecodeError:
        return None
    kind = payload.get("error") if isinstance(payload, dict) else None
    return kind if isinstance(kind, str) else None


def policy_failures(messages: Iterable[Mapping[str, Any]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for message in messages:
        if message.get("role") == "tool":
            kind = observation_error(message.get("content"))
            if kind is not None and kind != PolicyFailureKind.TURN_LIMIT.value:
                counts[kind] += 1
    return counts


def classify_trajectory(gold_audit: Mapping[str, Any] | None, messages: Sequence[Mapping[str, Any]]) -> Diagnosis:
    """The failure mode of one failed, scorable trajectory."""
    failures = policy_failures(messages)
    turns = sum(1 for message in messages if message.get("role") == "assistant")
    if not gold_audit:
        return Diagnosis(FailureMode.UNCLASSIFIED, dict(failures), None, turns)
    finish = gold_audit.get("finish")
    purchased = gold_audit.get("purchased") or []
    if finish != "checkout" or not purchased:
        mode = _unfinished_mode(finish, failures, turns, messages)
    elif len(purchased) > 1:
        mode = FailureMode.MULTIPLE_ITEMS
    else:
        mode = _line_mode(gold_audit.get("gold") or {}, purchased[0])
    return Diagnosis(mode, dict(failures), finish, turns)


def _unfinished_mode(
    finish: Any, failures: Counter[str], turns: int, messages: Sequence[Mapping[str, Any]]
) -> FailureMode:
    if finish == "in_progress":  # the episode stopped mid-way: a turn hit max_new_tokens or the context limit
        return FailureMode.TRUNCATED_TURN
    malformed = sum(failures[k] for k in _MALFORMED)
    invalid = sum(failures[k] for k in _INVALID)
    if turns and malformed + invalid >= max(1, turns / 2):
        return FailureMode.MALFORMED_TOOL_CALL if malformed >= invalid else FailureMode.INVALID_TOOL_USE
    if _reached_cart(messages):
        return FailureMode.NEVER_CHECKED_OUT
    return FailureMode.TURN_LIMIT


def _reached_cart(messages: Sequence[Mapping[str, Any]]) -> bool:
    # add_to_cart's success observation starts with {"added": ...} (shop/tools.py).
    return any(
        message.get("role") == "tool" and str(message.get("content", "")).startswith('{"added": ')
        for message in messages
    )


def _line_mode(gold: Mapping[str, Any], line: Mapping[str, Any]) -> FailureMode:
    if line.get("product_type") != gold.get("product_type"):
        return FailureMode.WRONG_PRODUCT_TYPE
    attributes = line.get("attributes") or {}
    if any(attributes.get(name) != value for name, value in (gold.get("attributes") or {}).items()):
        return FailureMode.ATTRIBUTE_MISMATCH
    ceiling = gold.get("price_ceiling")
    price = line.get("price")
    if isinstance(ceiling, (int, float)) and isinstance(price, (int, float)) and price > ceiling:
        return FailureMode.OVER_BUDGET
    selected = line.get("selected_options") or {}
    wanted = gold.get("options") or {}
    if any(name not in selected for name in wanted):
        return FailureMode.OPTION_NOT_SELECTED
    if any(selected.get(name) != value for name, value in wanted.items()):
        return FailureMode.WRONG_OPTION
    # Every constraint holds but the episode still failed: only a non-gold product fits that.
    return FailureMode.WRONG_PRODUCT_TYPE if not line.get("is_gold_product") else FailureMode.UNCLASSIFIED


def group_mode(modes: Sequence[FailureMode]) -> FailureMode:
    """The siblings' most frequent mode; ties go to the mode listed first in `FailureMode`."""
    if not modes:
        return FailureMode.UNCLASSIFIED
    counts = Counter(modes)
    return min(counts, key=lambda mode: (-counts[mode], _ORDER[mode]))

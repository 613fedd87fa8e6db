"""How an episode ended and, if it failed, why — from the trace's outcome and gold-audit fields.

A deliberately small classifier for the behaviour analysis (the Failure Analyst has its own, richer
one in shopsimrl/analyst/; the two should be unified). The gold audit is privileged: only the
category names leave this module, never the gold values.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Ending(StrEnum):
    CHECKOUT = "checkout"  # the model checked out (success or not)
    TURN_LIMIT = "turn_limit"  # the environment's turn limit ended the episode
    LENGTH = "length"  # the last model turn hit max_new_tokens (Sample status TRUNCATED)
    CONTEXT_LIMIT = "context_limit"  # no room left in the context for another turn (TRUNCATED)
    TRUNCATED = "truncated"  # TRUNCATED, cause not recorded (trace without messages)
    TECHNICAL = "technical"  # environment, parser or model-service error: unscorable
    UNKNOWN = "unknown"  # no gold audit to read the finish from


class FailureMode(StrEnum):
    SUCCESS = "success"
    TECHNICAL = "technical"
    TURN_LIMIT = "turn_limit"
    LENGTH = "length"
    CONTEXT_LIMIT = "context_limit"
    NO_PURCHASE = "no_purchase"  # checked out with nothing bought
    MULTIPLE_ITEMS = "multiple_items"
    WRONG_TYPE = "wrong_type"
    OVER_BUDGET = "over_budget"
    WRONG_ATTRIBUTE = "wrong_attribute"
    WRONG_OPTION = "wrong_option"
    OTHER = "other"  # bought one matching line and still not a success (should not happen)
    UNKNOWN = "unknown"


_TRUNCATION_MODES = {
    Ending.TURN_LIMIT: FailureMode.TURN_LIMIT,
    Ending.LENGTH: FailureMode.LENGTH,
    Ending.CONTEXT_LIMIT: FailureMode.CONTEXT_LIMIT,
    Ending.TRUNCATED: FailureMode.LENGTH,
}


def classify_ending(
    technical_error: Any, last_sample_status: str | None, last_role: str | None, gold_audit: Any
) -> Ending:
    """`last_role`: role of the episode's last message (an unanswered assistant turn = length)."""
    if technical_error is not None:
        return Ending.TECHNICAL
    if last_sample_status == "truncated":
        if last_role is None:
            return Ending.TRUNCATED
        return Ending.LENGTH if last_role == "assistant" else Ending.CONTEXT_LIMIT
    finish = gold_audit.get("finish") if isinstance(gold_audit, Mapping) else None
    if finish == "checkout":
        return Ending.CHECKOUT
    if finish == "turn_limit":
        return Ending.TURN_LIMIT
    return Ending.UNKNOWN


def _line_mode(line: Mapping[str, Any], gold: Mapping[str, Any]) -> FailureMode:
    if line.get("product_type") != gold.get("product_type"):
        return FailureMode.WRONG_TYPE
    price, ceiling = line.get("price"), gold.get("price_ceiling")
    if isinstance(price, int | float) and isinstance(ceiling, int | float) and price > ceiling:
        return FailureMode.OVER_BUDGET
    attributes = line.get("attributes") or {}
    if any(attributes.get(k) != v for k, v in (gold.get("attributes") or {}).items()):
        return FailureMode.WRONG_ATTRIBUTE
    options = line.get("selected_options") or {}
    if any(options.get(k) != v for k, v in (gold.get("options") or {}).items()):
        return FailureMode.WRONG_OPTION
    return FailureMode.OTHER


def classify_failure(ending: Ending, success: bool | None, gold_audit: Any) -> FailureMode:
    """The first failing check in the order the reward checks them (type, price, attributes, options)."""
    if ending is Ending.TECHNICAL:
        return FailureMode.TECHNICAL
    if success:
        return FailureMode.SUCCESS
    if ending in _TRUNCATION_MODES:
        return _TRUNCATION_MODES[ending]
    if ending is not Ending.CHECKOUT or not isinstance(gold_audit, Mapping):
        return FailureMode.UNKNOWN
    purchased = gold_audit.get("purchased") or []
    if not purchased:
        return FailureMode.NO_PURCHASE
    if len(purchased) > 1:
        return FailureMode.MULTIPLE_ITEMS
    return _line_mode(purchased[0], gold_audit.get("gold") or {})

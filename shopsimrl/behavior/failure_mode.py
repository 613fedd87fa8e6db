"""How an episode ended and, if it failed, why — from the trace's outcome and gold-audit fields.

The ending (how the episode stopped) is the behaviour analysis' own view; why a scorable episode
failed is the shop's failure-mode classifier (shopsimrl/shop/failure_modes.py), so the cards and
the behaviour tables name the same modes. The gold audit is privileged: only the mode names leave
this module, never the gold values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from shopsimrl.shop.failure_modes import FailureMode, classify_trajectory


class Ending(StrEnum):
    CHECKOUT = "checkout"  # the model checked out (success or not)
    TURN_LIMIT = "turn_limit"  # the environment's turn limit ended the episode
    LENGTH = "length"  # the last model turn hit max_new_tokens (Sample status TRUNCATED)
    CONTEXT_LIMIT = "context_limit"  # no room left in the context for another turn (TRUNCATED)
    TRUNCATED = "truncated"  # TRUNCATED, cause not recorded (trace without messages)
    TECHNICAL = "technical"  # environment, parser or model-service error: unscorable
    UNKNOWN = "unknown"  # no gold audit to read the finish from


class Outcome(StrEnum):
    """An episode's mode when it did not fail as a policy: the rest are the Analyst's `FailureMode`s."""

    SUCCESS = "success"
    TECHNICAL = "technical"


# Every value `classify_failure` returns, in the order the plots stack them.
EPISODE_MODES: tuple[str, ...] = (Outcome.SUCCESS.value, *(mode.value for mode in FailureMode), Outcome.TECHNICAL.value)


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


def classify_failure(
    ending: Ending, success: bool | None, gold_audit: Any, messages: Sequence[Mapping[str, Any]] | None
) -> str:
    """`success`, `technical`, or why the policy failed by the Failure Analyst's own classifier
    (shopsimrl/shop/failure_modes.py: one classifier for the cards and for the behaviour analysis)."""
    if ending is Ending.TECHNICAL:
        return Outcome.TECHNICAL.value
    if success:
        return Outcome.SUCCESS.value
    audit = gold_audit if isinstance(gold_audit, Mapping) else None
    return classify_trajectory(audit, messages or []).mode.value

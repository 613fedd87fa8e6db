"""Observation text and the policy-failure kinds (docs/error_taxonomy.md).

A policy failure is shown to the model as an observation and scored by the final outcome; it is
never an exception. Technical failures are `shopsimrl.errors.TechnicalError`.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any


class PolicyFailureKind(StrEnum):
    MALFORMED_TOOL_CALL = "malformed_tool_call"  # the assistant text is not one well-formed tool call
    UNKNOWN_TOOL = "unknown_tool"  # no tool of that name exists
    TOOL_NOT_OFFERED = "tool_not_offered"  # the tool exists but is not offered in this state
    BAD_ARGUMENTS = "bad_arguments"  # missing, unexpected, mistyped or out-of-range arguments
    INVALID_ACTION = "invalid_action"  # well-formed but impossible here (unknown product, not viewed, ...)
    TURN_LIMIT = "turn_limit"  # no purchase before the turn limit (set on the last step)


# json.dumps' own string encoder (the C one, ensure_ascii=True): fragments built with it are
# byte-identical to what json.dumps writes for the same values.
encode_json_string = json.encoder.encode_basestring_ascii


class JsonText(str):
    """A tool result already serialised, byte-identical to `json.dumps` of the payload it stands for.

    Tools on the hot path assemble their observation from cached per-product fragments instead
    of building a dict and encoding it on every call; tests/shop/test_shop_perf_paths.py checks
    the equality with json.dumps for every fragment."""

    __slots__ = ()


def json_str_dict(values: dict[str, str]) -> str:
    """`json.dumps` of a dict of strings to strings (option selections), without the encoder setup."""
    if not values:
        return "{}"
    return (
        "{" + ", ".join(f"{encode_json_string(k)}: {encode_json_string(v)}" for k, v in values.items()) + "}"
    )


def render_observation(payload: Any) -> str:
    """The one serialisation of tool results the model sees (JSON; the default encoder is the
    cached C encoder, several times faster than a configured one; catalog text is ASCII)."""
    if type(payload) is JsonText:
        return str.__str__(payload)
    return json.dumps(payload)


def error_observation(kind: PolicyFailureKind, message: str) -> str:
    return json.dumps({"error": kind.value, "message": message})

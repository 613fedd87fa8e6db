"""Scrub secrets from configs before they reach W&B, a failure record or any file.

slime copies its whole argument list into the run config (its W&B key flag included), and W&B writes
the config to the `.wandb` file, `debug.log` and the server. So every config we hand over is
scrubbed: values under secret-looking key names, values that look like W&B API keys, and the
current `WANDB_API_KEY` wherever it appears inside a string.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***REDACTED***"

# Name tokens that mark a secret ("wandb_key", "apiKey", "hf-token", "db_password", ...).
_SECRET_TOKENS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials", "auth"}
)
# Names containing "key" that are not secrets in this project: they name a metric, a group or a sort.
_NOT_SECRET_NAMES = frozenset({"reward_key", "group_key", "step_key", "sort_key", "metric_key", "task_key"})
# W&B key format (checked by wandb itself): optional "prefix-", then 40+ of [A-Za-z0-9_].
_WANDB_KEY = re.compile(r"\b(?:[A-Za-z0-9]+-)?[A-Za-z0-9_]{40,}\b")
_NAME_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """True for names like `wandb_key`, `apiKey`, `HF_TOKEN`, `db-password` (not `reward_key`)."""
    lowered = name.lower()
    if lowered in _NOT_SECRET_NAMES:
        return False
    tokens = {token.lower() for token in _NAME_SPLIT.split(name) if token}
    return bool(tokens & _SECRET_TOKENS) or "apikey" in lowered.replace("_", "").replace("-", "")


def looks_like_wandb_key(value: str) -> bool:
    return _WANDB_KEY.search(value) is not None


def scrub_secrets(obj: Any, *, extra_values: Iterable[str] = ()) -> Any:
    """Return a copy of `obj` (dicts, lists, tuples, scalars) with secrets replaced by `REDACTED`."""
    known = [value for value in (*extra_values, os.environ.get("WANDB_API_KEY", "")) if value]
    return _scrub(obj, known)


def _scrub(obj: Any, known: list[str]) -> Any:
    if isinstance(obj, Mapping):
        return {
            key: (
                REDACTED
                if isinstance(key, str) and is_secret_name(key) and obj[key] not in (None, "")
                else _scrub(obj[key], known)
            )
            for key in obj
        }
    if isinstance(obj, (list, tuple)):
        # Also catch argv-style lists: ["--some-api-key", "<key>"] -> the value after a secret flag.
        out: list[Any] = []
        redact_next = False
        for item in obj:
            if redact_next and isinstance(item, str):
                out.append(REDACTED)
            else:
                out.append(_scrub(item, known))
            redact_next = (
                isinstance(item, str) and item.startswith("-") and is_secret_name(item.split("=")[0])
            )
        return out if isinstance(obj, list) else tuple(out)
    if isinstance(obj, str):
        return _scrub_string(obj, known)
    return obj


def _scrub_string(text: str, known: list[str]) -> str:
    for value in known:
        text = text.replace(value, REDACTED)
    # "--some-api-key=abc" inside a command line string
    if text.startswith("-") and "=" in text and is_secret_name(text.split("=", 1)[0]):
        text = text.split("=", 1)[0] + "=" + REDACTED
    return _WANDB_KEY.sub(REDACTED, text)

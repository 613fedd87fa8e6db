"""Evidence turns: where a failed trajectory left the gold path (privileged: it names gold products).

Per trajectory, at most three turns, in turn order: the first policy failure the model was shown,
the first turn that acted on a product that is not a gold product, and the last turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from shopsimrl.shop.failure_modes import observation_error

PRODUCT_ID = re.compile(r"\bP\d{6}\b")
EXCERPT_CHARS = 240


class EvidenceTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rollout_id: int | str
    turn: int  # 1-based assistant turn
    note: str
    excerpt: str  # the assistant text of that turn, cut to EXCERPT_CHARS


def evidence_turns(
    rollout_id: int | str, messages: Sequence[Mapping[str, Any]], gold_audit: Mapping[str, Any] | None
) -> list[EvidenceTurn]:
    gold_ids = set(((gold_audit or {}).get("gold") or {}).get("gold_product_ids") or [])
    notes: dict[int, tuple[str, str]] = {}
    turn = 0
    last_text = ""
    first_failure = first_off_path = False
    for message in messages:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "assistant":
            turn += 1
            last_text = content
            off_path = [pid for pid in PRODUCT_ID.findall(content) if pid not in gold_ids]
            if off_path and not first_off_path and gold_ids:
                first_off_path = True
                notes.setdefault(turn, (f"acted on non-gold product {off_path[0]}", content))
        elif role == "tool" and not first_failure and turn:
            kind = observation_error(content)
            if kind is not None:
                first_failure = True
                notes[turn] = (f"policy failure: {kind}", last_text)
    if turn:
        finish = (gold_audit or {}).get("finish", "unknown")
        notes.setdefault(turn, (f"last turn (episode finish: {finish})", last_text))
    return [
        EvidenceTurn(rollout_id=rollout_id, turn=number, note=note, excerpt=text[:EXCERPT_CHARS])
        for number, (note, text) in sorted(notes.items())
    ]

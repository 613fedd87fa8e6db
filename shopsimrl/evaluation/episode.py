"""One planned episode, and the seeds that make it reproducible (light: no model, no agent loop)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SEED_BOUND = 2**31  # SGLang and torch both take a non-negative 31-bit seed without complaint


def derived_seed(seed: int, purpose: str, task_id: str, replicate: int) -> int:
    """A 31-bit seed that depends only on (plan seed, purpose, task, replicate)."""
    digest = hashlib.blake2b(f"{seed}\x1f{purpose}\x1f{task_id}\x1f{replicate}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _SEED_BOUND


@dataclass(frozen=True)
class PlannedEpisode:
    """One episode of a pre-registered plan. `labels` identify it in its record; `key` is their values."""

    labels: Mapping[str, Any]  # e.g. {"pair_id": ..., "arm": "a", "replicate": 0} or {"episode_id": ...}
    key_fields: tuple[str, ...]  # the labels that identify the episode, e.g. ("pair_id", "arm")
    task_id: str
    mask: tuple[str, ...]  # the skill chunks / interventions the episode's prompt carries
    sampling_seed: int
    env_seed: int

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(str(self.labels[name]) for name in self.key_fields)

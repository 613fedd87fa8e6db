"""The pre-registered design: which masks each (task, replicate) pair runs, with which seeds.

Written to `mask_assignments.json` before the first evaluation and never changed afterwards
(the manifest hashes it), so an estimate can only use the assignment fixed in advance.

A *pair* is two episodes of one validation task with the same sampling seed and environment seed
(common random numbers: SGLang's per-request `sampling_seed`, a seeded torch generator locally).
Arm `a` runs the current skillbank plus a random subset of the K candidate interventions; arm `b`
runs the complement of that subset (pairing `complement`, the default) or no candidate at all
(pairing `bare`). The regressor of candidate k in pair p is `d_pk = m_a,pk - m_b,pk`: +1/-1 with
`complement`, 1/0 with `bare`; the paired delta `y_a - y_b` is regressed on the d's (estimate.py).

Balance: for every candidate, each task's replicates are split as evenly as possible between on
and off in arm `a` (so no task's difficulty leans on a candidate), an odd replicate is balanced
across tasks, and the candidates are drawn independently of each other (one random stream each).

Order: `task` lists every replicate of the first task, then of the second, ... (the fixed gate);
`replicate` lists every task's first replicate, then every task's second, ... (the sequential gate,
sequential.py: each interim look analyses a prefix of this order, so an early look sees every
task). `pairs` keeps only the first N pairs of the order (a budget that is not a whole number of
replicates: the last replicate then runs on the first tasks only, and the balance above holds for
whole replicates).

    design = build_design(task_ids, candidates=["i1", "i2"], replicates=3, pairing="complement", seed=0)
    design = build_design(task_ids, candidates=["i1"], replicates=3, pairing="complement", seed=0,
                          order="replicate", pairs=500)
    design.to_json(); Design.from_json(raw)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from shopsimrl.evaluation.episode import derived_seed
from shopsimrl.gate.config import Pairing

MASK_ASSIGNMENTS_SCHEMA_VERSION = 1
ARMS: tuple[str, str] = ("a", "b")
_MASK_SALT = 0x6A7E_0001  # separates the mask streams from every other use of the design seed


@dataclass(frozen=True)
class Pair:
    pair_id: str
    task_id: str
    replicate: int
    sampling_seed: int
    env_seed: int
    mask_a: tuple[str, ...]  # intervention ids switched on in arm a, in candidate-pool order
    mask_b: tuple[str, ...]

    def mask(self, arm: str) -> tuple[str, ...]:
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; expected one of {ARMS}")
        return self.mask_a if arm == "a" else self.mask_b


@dataclass(frozen=True)
class Design:
    candidates: tuple[str, ...]
    pairing: Pairing
    seed: int
    pairs: tuple[Pair, ...]

    @property
    def planned(self) -> int:
        return 2 * len(self.pairs)

    def evaluation_keys(self) -> list[tuple[str, str]]:
        """(pair_id, arm) of every planned evaluation, in design order."""
        return [(pair.pair_id, arm) for pair in self.pairs for arm in ARMS]

    def indicators(self, pair: Pair) -> list[int]:
        """d_k = m_a,k - m_b,k for every candidate k, in candidate order."""
        on_a, on_b = set(pair.mask_a), set(pair.mask_b)
        return [int(c in on_a) - int(c in on_b) for c in self.candidates]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": MASK_ASSIGNMENTS_SCHEMA_VERSION,
            "kind": "gate_mask_assignments",
            "pairing": self.pairing.value,
            "seed": self.seed,
            "candidates": list(self.candidates),
            "arms": list(ARMS),
            "pairs": [
                {
                    "pair_id": p.pair_id,
                    "task_id": p.task_id,
                    "replicate": p.replicate,
                    "sampling_seed": p.sampling_seed,
                    "env_seed": p.env_seed,
                    "masks": {"a": list(p.mask_a), "b": list(p.mask_b)},
                }
                for p in self.pairs
            ],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Design:
        if raw.get("schema_version") != MASK_ASSIGNMENTS_SCHEMA_VERSION:
            raise ValueError(f"mask assignments: unsupported schema_version {raw.get('schema_version')!r}")
        pairs = tuple(
            Pair(
                pair_id=p["pair_id"],
                task_id=p["task_id"],
                replicate=int(p["replicate"]),
                sampling_seed=int(p["sampling_seed"]),
                env_seed=int(p["env_seed"]),
                mask_a=tuple(p["masks"]["a"]),
                mask_b=tuple(p["masks"]["b"]),
            )
            for p in raw["pairs"]
        )
        return cls(tuple(raw["candidates"]), Pairing(raw["pairing"]), int(raw["seed"]), pairs)


def build_design(
    task_ids: Sequence[str],
    *,
    candidates: Sequence[str],
    replicates: int,
    pairing: Pairing | str,
    seed: int,
    order: Literal["task", "replicate"] = "task",
    pairs: int | None = None,
) -> Design:
    """The design for `task_ids` x `replicates` pairs (the first `pairs` of them in `order`); a pure function
    of its arguments."""
    if replicates < 1:
        raise ValueError(f"replicates={replicates}: at least 1")
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task_ids contains duplicates")
    if order not in ("task", "replicate"):
        raise ValueError(f"order={order!r}: 'task' or 'replicate'")
    if pairs is not None and not 0 < pairs <= len(task_ids) * replicates:
        raise ValueError(f"pairs={pairs}: between 1 and tasks x replicates = {len(task_ids) * replicates}")
    pairing = Pairing(pairing)
    on_a = np.stack([_balanced_column(len(task_ids), replicates, seed, k) for k in range(len(candidates))], axis=-1) \
        if candidates else np.zeros((len(task_ids), replicates, 0), dtype=np.int8)
    cells = [(t, r) for t in range(len(task_ids)) for r in range(replicates)]
    if order == "replicate":
        cells.sort(key=lambda cell: (cell[1], cell[0]))
    listed = []
    for t, r in cells[:pairs]:
        task_id, row = task_ids[t], on_a[t, r]
        mask_a = tuple(c for c, on in zip(candidates, row, strict=True) if on)
        if pairing is Pairing.COMPLEMENT:
            mask_b = tuple(c for c, on in zip(candidates, row, strict=True) if not on)
        else:
            mask_b = ()
        listed.append(
            Pair(
                pair_id=f"{task_id}/r{r}",
                task_id=task_id,
                replicate=r,
                sampling_seed=derived_seed(seed, "sampling", task_id, r),
                env_seed=derived_seed(seed, "environment", task_id, r),
                mask_a=mask_a,
                mask_b=mask_b,
            )
        )
    return Design(tuple(candidates), pairing, seed, tuple(listed))


def _balanced_column(num_tasks: int, replicates: int, seed: int, k: int) -> np.ndarray:
    """0/1 of candidate k in arm a, shape (tasks, replicates): even within each task, odd bits across tasks."""
    rng = np.random.Generator(np.random.PCG64([seed, _MASK_SALT, k]))
    half = replicates // 2
    column = np.zeros((num_tasks, replicates), dtype=np.int8)
    column[:, :half] = 1
    if replicates % 2:
        extra = np.zeros(num_tasks, dtype=np.int8)
        extra[: (num_tasks + k % 2) // 2] = 1  # alternate which side gets the odd task between candidates
        column[:, -1] = rng.permutation(extra)
    for t in range(num_tasks):
        column[t] = rng.permutation(column[t])
    return column

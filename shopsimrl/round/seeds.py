"""Every seed of a round, derived in this one place from (the run's base seed, the round's index).

    seeds = round_seeds(base_seed=0, index=1)   # RoundSeeds(rollout=..., curriculum=..., gate=...)

- `rollout`: the data seed: task order and sampling (local `train.driver.rollout_seed`, slime
  `--rollout-seed` through the launcher's ROLLOUT_SEED);
- `curriculum`: the skill curriculum's `shopsim.round_seed` (which groups see which chunks);
- `gate`: the validation gate's `design.seed` (masks and per-pair sampling seeds).

Each is the first 31 bits of SHA-256("shopsimrl/round-seed/<purpose>/<base>/<index>"): a pure
function, so re-running a round reproduces its seeds, while two rounds (or two purposes) draw
unrelated streams instead of round N+1 replaying round N's curriculum and task order. The round's
index is the number at the end of its group (`...-round-002` -> 2). The round writes them to its
manifest (runs/<group>/round_manifest.json); a stage section may not set them (config.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass

_PURPOSES = ("rollout", "curriculum", "gate")


@dataclass(frozen=True)
class RoundSeeds:
    rollout: int
    curriculum: int
    gate: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def derive_seed(purpose: str, base_seed: int, index: int) -> int:
    if purpose not in _PURPOSES:
        raise ValueError(f"unknown seed purpose {purpose!r}; one of {list(_PURPOSES)}")
    digest = hashlib.sha256(f"shopsimrl/round-seed/{purpose}/{base_seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF  # non-negative and within every seed API's range


def round_seeds(base_seed: int, index: int) -> RoundSeeds:
    return RoundSeeds(*(derive_seed(purpose, base_seed, index) for purpose in _PURPOSES))


def round_index(group: str) -> int:
    """`qwen35-4b-round-012` -> 12."""
    match = re.fullmatch(r".*-round-([0-9]+)", group)
    if match is None:
        raise ValueError(f"round group {group!r} does not end in -round-NNN")
    return int(match.group(1))

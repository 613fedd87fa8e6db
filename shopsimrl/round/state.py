"""Which stages of a round have finished: `runs/<group>/round_state.json`, replaced atomically.

    state = RoundState.load(round_dir, group)
    state.start("train"); state.save()
    state.finish("train", outputs={"metrics": "runs/g/train/metrics.jsonl"}, extra={...}); state.save()

A stage is recorded `running` (with its attempt count) before it starts and `finished` (with the
paths of its outputs) after it returns, each time in one atomic write. A killed round therefore
finds every finished stage here, and its re-run skips them; `check_outputs` refuses a finished
stage whose outputs have vanished, naming the path, instead of silently re-running it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl.errors import StopsTheCommand
from shopsimrl.storage import atomic_write_json
from shopsimrl.storage.layout import ROUND_STATE_FILE

STATE_SCHEMA_VERSION = 1
STAGES = ("train", "analysis", "gate")
RUNNING, FINISHED = "running", "finished"


class RoundError(StopsTheCommand, RuntimeError):
    """The round cannot go on (a vanished output, a bad state file, no checkpoint); names the path."""


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class RoundState:
    path: Path
    group: str
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, round_dir: Path, group: str) -> RoundState:
        path = round_dir / ROUND_STATE_FILE
        if not path.exists():
            return cls(path, group)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            stages = data["stages"]
            recorded = data["group"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RoundError(f"{path}: unreadable round state ({exc}); move it aside to start the round again") from None
        if recorded != group:
            raise RoundError(f"{path}: records round {recorded!r}, not {group!r}")
        unknown = sorted(set(stages) - set(STAGES))
        if unknown:
            raise RoundError(f"{path}: unknown stage(s) {unknown}")
        return cls(path, group, stages)

    def finished(self, stage: str) -> bool:
        return self.stages.get(stage, {}).get("status") == FINISHED

    def record(self, stage: str) -> dict[str, Any]:
        return self.stages.get(stage, {})

    def start(self, stage: str) -> None:
        entry = self.stages.setdefault(stage, {"attempts": 0})
        entry.update(status=RUNNING, attempts=entry.get("attempts", 0) + 1, started_at=utc_now())

    def finish(self, stage: str, *, outputs: dict[str, str], extra: dict[str, Any] | None = None) -> None:
        """Record the stage finished with those of `outputs` that exist (`check_outputs` guards them):
        an output the stage may legitimately not write (train/metrics.jsonl of a training that logged
        no rollout) must not make every re-run refuse the round."""
        entry = self.stages[stage]
        present = {name: path for name, path in outputs.items() if Path(path).exists()}
        entry.update(status=FINISHED, finished_at=utc_now(), outputs=present, **(extra or {}))

    def save(self) -> None:
        atomic_write_json(
            self.path, {"schema_version": STATE_SCHEMA_VERSION, "group": self.group, "stages": self.stages}
        )

    def check_outputs(self) -> None:
        """Every output of every finished stage is still there (else RoundError naming the path)."""
        for stage in STAGES:
            if not self.finished(stage):
                continue
            for path in self.record(stage).get("outputs", {}).values():
                if not Path(path).exists():
                    raise RoundError(
                        f"{path}: output of the finished {stage} stage is missing (recorded in {self.path}); "
                        "restore it, or move the round's directory aside to run the round again"
                    )

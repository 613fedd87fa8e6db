"""The analysis CSVs: `episodes.csv` streamed row by row, and the aggregate tables from a `Tally`.

Every file appears atomically: rows go to a hidden temp file in the same directory, which is
fsynced and renamed over the target when the analysis ends (a killed run leaves the old file).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from shopsimrl.behavior.episode import EpisodeFacts
from shopsimrl.behavior.failure_mode import Ending
from shopsimrl.behavior.run_source import SlimeStep
from shopsimrl.behavior.tally import ALL_ARMS, Tally
from shopsimrl.storage import atomic_open, atomic_write_text

EPISODES_CSV = "episodes.csv"
BY_ARM_CSV = "by_arm.csv"
BY_STEP_CSV = "by_step.csv"
FAILURE_MODES_CSV = "failure_modes.csv"
TOOL_CALLS_CSV = "tool_calls.csv"

EPISODE_COLUMNS = [
    "round", "rollout_step", "group_index", "rollout_id", "task_id", "arm", "segments", "model_turns",
    "generated_tokens", "response_tokens", "truncated_samples", "tool_calls", "invalid_calls", "ending",
    "failure_mode", "scorable", "reward", "success",
]  # fmt: skip


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _mix(counts: dict[str, int]) -> str:
    """`name:count;...`, sorted by name: one CSV cell, stable across runs."""
    return ";".join(f"{k}:{counts[k]}" for k in sorted(counts))


class StreamingCsv:
    """A CSV written row by row through `atomic_open`: renamed into place on a clean close only."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self._file = atomic_open(path)
        self._writer = csv.writer(self._file.__enter__())
        self._writer.writerow(columns)
        self.rows = 0

    def write(self, row: Sequence[Any]) -> None:
        self._writer.writerow([_cell(v) for v in row])
        self.rows += 1

    def __enter__(self) -> StreamingCsv:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._file.__exit__(exc_type, exc, tb)


def episode_row(e: EpisodeFacts) -> list[Any]:
    return [e.round, e.rollout_step, e.group_index, e.rollout_id, e.task_id, e.arm, e.segments,
            e.model_turns, e.generated_tokens, e.response_tokens, e.truncated_samples, _mix(e.tool_calls),
            e.invalid_call_count, e.ending.value, e.failure_mode, int(e.scorable), e.reward,
            "" if e.success is None else int(e.success)]  # fmt: skip


def _write_csv(path: Path, columns: Sequence[str], rows: list[list[Any]]) -> Path:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows([[_cell(v) for v in row] for row in rows])
    return atomic_write_text(path, buffer.getvalue())


def write_aggregate_tables(out_dir: Path, tally: Tally, slime: dict[str, dict[int, SlimeStep]]) -> list[Path]:
    arm_rows, mode_rows, tool_rows = [], [], []
    for round_label in tally.rounds:
        for arm in tally.arms(round_label):
            c = tally.by_arm[(round_label, arm)]
            arm_rows.append([
                round_label, arm, c.episodes, c.samples, c.samples_per_episode, c.split_episodes, c.scorable,
                c.success_rate, c.reward_mean, c.turns_per_episode, c.turns_median,
                c.generated_tokens_per_episode, c.generated_tokens_per_sample, c.invalid_calls_per_episode,
                c.ending_rate(Ending.TURN_LIMIT), c.sample_truncated_ratio,
            ])  # fmt: skip
            for mode in sorted(c.failure_modes):
                mode_rows.append([round_label, arm, mode, c.failure_modes[mode]])
            if arm != ALL_ARMS:
                for tool in sorted(c.tools):
                    tool_rows.append([round_label, arm, tool, "valid_name", c.tools[tool]])
                for kind in sorted(c.invalid_kinds):
                    tool_rows.append([round_label, arm, kind, "invalid", c.invalid_kinds[kind]])
    step_rows = []
    for (round_label, step), c in sorted(
        tally.by_step.items(), key=lambda kv: (tally.rounds.index(kv[0][0]), kv[0][1])
    ):
        s = slime.get(round_label, {}).get(step, SlimeStep(None, None))
        step_rows.append([
            round_label, step, c.episodes, c.samples, c.turns_per_episode, c.generated_tokens_per_episode,
            c.generated_tokens_per_sample, s.response_len_mean, c.ending_rate(Ending.TURN_LIMIT),
            c.sample_truncated_ratio, s.truncated_ratio, c.success_rate, c.reward_mean,
        ])  # fmt: skip
    return [
        _write_csv(
            out_dir / BY_ARM_CSV,
            [
                "round",
                "arm",
                "episodes",
                "samples",
                "samples_per_episode",
                "split_episodes",
                "scorable",
                "success_rate",
                "reward_mean",
                "model_turns_mean",
                "model_turns_median",
                "generated_tokens_per_episode",
                "generated_tokens_per_sample",
                "invalid_calls_per_episode",
                "turn_limit_rate",
                "sample_truncated_ratio",
            ],
            arm_rows,
        ),  # fmt: skip
        _write_csv(
            out_dir / BY_STEP_CSV,
            [
                "round",
                "rollout_step",
                "episodes",
                "samples",
                "model_turns_per_episode",
                "generated_tokens_per_episode",
                "generated_tokens_per_sample_all",
                "slime_response_len_mean_accepted",
                "episode_turn_limit_rate",
                "sample_truncated_ratio_all",
                "slime_truncated_ratio_accepted",
                "success_rate",
                "reward_mean",
            ],
            step_rows,
        ),  # fmt: skip
        _write_csv(out_dir / FAILURE_MODES_CSV, ["round", "arm", "failure_mode", "episodes"], mode_rows),
        _write_csv(out_dir / TOOL_CALLS_CSV, ["round", "arm", "name", "kind", "calls"], tool_rows),
    ]

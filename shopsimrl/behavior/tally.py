"""Streaming aggregates of episodes: counts and sums only, so memory does not grow with episodes.

A `Cell` aggregates any set of episodes; `Tally` keeps one cell per (round, arm), per (round, rollout
step) and per round. Distributions are kept as histograms over bounded values (turns; generated
tokens in buckets of `TOKEN_BUCKET`), never as lists of episodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from shopsimrl.behavior.episode import EpisodeFacts
from shopsimrl.behavior.failure_mode import Ending

TOKEN_BUCKET = 16  # tokens per bucket of the generated-token histogram
ALL_ARMS = "all"


@dataclass
class Cell:
    episodes: int = 0
    split_episodes: int = 0  # episodes of more than one segment
    samples: int = 0  # segments: what slime counts
    truncated_samples: int = 0
    scorable: int = 0
    successes: int = 0
    reward_sum: float = 0.0
    turn_episodes: int = 0  # episodes whose trace carries messages (turn counts known)
    turns_sum: int = 0
    generated_tokens_sum: int = 0
    response_tokens_sum: int = 0
    invalid_calls: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    failure_modes: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    invalid_kinds: Counter[str] = field(default_factory=Counter)
    turns_hist: Counter[int] = field(default_factory=Counter)
    tokens_hist: Counter[int] = field(default_factory=Counter)  # bucket index -> episodes

    def add(self, e: EpisodeFacts) -> None:
        self.episodes += 1
        self.split_episodes += e.segments > 1
        self.samples += e.segments
        self.truncated_samples += e.truncated_samples
        if e.scorable:
            self.scorable += 1
            self.successes += bool(e.success)
            self.reward_sum += e.reward or 0.0
        if e.model_turns is not None:
            self.turn_episodes += 1
            self.turns_sum += e.model_turns
            self.turns_hist[e.model_turns] += 1
        self.generated_tokens_sum += e.generated_tokens
        self.response_tokens_sum += e.response_tokens
        self.tokens_hist[e.generated_tokens // TOKEN_BUCKET] += 1
        self.endings[e.ending.value] += 1
        self.failure_modes[e.failure_mode] += 1
        self.tools.update(e.tool_calls)
        self.invalid_kinds.update(e.invalid_calls)
        self.invalid_calls += e.invalid_call_count

    # ---- derived numbers (None where the denominator is 0: never a made-up 0) ----
    @staticmethod
    def _ratio(numerator: float, denominator: float) -> float | None:
        return numerator / denominator if denominator else None

    @property
    def success_rate(self) -> float | None:
        return self._ratio(self.successes, self.scorable)

    @property
    def reward_mean(self) -> float | None:
        return self._ratio(self.reward_sum, self.scorable)

    @property
    def turns_per_episode(self) -> float | None:
        return self._ratio(self.turns_sum, self.turn_episodes)

    @property
    def generated_tokens_per_episode(self) -> float | None:
        return self._ratio(self.generated_tokens_sum, self.episodes)

    @property
    def generated_tokens_per_sample(self) -> float | None:
        """slime's `rollout/response_len/mean` definition, over every completed Sample."""
        return self._ratio(self.generated_tokens_sum, self.samples)

    @property
    def samples_per_episode(self) -> float | None:
        return self._ratio(self.samples, self.episodes)

    @property
    def sample_truncated_ratio(self) -> float | None:
        """slime's `rollout/truncated_ratio` definition, over every completed Sample."""
        return self._ratio(self.truncated_samples, self.samples)

    @property
    def invalid_calls_per_episode(self) -> float | None:
        return self._ratio(self.invalid_calls, self.episodes)

    def ending_rate(self, ending: Ending) -> float | None:
        return self._ratio(self.endings[ending.value], self.episodes)

    @property
    def turns_median(self) -> int | None:
        return _hist_median(self.turns_hist)

    @property
    def generated_tokens_median_bucket(self) -> int | None:
        """Lower edge of the bucket holding the median generated-token count."""
        bucket = _hist_median(self.tokens_hist)
        return None if bucket is None else bucket * TOKEN_BUCKET


def _hist_median(hist: Counter[int]) -> int | None:
    total = sum(hist.values())
    if not total:
        return None
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if 2 * seen >= total:
            return value
    raise AssertionError("unreachable: the histogram total was counted above")


@dataclass
class Tally:
    by_arm: dict[tuple[str, str], Cell] = field(default_factory=dict)  # (round, arm); arm "all" too
    by_step: dict[tuple[str, int], Cell] = field(default_factory=dict)  # (round, rollout step)
    rounds: list[str] = field(default_factory=list)  # in the order first seen
    groups: int = 0
    retry_groups_skipped: int = 0

    def add(self, e: EpisodeFacts) -> None:
        if e.round not in self.rounds:
            self.rounds.append(e.round)
        for key in ((e.round, e.arm), (e.round, ALL_ARMS)):
            cell = self.by_arm.get(key)
            if cell is None:
                cell = self.by_arm[key] = Cell()
            cell.add(e)
        step_key = (e.round, e.rollout_step)
        step = self.by_step.get(step_key)
        if step is None:
            step = self.by_step[step_key] = Cell()
        step.add(e)

    def arms(self, round_label: str) -> list[str]:
        """The arms seen in a round, in a fixed order, `all` last."""
        seen = {arm for (r, arm) in self.by_arm if r == round_label and arm != ALL_ARMS}
        return sorted(seen) + [ALL_ARMS]

"""Behaviour analysis from trajectories: episodes (not slime Samples) counted from the local traces."""

from shopsimrl.behavior.analysis import (
    DEFAULT_OUT,
    AnalysisResult,
    analyze_runs,
    tally_episodes,
    tally_traces,
)
from shopsimrl.behavior.episode import EpisodeFacts, episode_facts, group_episodes
from shopsimrl.behavior.failure_mode import (
    EPISODE_MODES,
    Ending,
    FailureMode,
    Outcome,
    classify_ending,
    classify_failure,
)
from shopsimrl.behavior.run_source import ProblemLog, RunSource, resolve_run
from shopsimrl.behavior.tally import ALL_ARMS, Cell, Tally

__all__ = [
    "ALL_ARMS",
    "EPISODE_MODES",
    "DEFAULT_OUT",
    "AnalysisResult",
    "Cell",
    "Ending",
    "EpisodeFacts",
    "FailureMode",
    "Outcome",
    "ProblemLog",
    "RunSource",
    "Tally",
    "analyze_runs",
    "classify_ending",
    "classify_failure",
    "episode_facts",
    "group_episodes",
    "resolve_run",
    "tally_episodes",
    "tally_traces",
]

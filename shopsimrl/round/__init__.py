"""A whole round, end to end: train -> analyze -> gate -> the next round's inputs and a report.

    from shopsimrl.round import load_round_config, run_round
    result = run_round(load_round_config("configs/local/demo_round.yaml"), settings=WandbSettings.from_env())

CLI: `shopsimrl training round CONFIG` (shopsimrl/round/commands.py); docs/operations.md has the runbook.
`boundary.py`: held-out evaluation at every round boundary of a chain (the config's `boundary_eval:`).
"""

from shopsimrl.round.config import RoundConfig, load_round_config, next_group, round_config_from_mapping
from shopsimrl.round.next_round import NextRound, write_next_round
from shopsimrl.round.report import write_round_report
from shopsimrl.round.runner import RoundResult, run_round
from shopsimrl.round.state import RoundError, RoundState

__all__ = [
    "NextRound",
    "RoundConfig",
    "RoundError",
    "RoundResult",
    "RoundState",
    "load_round_config",
    "next_group",
    "round_config_from_mapping",
    "run_round",
    "write_next_round",
    "write_round_report",
]

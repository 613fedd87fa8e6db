"""cli_errors: the one mapping from library errors to a command line's message and exit code."""

from __future__ import annotations

import signal
import sys

import click
import pytest
from click.testing import CliRunner

from shopsimrl.cli_errors import cli_errors
from shopsimrl.errors import ConfigError, StageIncomplete, StageInterrupted
from shopsimrl.evaluation.runner import RunnerAborted
from shopsimrl.gate.guards import GateLocked
from shopsimrl.models.checkpoint import CheckpointError


def _invoke(error: BaseException, **options: object) -> tuple[int, str, str]:
    @click.command()
    def command() -> None:
        with cli_errors("gate", **options):  # type: ignore[arg-type]
            raise error

    result = CliRunner().invoke(command, [], prog_name="shopsimrl")
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["shopsimrl", "training", "online-gate", "g.yaml"])


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ConfigError("g.yaml", ["tasks: must be > 0"]), str(ConfigError("g.yaml", ["tasks: must be > 0"]))),
        (GateLocked("runs/r/gate: locked by pid 7"), "runs/r/gate: locked by pid 7"),
        (CheckpointError("ckpt: checkpoint directory not found"), "ckpt: checkpoint directory not found"),
        (FileNotFoundError(2, "No such file or directory", "runs/r/analysis/candidate_pool.json"),
         "runs/r/analysis/candidate_pool.json: not found"),
    ],
)
def test_input_errors_are_their_own_line(error: BaseException, message: str) -> None:
    assert _invoke(error) == (1, "", f"Error: {message}\n")


def test_runner_aborted_names_the_stage() -> None:
    assert _invoke(RunnerAborted("5 technical failures in a row")) == (
        1, "", "Error: gate incomplete: 5 technical failures in a row\n")  # fmt: skip
    assert _invoke(RunnerAborted("outage"), aborted_hint="; re-run the same command to resume")[2] == (
        "Error: gate incomplete: outage; re-run the same command to resume\n")  # fmt: skip


def test_incomplete_stage_prints_what_it_finished_then_the_retry() -> None:
    seen: list[object] = []
    code, out, err = _invoke(StageIncomplete("gate", "3 of 40 evaluations unscorable", result="counts"),
                             prefix="round: ", on_incomplete=lambda exc: seen.append(exc.result))  # fmt: skip
    assert seen == ["counts"]
    assert (code, err) == (1, "Error: round: gate incomplete: 3 of 40 evaluations unscorable; "
                              "retry: shopsimrl training online-gate g.yaml\n")  # fmt: skip


def test_interrupted_stage_exits_128_plus_signal_with_the_resume_line() -> None:
    code, out, err = _invoke(StageInterrupted("gate", signal.SIGTERM, "12/40 evaluations on disk"))
    assert code == 128 + signal.SIGTERM
    assert err == f"{StageInterrupted('gate', signal.SIGTERM, '12/40 evaluations on disk')}; " \
                  "resume: shopsimrl training online-gate g.yaml\n"


def test_a_bug_keeps_its_traceback() -> None:
    code, _, _ = _invoke(KeyError("x"))
    assert code == 1  # CliRunner caught the exception: not a one-line message
    code, _, err = _invoke(FileNotFoundError("no filename"))
    assert (code, err) == (1, "")

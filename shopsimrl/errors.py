"""Error types shared by every stage.

The split between policy failures and technical failures is the project's error taxonomy
(docs/error_taxonomy.md): a policy failure is an observation the model sees and is scored; a
technical failure makes the trajectory unscorable and is never recorded as reward 0.
"""

from __future__ import annotations

import shlex
import signal
import sys
from enum import StrEnum
from pathlib import Path


class TechnicalErrorKind(StrEnum):
    """What broke, when it was not the policy's fault."""

    ENVIRONMENT = "environment"  # the shop raised an exception it should not have
    PARSER = "parser"  # our tool-call parser crashed (malformed model text is NOT this)
    MODEL_SERVICE = "model_service"  # HTTP error, timeout, connection loss, abort of the model server
    INTERNAL = "internal"  # any other bug of ours inside the agent loop


class TechnicalError(Exception):
    """A failure that makes a trajectory unscorable. Carries a kind and a message."""

    def __init__(self, kind: TechnicalErrorKind | str, message: str):
        self.kind = TechnicalErrorKind(kind)
        self.message = message
        super().__init__(f"{self.kind.value}: {message}")

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


class ModelServiceError(TechnicalError):
    """The model server failed (HTTP status, timeout, connection loss, abort)."""

    def __init__(self, message: str):
        super().__init__(TechnicalErrorKind.MODEL_SERVICE, message)


class StopsTheCommand(Exception):  # noqa: N818 (a mixin of errors, not an error of its own)
    """Mixin of errors whose message already says what was wrong and where (a missing model, a locked
    directory, a vanished checkpoint): a command line prints the message as its one line and exits 1
    (shopsimrl/cli_errors.py), instead of a traceback, which would only hide it."""


class ConfigError(ValueError):
    """Invalid configuration; lists every problem found, each with where it was found."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration in {source} ({len(self.problems)} problem(s)):\n{lines}")


class TornRecordError(ValueError):
    """A JSONL file holds a line that is not valid JSON (a torn write or corruption)."""

    def __init__(self, path: str, line_number: int, reason: str):
        self.path = path
        self.line_number = line_number
        self.reason = reason
        super().__init__(f"{path}:{line_number}: unreadable JSONL record ({reason})")


class RecordFormatError(ValueError):
    """A file of the audit record cannot be read by this version (bad JSON, unknown schema_version)."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class StorageError(OSError):
    """Writing a file failed for a reason of the machine, not of our code: the path and the cause.

    `cause` is short and fixed for the common faults ("disk full", "read-only file system",
    "permission denied"), so an operator reads one line: "cannot write runs/x/metrics.jsonl: disk full".
    """

    def __init__(self, path: str, cause: str, errno: int | None = None):
        super().__init__(errno, cause)
        self.path = path
        self.cause = cause

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.cause}"


class StartupError(ValueError):
    """A run cannot start; found before any expensive work (model load, warm start). Lists every problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = f"cannot start the run: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            message = f"cannot start the run ({len(self.problems)} problems):\n{lines}"
        super().__init__(message)


class StageIncomplete(RuntimeError):
    """A stage ran to its end, wrote its outputs, but some of its work failed; a re-run retries that part.

    `problem` is one line (what failed, how much, the first cause). The command line adds the retry
    command; the round runner lets it through, so the stage stays unfinished in round_state.json.
    """

    def __init__(self, stage: str, problem: str, result: object = None):
        self.stage = stage
        self.problem = problem
        self.result = result  # the stage's result object (its counts and paths), for callers that want it
        super().__init__(f"{stage} incomplete: {problem}")


class RunnerAborted(RuntimeError):
    """Too many technical failures in a row: the stage stops incomplete and can be resumed."""


class RunnerStopped(Exception):
    """SIGTERM or SIGINT arrived while episodes ran; every finished record is on disk."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class StageInterrupted(SystemExit):
    """A signal stopped a stage; what it had finished is on disk and a re-run resumes from there.

    A SystemExit (code 128 + signal), so whatever is not prepared for it still exits as a killed
    process would; the command lines print `str(exc)` (one line) and the resume command instead of a
    traceback.
    """

    def __init__(self, stage: str, signum: int, where: str):
        super().__init__(128 + signum)
        self.stage = stage
        self.signum = signum
        self.where = where
        self.message = f"{stage} stopped by {signal.Signals(signum).name}: {where}"

    def __str__(self) -> str:
        return self.message


def rerun_command(argv: list[str] | None = None) -> str:
    """The command line of this process as a user would type it again (for "retry:" / "resume:" hints)."""
    args = list(sys.argv if argv is None else argv)
    program = args[0] if args else "shopsimrl"
    if Path(program).name == "cli.py" and Path(program).parent.name == "shopsimrl":
        head = ["python", "-m", "shopsimrl.cli"]  # `python -m shopsimrl.cli`: argv[0] is the module's file
    elif program.endswith(".py"):
        head = ["python", program]
    else:
        head = [Path(program).name]
    return shlex.join([*head, *args[1:]])

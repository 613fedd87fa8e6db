"""One mapping from library errors to command-line messages, used by every stage's commands module.

    with cli_errors("gate"):
        result = run_gate(config, settings=settings, echo=click.echo)

- an error of the input or the machine (bad config, missing model, locked directory, full disk, a
  named file not found): its own one-line message, exit 1;
- `RunnerAborted` (too many technical failures in a row): "<stage> incomplete: ...", exit 1;
- `StageIncomplete` (the stage wrote its outputs, some work failed): the message and the command
  that retries it, exit 1;
- `StageInterrupted` (a signal): the message and the command that resumes, on stderr, exit 128+signal.

The library raises; only this module (the edge) turns errors into click's. It imports nothing of
ours but `errors`, so every commands module may use it whatever its layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from shopsimrl.errors import (
    ConfigError,
    RunnerAborted,
    StageIncomplete,
    StageInterrupted,
    StartupError,
    StopsTheCommand,
    StorageError,
    rerun_command,
)

# Errors whose message already says what was wrong and where: printed as they are. Errors of our
# other packages join by subclassing `StopsTheCommand` (so this module imports none of them).
_ONE_LINE = (ConfigError, StartupError, StorageError, StopsTheCommand)


@contextmanager
def cli_errors(
    stage: str,
    *,
    prefix: str = "",
    aborted_hint: str = "",
    on_incomplete: Callable[[StageIncomplete], None] | None = None,
) -> Iterator[None]:
    """Map the library's errors raised in the block to one line and an exit code (see the module doc).

    `prefix` starts the incomplete and interrupted lines ("round: " when the round runner ran the
    stage); `aborted_hint` ends the RunnerAborted line; `on_incomplete` prints what the stage did
    finish before the retry line.
    """
    try:
        yield
    except StageInterrupted as exc:  # one line, never the traceback of the work in flight
        click.echo(f"{prefix}{exc}; resume: {rerun_command()}", err=True)
        raise SystemExit(exc.code) from None
    except StageIncomplete as exc:  # the same command retries the failed part
        if on_incomplete is not None:
            on_incomplete(exc)
        raise click.ClickException(f"{prefix}{exc}; retry: {rerun_command()}") from None
    except FileNotFoundError as exc:
        if exc.filename is None:
            raise
        raise click.ClickException(f"{exc.filename}: not found") from None
    except RunnerAborted as exc:  # too many technical failures in a row: re-running resumes
        raise click.ClickException(f"{stage} incomplete: {exc}{aborted_hint}") from None
    except _ONE_LINE as exc:
        raise click.ClickException(str(exc)) from None

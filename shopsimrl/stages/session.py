"""A stage's run: its logger open, and on any exception the incomplete stage logged and a signal named.

    with stage_session("gate", gate_dir, settings=settings, config=cfg, where=coverage,
                       on_incomplete=log_coverage) as log:
        ...   # SIGTERM / Ctrl-C here: StageInterrupted("gate", signum, coverage()), exit 128 + signal

What finished is on disk (every record is appended as it ends), so a re-run resumes; the command line
prints `str(StageInterrupted)` and the resume command instead of a traceback (shopsimrl/cli_errors.py).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shopsimrl.errors import RunnerStopped, StageInterrupted
from shopsimrl.tracking import StageLogger, WandbSettings


def signal_of(exc: BaseException) -> int | None:
    """The signal that stopped the stage: SIGTERM/SIGINT during the episodes (RunnerStopped), or the
    StageLogger's SIGTERM (SystemExit 143) / Ctrl-C outside them; None for any other exception."""
    if isinstance(exc, RunnerStopped):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(exc, SystemExit) and not isinstance(exc, StageInterrupted) and exc.code == 128 + signal.SIGTERM:
        return signal.SIGTERM
    return None


@contextmanager
def stage_session(
    stage: str,
    directory: Path,
    *,
    settings: WandbSettings | None,
    config: Mapping[str, Any],
    where: Callable[[], str] | None,
    on_incomplete: Callable[[StageLogger], None] | None = None,
    tags: Sequence[str] = (),
) -> Iterator[StageLogger]:
    """Open the stage's `StageLogger` for the block. On any exception `on_incomplete(log)` records the
    incomplete stage (before the logger closes); a signal becomes `StageInterrupted(stage, signum,
    where())`, any other exception propagates as it is. `where=None`: a stage that cannot resume (the
    local training keeps no optimizer state) lets signals through as they are, since a "resume:" hint
    would be false."""
    with StageLogger(directory, stage=stage, settings=settings, config=config, tags=tags) as log:
        try:
            yield log
        except BaseException as exc:
            if on_incomplete is not None:
                on_incomplete(log)
            signum = signal_of(exc)
            if signum is None or where is None:
                raise
            raise StageInterrupted(stage, signum, where()) from None

"""StageLogger: the one offline-first logger of every stage (train, analysis, gate).

Order of every `log` call: the dict is appended to `<stage_dir>/metrics.jsonl` first, then handed to
W&B. W&B can fail (init or log); that is reported (a `WandbFailureWarning` and a counter in
`<stage_dir>/wandb_status.json`) and never changes the local files. With W&B off (`USE_WANDB=0` or
mode `disabled`) wandb is not even imported.

    settings = WandbSettings.from_env()
    with StageLogger("runs/round-000/train", stage="train", settings=settings, config=cfg) as log:
        log.log({"rollout/step": 1, "rollout/shopsim/reward_mean": 0.5})
        log.log_table("gate/chunk_contributions", ["intervention_id", "coefficient"], [["i1", 0.1]])
        log.log_artifact("shopsimrl-analysis", "analysis", [Path("analysis_summary.json")])
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Protocol

from shopsimrl.errors import ConfigError
from shopsimrl.storage import append_jsonl, atomic_write_json, writable_dir_problem
from shopsimrl.storage.layout import METRICS_FILE, STATUS_FILE
from shopsimrl.tracking.axes import merged_axes
from shopsimrl.tracking.secrets import scrub_secrets
from shopsimrl.tracking.settings import ENV_CACHE_DIR, ENV_DATA_DIR, WandbMode, WandbSettings

TABLES_DIR = "tables"
STATUS_SCHEMA_VERSION = 1
TABLE_SCHEMA_VERSION = 1
# Bookkeeping keys written beside the metrics in metrics.jsonl (W&B's own names for the same things).
STEP_KEY = "_step"
TIME_KEY = "_timestamp"


class WandbFailureWarning(UserWarning):
    """W&B failed (init, log, table, artifact or finish); local files are unaffected."""


class LoggerState(StrEnum):
    LOCAL_ONLY = "local_only"  # W&B off by settings
    RUNNING = "running"
    WANDB_FAILED = "wandb_failed"  # init failed: the stage goes on with local files only
    FINISHED = "finished"
    FAILED = "failed"  # finished with a non-zero exit code


class LogListener(Protocol):
    """Called after every `log` (the row is already on disk) and once when the logger finishes.

    The live alert rules (shopsimrl.metrics.live_alerts) are one; a listener must not raise for bad
    data: an exception propagates into the training loop like any other bug.
    """

    def on_log(self, logger: StageLogger, metrics: Mapping[str, Any]) -> None: ...

    def on_finish(self, logger: StageLogger) -> None: ...


class AlertDelivery(StrEnum):
    """What `StageLogger.alert` did with an alert (the local alert log records it)."""

    SENT = "sent"  # handed to W&B's run.alert (online run)
    OFFLINE = "offline"  # W&B offline: an alert replayed at sync time would be stale, so none is sent
    NO_RUN = "no_run"  # W&B off or failed: local log only
    FAILED = "failed"  # run.alert raised; counted in wandb_status.json


class StageLogger:
    """Offline-first metrics logger of one stage; use it as a context manager."""

    def __init__(
        self,
        stage_dir: str | os.PathLike[str],
        *,
        stage: str,
        settings: WandbSettings | None = None,
        config: Mapping[str, Any] | None = None,
        step_axes: Mapping[str, str] | None = None,
        name: str | None = None,
        tags: Sequence[str] = (),
        handle_sigterm: bool = True,
    ) -> None:
        self.stage_dir = Path(stage_dir)
        self.stage = stage
        self.settings = settings if settings is not None else WandbSettings.from_env()
        self.config = scrub_secrets(dict(config or {}))
        self.step_axes = merged_axes(step_axes)
        self.name = name
        self.tags = list(tags)
        self.handle_sigterm = handle_sigterm
        self.metrics_path = self.stage_dir / METRICS_FILE
        self.status_path = self.stage_dir / STATUS_FILE
        self.step = 0  # number of W&B history rows this logger asked for (= W&B `_step` of the next row)
        self.wandb_errors = 0
        self.last_error: str | None = None
        self.state = LoggerState.LOCAL_ONLY
        self.run: Any = None  # the wandb Run, or None
        self.artifacts: list[dict[str, Any]] = []
        self.exit_code: int | None = None
        self._started = False
        self._previous_sigterm: Any = None
        self.listeners: list[LogListener] = []

    # ---------------------------------------------------------------- lifecycle
    @property
    def wandb_enabled(self) -> bool:
        return self.settings.enabled and self.settings.mode is not WandbMode.DISABLED

    @property
    def run_id(self) -> str | None:
        return None if self.run is None else str(self.run.id)

    @property
    def wandb_run_dir(self) -> Path | None:
        return None if self.run is None else Path(self.run.settings.sync_dir)

    @property
    def wandb_run_file(self) -> Path | None:
        """The run's `run-<id>.wandb` transaction log, or None without W&B."""
        return None if self.run is None else Path(self.run.settings.sync_file)

    def start(self) -> StageLogger:
        if self._started:
            return self
        self._started = True
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        if self.wandb_enabled:
            prepare_wandb_dirs(self.settings)
            self._init_wandb()
        self._install_sigterm()
        self._write_status()
        return self

    def __enter__(self) -> StageLogger:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(exit_code=_exit_code_of(exc))

    def finish(self, exit_code: int = 0) -> None:
        """Finish the W&B run (flushes the offline file) and restore the SIGTERM handler. Idempotent."""
        if not self._started:
            return
        for listener in self.listeners:
            listener.on_finish(self)  # before run.finish, so a last alert still reaches W&B
        self._restore_sigterm()
        if self.run is not None and self.state is LoggerState.RUNNING:
            try:
                self.run.finish(exit_code=exit_code)
            except Exception as exc:  # a W&B failure must not mask the stage's own outcome
                self._record_failure("finish", exc)
        if self.state is LoggerState.RUNNING:
            self.state = LoggerState.FINISHED if exit_code == 0 else LoggerState.FAILED
        self.exit_code = exit_code
        self._write_status()
        self._started = False

    # ---------------------------------------------------------------- logging
    def log(self, metrics: Mapping[str, Any]) -> None:
        """Append `metrics` to metrics.jsonl, then log it to W&B as one history row."""
        _check_metrics(metrics)
        record = {STEP_KEY: self.step, TIME_KEY: time.time(), **metrics}
        append_jsonl(self.metrics_path, record)
        self.step += 1
        if self.run is not None and self.state is LoggerState.RUNNING:
            try:
                self.run.log(dict(metrics))
            except Exception as exc:
                self._record_failure("log", exc)
        for listener in self.listeners:
            listener.on_log(self, metrics)

    def add_listener(self, listener: LogListener) -> None:
        self.listeners.append(listener)

    def alert(self, title: str, text: str, level: str = "WARN") -> AlertDelivery:
        """W&B's own alert (`run.alert`) when the run is online; returns what was done with it."""
        if self.run is None or self.state is not LoggerState.RUNNING:
            return AlertDelivery.NO_RUN
        if self.settings.mode is not WandbMode.ONLINE:
            return AlertDelivery.OFFLINE
        try:
            # W&B limits titles to 64 characters and throttles repeats of one title (wait_duration).
            self.run.alert(title=title[:63], text=text, level=level)
        except Exception as exc:
            self._record_failure("alert", exc)
            return AlertDelivery.FAILED
        return AlertDelivery.SENT

    def log_table(self, key: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
        """Write the table to `<stage_dir>/tables/<key>.json`, then log it to W&B as a Table.

        Returns the local file. Rows longer or shorter than `columns` are a caller error (ValueError).
        """
        columns = [str(column) for column in columns]
        data = [list(row) for row in rows]
        for index, row in enumerate(data):
            if len(row) != len(columns):
                raise ValueError(
                    f"table {key!r}: row {index} has {len(row)} values for {len(columns)} columns"
                )
        local = self.stage_dir / TABLES_DIR / (_safe_name(key) + ".json")
        atomic_write_json(
            local,
            {
                "schema_version": TABLE_SCHEMA_VERSION,
                "key": key,
                "wandb_step": self.step,
                "columns": columns,
                "rows": data,
            },
        )
        self.step += 1  # a Table goes into its own W&B history row
        if self.run is not None and self.state is LoggerState.RUNNING:
            try:
                import wandb

                self.run.log({key: wandb.Table(columns=columns, data=data)})
            except Exception as exc:
                self._record_failure("log_table", exc)
        return local

    def log_artifact(
        self,
        name: str,
        artifact_type: str,
        paths: Iterable[str | os.PathLike[str]],
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[Path]:
        """Log the existing files/directories among `paths` as one W&B artifact.

        Missing paths are skipped (a stage logs the outputs it has); returns the included paths.
        Artifact bytes are staged under WANDB_DATA_DIR (next to WANDB_DIR), so they survive until sync.
        """
        included = [Path(path) for path in paths if Path(path).exists()]
        entry = {"name": name, "type": artifact_type, "paths": [str(p) for p in included], "logged": False}
        if self.run is not None and self.state is LoggerState.RUNNING and included:
            try:
                import wandb

                artifact = wandb.Artifact(
                    name, type=artifact_type, metadata=scrub_secrets(dict(metadata or {}))
                )
                for path in included:
                    if path.is_dir():
                        artifact.add_dir(str(path), name=path.name)
                    else:
                        artifact.add_file(str(path), name=path.name)
                self.run.log_artifact(artifact)
                entry["logged"] = True
            except Exception as exc:
                self._record_failure("log_artifact", exc)
        self.artifacts.append(entry)
        self._write_status()
        return included

    # ---------------------------------------------------------------- internals
    def _init_wandb(self) -> None:
        settings = self.settings
        try:
            import wandb

            self.run = wandb.init(
                project=settings.project,
                entity=settings.entity,
                group=settings.group,
                job_type=self.stage,
                name=self.name,
                tags=self.tags or None,
                config=self.config,
                dir=str(settings.dir),
                mode=settings.mode.value,
                reinit="create_new",
                settings=wandb.Settings(
                    x_transaction_log_flush_interval=settings.flush_interval_s,
                    # W&B silently cuts a Table at 10,000 rows; make it an error (the local copy is whole).
                    table_raise_on_max_row_limit_exceeded=True,
                ),
            )
        except Exception as exc:
            self.run = None
            self.state = LoggerState.WANDB_FAILED
            self._record_failure("init", exc)
            return
        self.state = LoggerState.RUNNING
        sync_dir = Path(self.run.settings.sync_dir).resolve()
        if not sync_dir.is_relative_to(settings.dir.resolve()):
            # wandb fell back somewhere else (its /tmp fallback): that run would be lost with the container.
            self.run.finish(exit_code=1)
            self.state = LoggerState.WANDB_FAILED
            raise ConfigError(
                "WANDB_DIR",
                [f"wandb put the run in {sync_dir}, outside WANDB_DIR {settings.dir}; refusing to log there"],
            )
        for axis in dict.fromkeys(self.step_axes.values()):
            self.run.define_metric(axis)
        for pattern, axis in self.step_axes.items():
            self.run.define_metric(pattern, step_metric=axis)

    def _record_failure(self, operation: str, exc: BaseException) -> None:
        self.wandb_errors += 1
        self.last_error = f"{operation}: {type(exc).__name__}: {exc}"
        warnings.warn(
            f"W&B {operation} failed for stage {self.stage!r} ({type(exc).__name__}: {exc}); "
            f"local files in {self.stage_dir} are unaffected",
            WandbFailureWarning,
            stacklevel=3,
        )
        self._write_status()

    def _write_status(self) -> None:
        atomic_write_json(
            self.status_path,
            {
                "schema_version": STATUS_SCHEMA_VERSION,
                "stage": self.stage,
                "state": self.state.value,
                "enabled": self.wandb_enabled,
                "mode": self.settings.mode.value,
                "project": self.settings.project,
                "group": self.settings.group,
                "entity": self.settings.entity,
                "wandb_dir": str(self.settings.dir),
                "run_id": self.run_id,
                "run_file": None if self.wandb_run_file is None else str(self.wandb_run_file),
                "rows_logged": self.step,
                "wandb_errors": self.wandb_errors,
                "last_error": self.last_error,
                "exit_code": self.exit_code,
                "artifacts": self.artifacts,
                "updated_at": time.time(),
            },
        )

    def _install_sigterm(self) -> None:
        # A SIGTERM (scheduler preemption, `docker stop`) would otherwise kill the process before wandb
        # flushes its buffer: raising SystemExit lets `__exit__` finish the run, so the rows survive.
        if not self.handle_sigterm or threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None


def wandb_dir_problems(settings: WandbSettings) -> list[str]:
    """Each of WANDB_DIR, WANDB_DATA_DIR and WANDB_CACHE_DIR that cannot be created or written, with the cause."""
    problems: list[str] = []
    for label, path in (
        ("WANDB_DIR", settings.dir),
        ("WANDB_DATA_DIR", settings.data_dir),
        ("WANDB_CACHE_DIR", settings.cache_dir),
    ):
        cause = writable_dir_problem(path)
        if cause:
            problems.append(f"{label} {path}: {cause}")
    return problems


def prepare_wandb_dirs(settings: WandbSettings) -> None:
    """Create WANDB_DIR and its data/cache dirs, refuse them if not writable, and point wandb at them.

    wandb itself only warns about an unwritable root and falls back to the system temp dir, where
    offline runs are lost with the container; we refuse instead. Artifact staging and the cache
    default to `$HOME`, which is usually not persistent: `WandbSettings` puts them under WANDB_DIR
    unless set explicitly, and this exports them for wandb (which reads them only from the environment).
    """
    problems = wandb_dir_problems(settings)
    if problems:
        raise ConfigError("W&B directories", problems)
    # wandb reads these two only from the environment (no Settings field); wandb-core inherits them.
    os.environ[ENV_DATA_DIR] = str(settings.data_dir)
    os.environ[ENV_CACHE_DIR] = str(settings.cache_dir)


def _raise_system_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _exit_code_of(exc: BaseException | None) -> int:
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 1


def _check_metrics(metrics: Mapping[str, Any]) -> None:
    if not isinstance(metrics, Mapping):
        raise TypeError(f"log() takes a mapping of metric name to value, got {type(metrics).__name__}")
    for key in metrics:
        if not isinstance(key, str) or not key:
            raise ValueError(f"metric names must be non-empty strings, got {key!r}")
        if key.startswith("_"):
            raise ValueError(f"metric name {key!r} starts with '_', which W&B reserves for its own keys")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe_name(key: str) -> str:
    return _UNSAFE.sub("__", key)

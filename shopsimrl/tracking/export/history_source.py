"""Where run histories come from: offline run files (no server) or the W&B public API.

Both give every row of the history, in order, as a stream: the offline transaction log read record
by record, or `Run.scan_history` (the full, paged iterator). The sampled `Run.history()` is never used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from shopsimrl.tracking.offline_reader import HistoryStream, find_run_files, read_run_info


class ExportError(ValueError):
    """The export cannot proceed (no runs for a group, inconsistent history, ...)."""


@dataclass
class RunRef:
    run_id: str
    group: str
    name: str
    job_type: str
    location: str  # run file path, or entity/project/id
    start_time: float | None
    state: str = "unknown"  # finished / failed / running (filled after the scan for offline runs)
    torn: str | None = None  # offline: where a torn tail stopped the read
    handle: Any = field(default=None, repr=False, compare=False)


class HistorySource(Protocol):
    kind: str
    location: str

    def runs_for_group(self, group: str) -> list[RunRef]: ...

    def scan(self, run: RunRef) -> Iterator[dict[str, Any]]: ...


class OfflineHistorySource:
    """Offline `run-*.wandb` files under one or more directories; runs selected by their run record's group."""

    kind = "offline"

    def __init__(self, dirs: list[str | os.PathLike[str]]) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.location = ", ".join(str(d) for d in self.dirs)
        self._index: list[RunRef] | None = None

    def _all_runs(self) -> list[RunRef]:
        if self._index is None:
            index = []
            for directory in self.dirs:
                if not directory.exists():
                    raise ExportError(f"offline directory {directory} does not exist")
                for path in find_run_files(directory):
                    info = read_run_info(path)
                    index.append(
                        RunRef(
                            run_id=info.run_id,
                            group=info.group,
                            name=info.name,
                            job_type=info.job_type,
                            location=str(path),
                            start_time=info.start_time,
                        )
                    )
            self._index = index
        return self._index

    def runs_for_group(self, group: str) -> list[RunRef]:
        runs = [run for run in self._all_runs() if run.group == group]
        return sorted(runs, key=lambda r: (r.start_time or 0.0, r.run_id))

    def scan(self, run: RunRef) -> Iterator[dict[str, Any]]:
        stream = HistoryStream(run.location)
        yield from stream
        run.state = {None: "running_or_killed", 0: "finished"}.get(stream.exit_code, "failed")
        run.torn = None if stream.torn is None else str(stream.torn)


class OnlineHistorySource:
    """Runs of `entity/project` on a W&B server, read with `scan_history` (every row, paged)."""

    kind = "online"

    def __init__(self, project_path: str, *, page_size: int = 1000) -> None:
        if project_path.count("/") != 1:
            raise ExportError(f"online source must be ENTITY/PROJECT, got {project_path!r}")
        self.location = project_path
        self.page_size = page_size
        self._api: Any = None

    def _client(self) -> Any:
        if self._api is None:
            import wandb

            self._api = wandb.Api()
        return self._api

    def runs_for_group(self, group: str) -> list[RunRef]:
        runs = self._client().runs(self.location, filters={"group": group}, order="+created_at")
        return [
            RunRef(
                run_id=run.id,
                group=group,
                name=run.name,
                job_type=run.job_type or "",
                location=f"{self.location}/{run.id}",
                start_time=None,
                state=run.state,
                handle=run,
            )
            for run in runs
        ]

    def scan(self, run: RunRef) -> Iterator[dict[str, Any]]:
        yield from run.handle.scan_history(page_size=self.page_size)

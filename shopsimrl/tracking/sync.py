"""Upload offline runs with `wandb sync`, one run at a time, trusting the `.synced` marker only.

`wandb sync` (0.31) exits 0 even when the run could not be initialised on the server, and hangs on an
unreachable server with its default retries. So the credentials are checked first, without network
(wandb's own sources: WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, or a netrc entry for the server;
none is "no credentials", with how to provide them); then the server (or the proxy in front of it) is
checked with one TCP connect (a closed port or an unknown host is "server unreachable" at once,
instead of a timeout per run); then each run is synced in its own process group under a
wall-clock timeout, and success is the marker `run-<id>.wandb.synced` that wandb writes next to the
run file after an upload, not the exit code. Runs that already have the marker are skipped.
`wandb sync` runs with WANDB_DIR set to the directory being synced, so its debug log
(`<dir>/wandb/logs/debug-sync.*.log`) stays there instead of in `./wandb/` of the current directory.
slime's offline runs of one training launch share one run id (the driver's, the RolloutManager's and
actor rank 0's, each in its own directory); they are merged into one offline run first
(shopsimrl.tracking.merge, under `wandb/merged/`) and that one is uploaded and carries the marker, so
the server gets one run with every process's rows, as slime's online shared mode makes it.

    results = sync_runs(Path("wandb"), timeout_s=600)
    print(format_table(results))
"""

from __future__ import annotations

import configparser
import functools
import netrc
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from shopsimrl.tracking.merge import merge_offline_runs
from shopsimrl.tracking.offline_reader import MERGED_RUNS_DIR

SYNCED_SUFFIX = ".synced"
_TAIL = 400  # characters of wandb's output kept for a failed run


@functools.cache
def default_base_url() -> str:
    """wandb's own default server (0.31: https://api.forge.coreweave.com, wandb/sdk/lib/urls.py), read
    when first needed: importing this module must not import wandb."""
    try:
        from wandb.sdk.lib.urls import DEFAULT_BASE_URL as default
    except (ImportError, AttributeError):  # wandb < 0.31 named no such constant: the old default
        return "https://api.wandb.ai"
    return default


def _netrc_hosts_for(url: str) -> list[str]:
    """The netrc machines wandb looks up for `url`: its host[:port], then the W&B API host behind a
    CoreWeave Forge host (wandb/sdk/lib/wbauth/wbnetrc.py), so an older `wandb login` entry still counts."""
    hosts = [urlsplit(url).netloc]
    try:
        from wandb.sdk.lib.urls import forge_upstream_url
    except (ImportError, AttributeError):
        return hosts
    upstream = urlsplit(forge_upstream_url(url)).netloc
    return hosts + ([upstream] if upstream not in hosts else [])

CONNECT_TIMEOUT_S = 5.0


class SyncStatus(StrEnum):
    SYNCED = "synced"  # marker written by this sync
    ALREADY_SYNCED = "already_synced"  # marker existed before: skipped
    WOULD_SYNC = "would_sync"  # --dry-run: `wandb sync --dry-run` accepted the run
    NO_MARKER = "no_marker"  # wandb exited 0 but wrote no marker: nothing (or not everything) uploaded
    FAILED = "failed"  # non-zero exit
    TIMEOUT = "timeout"  # killed after the timeout
    UNREACHABLE = "unreachable"  # the server (or proxy) refused or did not answer a TCP connect: not tried
    NO_CREDENTIALS = "no_credentials"  # no API key for the server in the environment or netrc: not tried

    @property
    def ok(self) -> bool:
        return self in (SyncStatus.SYNCED, SyncStatus.ALREADY_SYNCED, SyncStatus.WOULD_SYNC)


@dataclass(frozen=True)
class OfflineRunDir:
    path: Path  # the offline-run-<time>-<id> directory
    run_file: Path  # its run-<id>.wandb

    @property
    def run_id(self) -> str:
        return self.run_file.stem.removeprefix("run-")

    @property
    def marker(self) -> Path:
        return self.run_file.with_name(self.run_file.name + SYNCED_SUFFIX)

    @property
    def synced(self) -> bool:
        return self.marker.exists()


@dataclass(frozen=True)
class SyncResult:
    run: OfflineRunDir
    status: SyncStatus
    seconds: float
    exit_code: int | None
    detail: str


def find_offline_runs(wandb_dir: str | os.PathLike[str]) -> list[OfflineRunDir]:
    """`offline-run-*` dirs under WANDB_DIR: in `<dir>/wandb/`, `<dir>/.wandb/` or `<dir>` itself.

    Online `run-*` dirs are not offline runs (wandb decides by the directory name too); `latest-run`
    is a symlink to one of them and is not counted twice. A dir without a run file is skipped.
    """
    root = Path(wandb_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"W&B directory {root} does not exist")
    found: dict[Path, OfflineRunDir] = {}
    for parent in (root, root / "wandb", root / ".wandb"):
        if not parent.is_dir():
            continue
        for run_dir in sorted(parent.glob("offline-run-*")):
            if run_dir.is_symlink() or not run_dir.is_dir():
                continue
            run_files = sorted(run_dir.glob("run-*.wandb"))
            if run_files:
                found[run_dir.resolve()] = OfflineRunDir(run_dir, run_files[0])
    return [found[key] for key in sorted(found, key=lambda p: p.name)]


def default_wandb_executable() -> str:
    """`wandb` on PATH, else the one installed beside this Python."""
    on_path = shutil.which("wandb")
    if on_path:
        return on_path
    beside = Path(sys.executable).parent / "wandb"
    if beside.exists():
        return str(beside)
    raise FileNotFoundError("no `wandb` executable on PATH or beside the Python interpreter")


def server_url(env: Mapping[str, str] | None = None) -> str:
    """The W&B server `wandb sync` will talk to: WANDB_BASE_URL, else `base_url` of wandb's settings
    file (`wandb login --host` writes it to $WANDB_CONFIG_DIR/settings, default ~/.config/wandb), else
    wandb's own default (`default_base_url()`)."""
    env = os.environ if env is None else env
    if env.get("WANDB_BASE_URL"):
        return env["WANDB_BASE_URL"]
    config_dir = env.get("WANDB_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".config", "wandb")
    parser = configparser.ConfigParser()
    try:
        parser.read(os.path.join(config_dir, "settings"), encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return default_base_url()  # wandb itself would not read that file either
    return parser.get("default", "base_url", fallback=None) or default_base_url()


def credentials_source(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """Where `wandb sync` finds credentials for the server at `url`, or None when it has none.

    wandb 0.31's sources, in its order (wandb/sdk/lib/wbauth): WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE,
    then the netrc file ($NETRC, else ~/.netrc) entry with a password for the server's host[:port].
    Nothing is sent anywhere: whether the server accepts the key shows in the upload itself.
    """
    env = os.environ if env is None else env
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if env.get(name):
            return name
    path = Path(env["NETRC"]).expanduser() if env.get("NETRC") else Path(env.get("HOME") or "~").expanduser() / ".netrc"
    if not path.is_file() or not urlsplit(url).netloc:
        return None
    try:
        parsed = netrc.netrc(str(path))
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError):
        return None  # wandb warns and ignores such a file too
    for host in _netrc_hosts_for(url):
        entry = parsed.authenticators(host)
        if entry:  # the first entry found decides, as in wandb: one without a password is no key
            return f"netrc {path}" if entry[2] else None
    return None


def credentials_hint(url: str) -> str:
    """How to provide W&B credentials for the server at `url` (the two routes docs/wandb.md describes)."""
    host = urlsplit(url).hostname or url
    login = "wandb login" if url.rstrip("/") == default_base_url() else f"wandb login --host {url}"
    return (
        f"no W&B credentials for {host}: nothing was uploaded. Provide them one of two ways, then sync again: "
        f"run `{login}` on this host (it writes ~/.netrc, which `make wandb-sync` mounts into the container), "
        "or export WANDB_API_KEY (e.g. from a secret manager; compose passes it by name). Never pass the key "
        "on a command line."
    )


def unreachable_reason(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to the server of `url` (or the proxy the environment names for it)
    cannot be made, or None when it can."""
    parts = urlsplit(url)
    if not parts.hostname:
        return f"server URL {url!r} has no host"
    target = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    via = ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            target = (proxy_parts.hostname, proxy_parts.port or 80)
            via = f" (proxy for {parts.hostname})"
    try:
        with socket.create_connection(target, timeout=timeout_s):
            return None
    except socket.gaierror as exc:
        return f"cannot resolve {target[0]}{via} ({exc.strerror or exc})"
    except TimeoutError:
        return f"cannot connect to {target[0]}:{target[1]}{via} (no answer within {timeout_s:g} s)"
    except OSError as exc:
        return f"cannot connect to {target[0]}:{target[1]}{via} ({exc.strerror or exc})"


def sync_runs(
    wandb_dir: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    timeout_s: float = 600.0,
    wandb_executable: str | None = None,
    extra_args: Iterable[str] = (),
    base_url: str | None = None,
) -> list[SyncResult]:
    """Sync every unsynced offline run under `wandb_dir`, one `wandb sync` process per run.

    Unless `dry_run`, the credentials for the server (`base_url`, default `server_url()`) are checked
    first, then the server itself: without credentials every unsynced run is reported
    NO_CREDENTIALS (`credentials_hint` says how to provide them), without a server UNREACHABLE, and
    no `wandb sync` is started.
    """
    units = _one_per_run_id(find_offline_runs(wandb_dir))
    executable = wandb_executable or default_wandb_executable()
    pending = [run for run, _ in units if not run.synced]
    blocked: tuple[SyncStatus, str] | None = None
    if pending and not dry_run:
        url = base_url or server_url()
        if credentials_source(url) is None:
            host = urlsplit(url).hostname or url
            blocked = (SyncStatus.NO_CREDENTIALS, f"no W&B credentials for {host}; nothing uploaded (server {url})")
        elif (reason := unreachable_reason(url)) is not None:
            blocked = (SyncStatus.UNREACHABLE, f"server unreachable: {reason}; nothing uploaded (server {url})")
    # wandb's CLI writes its debug log under $WANDB_DIR/wandb/logs (or ./wandb/logs without it).
    env = {**os.environ, "WANDB_DIR": str(Path(wandb_dir).absolute())}
    results = []
    for run, sources in units:
        merged = f"merged from {len(sources)} directories: {', '.join(s.path.name for s in sources)}; " if sources else ""
        if run.synced:
            results.append(SyncResult(run, SyncStatus.ALREADY_SYNCED, 0.0, None, f"{merged}marker present"))
        elif blocked is not None:
            results.append(SyncResult(run, blocked[0], 0.0, None, f"{merged}{blocked[1]}"))
        elif sources and dry_run:
            results.append(SyncResult(run, SyncStatus.WOULD_SYNC, 0.0, None, f"{merged}would upload the merged run"))
        else:
            if sources:
                merge_offline_runs([source.run_file for source in sources], run.path)
            result = _sync_one(run, executable, dry_run=dry_run, timeout_s=timeout_s, extra=list(extra_args), env=env)
            results.append(SyncResult(result.run, result.status, result.seconds, result.exit_code, merged + result.detail))
    return results


def _one_per_run_id(runs: list[OfflineRunDir]) -> list[tuple[OfflineRunDir, list[OfflineRunDir]]]:
    """What to upload: each run as it is, or for a run id in several directories (slime's, in start
    order) the merged run beside them, `<dir>/merged/<first directory's name>/`, with its sources."""
    by_id: dict[str, list[OfflineRunDir]] = {}
    for run in runs:
        by_id.setdefault(run.run_id, []).append(run)
    units = []
    for same_id in by_id.values():
        if len(same_id) == 1:
            units.append((same_id[0], []))
            continue
        first = same_id[0]
        path = first.path.parent / MERGED_RUNS_DIR / first.path.name
        units.append((OfflineRunDir(path, path / first.run_file.name), same_id))
    return units


def _sync_one(
    run: OfflineRunDir,
    executable: str,
    *,
    dry_run: bool,
    timeout_s: float,
    extra: list[str],
    env: Mapping[str, str],
) -> SyncResult:
    command = [executable, "sync", *(["--dry-run"] if dry_run else ["--yes"]), *extra, str(run.path)]
    started = time.monotonic()
    # A new session: on timeout the whole group (wandb and its wandb-core child) is killed.
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(env),
    )
    try:
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except BaseException:
            # A timeout, or a signal handler's exception: wandb and its wandb-core child, in their own
            # session, would otherwise outlive us and go on uploading.
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            raise
    except subprocess.TimeoutExpired:
        return SyncResult(
            run,
            SyncStatus.TIMEOUT,
            time.monotonic() - started,
            None,
            f"killed after {timeout_s:g} s; {_tail(output)}",
        )
    seconds = time.monotonic() - started
    code = process.returncode
    if code != 0:
        return SyncResult(run, SyncStatus.FAILED, seconds, code, _tail(output))
    if dry_run:
        return SyncResult(run, SyncStatus.WOULD_SYNC, seconds, code, _tail(output))
    if run.synced:
        return SyncResult(run, SyncStatus.SYNCED, seconds, code, "marker written")
    return SyncResult(
        run, SyncStatus.NO_MARKER, seconds, code, f"exit 0 but no {run.marker.name}; {_tail(output)}"
    )


def _tail(output: str | None) -> str:
    text = " ".join((output or "").split())
    return text[-_TAIL:] if text else "(no output)"


def format_table(results: list[SyncResult]) -> str:
    header = ("run_id", "status", "seconds", "exit", "directory / detail")
    rows = [
        (
            r.run.run_id,
            r.status.value,
            f"{r.seconds:.1f}",
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.run.path.name}: {r.detail}",
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]
    lines = [
        "  ".join(str(cell).ljust(widths[i]) if i < 4 else str(cell) for i, cell in enumerate(row))
        for row in [header, *rows]
    ]
    failed = sum(not r.status.ok for r in results)
    lines.append(f"{len(results)} run(s): {len(results) - failed} ok, {failed} failed")
    return "\n".join(lines)

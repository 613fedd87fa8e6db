"""A W&B-compatible HTTP server for tests: the part of the protocol `wandb sync` (wandb 0.31.0) speaks.

Only what the real `wandb sync` was seen to send is answered (every request of it logged against a
catch-all server, offline runs with config, history, summary, console, system stats and a Table):

    POST /graphql  UpsertBucket         creates the run; later calls update it (null fields: unchanged)
    POST /graphql  ServerFeaturesQuery  optional server features: answered with none, the baseline protocol
    POST /graphql  CreateRunFiles       one upload URL per run file (config.yaml, wandb-summary.json, ...)
    PUT  <upload URL>                   a file's bytes; no W&B credentials, the URL is the authorisation
    POST /files/<entity>/<project>/<run>/file_stream
                                        lines by offset of wandb-history.jsonl, wandb-summary.json,
                                        wandb-events.jsonl, output.log; the last one `complete` + `exitcode`

Every other request (another GraphQL operation, e.g. CreateArtifact for a logged Table; a REST path;
an upload URL this server did not hand out; a call without `Authorization: Basic api:<key>`) is
recorded in `unexpected` and refused (400/401/403/404). Nothing here claims that is how the real
server refuses it: `wandb sync` swallows such failures (a refused CreateArtifact still ends in
"Finished syncing" and the `.synced` marker), so `check()` raises for them and the `wandb_server`
fixture calls it after each test. Set WANDB_ERROR_REPORTING=false for wandb: otherwise wandb-core
also posts its own telemetry to <base_url>/sdk/otel/v1/metrics, which this server does not implement.

    with WandbServer() as server:               # 127.0.0.1, ephemeral port, stops after lifetime_s
        ...  # WANDB_BASE_URL=server.url wandb sync ...
        run = server.snapshot().run("abc123")  # .history, .summary, .config, .files, .exit_code
    server.check()

As a process (records go to DIR/wandb_server_records.json on SIGUSR1 and on exit; DIR/wandb_server.json
says where it listens once it does; exit status 1 if anything unexpected arrived):

    python tests/wandb_server.py --port 0 --record-dir DIR --lifetime 600
"""

from __future__ import annotations

import argparse
import base64
import copy
import gzip
import http.server
import json
import os
import re
import secrets
import signal
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORDS_FILE = "wandb_server_records.json"
READY_FILE = "wandb_server.json"
SCHEMA_VERSION = 1
HISTORY, SUMMARY, EVENTS, OUTPUT = (
    "wandb-history.jsonl",
    "wandb-summary.json",
    "wandb-events.jsonl",
    "output.log",
)
_FILE_STREAM = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$")
_UPLOAD_PREFIX = "/_uploads/"  # where this server's upload URLs point (the real one hands out bucket URLs)
_OPERATION = re.compile(r"^\s*(?:query|mutation)\s+(\w+)")
# UpsertBucket variables kept on the run (a null one leaves the stored value as it is).
_BUCKET_FIELDS = {"groupName": "group", "jobType": "job_type", "displayName": "name", "notes": "notes",
                  "tags": "tags", "host": "host", "program": "program"}  # fmt: skip


@dataclass
class RunRecord:
    """Everything the server received for one run."""

    entity: str
    project: str
    run_id: str
    storage_id: str  # the opaque id the server answered for the run
    group: str | None = None
    job_type: str | None = None
    name: str | None = None  # display name
    notes: str | None = None
    tags: list[str] | None = None
    host: str | None = None
    program: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # key -> value (unwrapped from {"value": ...})
    # file_stream lines: file name -> offset -> line
    streams: dict[str, dict[int, str]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # uploaded through CreateRunFiles URLs
    uploaded: list[str] = field(default_factory=list)  # names file_stream reported as uploaded
    complete: bool = False
    exit_code: int | None = None
    upserts: int = 0

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}/{self.run_id}"

    def lines(self, name: str) -> list[str]:
        """The streamed file's lines in offset order (a line re-sent at the same offset counts once)."""
        stream = self.streams.get(name, {})
        return [stream[offset] for offset in sorted(stream)]

    @property
    def history(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines(HISTORY)]

    @property
    def summary(self) -> dict[str, Any]:
        lines = self.lines(SUMMARY)  # each request carries the whole summary at offset 0
        return json.loads(lines[-1]) if lines else {}

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines(EVENTS)]

    @property
    def output(self) -> list[str]:
        return self.lines(OUTPUT)


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    operation: str | None  # GraphQL operation name; None for REST and uploads
    status: int


@dataclass
class Records:
    """What arrived, in a form that survives a JSON round trip (`to_json` / `load_records`)."""

    runs: dict[str, RunRecord] = field(default_factory=dict)  # "entity/project/run_id" -> run
    requests: list[RequestRecord] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # one line per refused request

    def run(self, run_id: str) -> RunRecord:
        """The one run with this id (in any entity/project)."""
        found = [run for run in self.runs.values() if run.run_id == run_id]
        if len(found) != 1:
            raise KeyError(f"{len(found)} runs with id {run_id!r}; have {sorted(self.runs)}")
        return found[0]

    def to_json(self) -> dict[str, Any]:
        runs = {}
        for path, run in self.runs.items():
            data = asdict(run)
            data["streams"] = {
                name: {str(k): v for k, v in lines.items()} for name, lines in run.streams.items()
            }
            data["files"] = {name: _encode_bytes(content) for name, content in run.files.items()}
            runs[path] = data
        return {
            "schema_version": SCHEMA_VERSION,
            "runs": runs,
            "requests": [asdict(request) for request in self.requests],
            "unexpected": list(self.unexpected),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Records:
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"records schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}"
            )
        runs = {}
        for path, raw in data["runs"].items():
            raw = dict(raw)
            raw["streams"] = {
                name: {int(k): v for k, v in lines.items()} for name, lines in raw["streams"].items()
            }
            raw["files"] = {name: _decode_bytes(content) for name, content in raw["files"].items()}
            runs[path] = RunRecord(**raw)
        return cls(runs, [RequestRecord(**r) for r in data["requests"]], list(data["unexpected"]))


def load_records(path: str | os.PathLike[str]) -> Records:
    """Records written by `WandbServer.write_records` (a file, or the record dir holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    return Records.from_json(json.loads(path.read_text(encoding="utf-8")))


def _encode_bytes(content: bytes) -> dict[str, str]:
    try:
        return {"encoding": "utf-8", "data": content.decode("utf-8")}
    except UnicodeDecodeError:
        return {"encoding": "base64", "data": base64.b64encode(content).decode("ascii")}


def _decode_bytes(value: dict[str, str]) -> bytes:
    if value["encoding"] == "utf-8":
        return value["data"].encode("utf-8")
    return base64.b64decode(value["data"])


def _write_atomically(path: Path, text: str) -> None:
    # A reader in another process sees the old file or the whole new one, never a partial write.
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _global_id(kind: str, *parts: str) -> str:
    # Opaque ids in the form W&B's GraphQL uses (base64 of "Kind:v1:..."); clients only echo them.
    return base64.b64encode(":".join((kind, "v1", *parts)).encode()).decode()


class _Refused(Exception):
    """A request the stand-in does not implement: recorded in `unexpected`, answered with `status`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class WandbServer:
    """The stand-in: a ThreadingHTTPServer on 127.0.0.1 that stops by itself after `lifetime_s`."""

    def __init__(self, *, port: int = 0, lifetime_s: float = 120.0, default_entity: str = "stand-in") -> None:
        self.lifetime_s = lifetime_s
        # The real server puts a run sent without an entity into the API key's user's default entity.
        self.default_entity = default_entity
        self.stopped = threading.Event()  # set when the server stops (stop(), or its lifetime ran out)
        self.expired = False
        self._port = port
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()  # stop() may run from the lifetime timer and the owner at once
        self._records = Records()
        self._uploads: dict[str, tuple[str, str]] = {}  # upload token -> (run path, file name)
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> WandbServer:
        httpd = _HTTPServer(("127.0.0.1", self._port), _Handler)
        httpd.stand_in = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="wandb-stand-in", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime_s, self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._stop_lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._httpd is not None and self._thread is not None:
                self._httpd.shutdown()
                self._thread.join()
                self._httpd.server_close()
                self._httpd = None
            self.stopped.set()

    def _expire(self) -> None:
        self.expired = True
        self.stop()

    def __enter__(self) -> WandbServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the W&B stand-in is not running")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The value for WANDB_BASE_URL."""
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ reading back
    def snapshot(self) -> Records:
        """A copy of everything received so far."""
        with self._lock:
            return copy.deepcopy(self._records)

    @property
    def runs(self) -> dict[str, RunRecord]:
        return self.snapshot().runs

    @property
    def requests(self) -> list[RequestRecord]:
        return self.snapshot().requests

    @property
    def unexpected(self) -> list[str]:
        return self.snapshot().unexpected

    def write_records(self, directory: str | os.PathLike[str]) -> Path:
        """Write the records to DIR/wandb_server_records.json (atomically) and return the path."""
        path = Path(directory) / RECORDS_FILE
        _write_atomically(path, json.dumps(self.snapshot().to_json(), indent=1))
        return path

    def check(self) -> None:
        """Raise AssertionError if a request arrived that the stand-in does not implement."""
        unexpected = self.unexpected
        if unexpected:
            raise AssertionError(
                f"the W&B stand-in refused {len(unexpected)} request(s) it does not implement: "
                + "; ".join(unexpected)
            )

    # ------------------------------------------------------------------ protocol
    def _note(self, method: str, path: str, operation: str | None, status: int, refusal: str | None) -> None:
        with self._lock:
            self._records.requests.append(RequestRecord(method, path, operation, status))
            if refusal is not None:
                self._records.unexpected.append(
                    f"{method} {path}{f' {operation}' if operation else ''}: {refusal}"
                )

    def graphql(self, operation: str, variables: dict[str, Any], upload_base: str) -> dict[str, Any]:
        if operation == "UpsertBucket":
            return {"data": {"upsertBucket": self._upsert_bucket(variables)}}
        if operation == "ServerFeaturesQuery":
            return {"data": {"serverInfo": {"features": []}}}
        if operation == "CreateRunFiles":
            return {"data": {"createRunFiles": self._create_run_files(variables, upload_base)}}
        raise _Refused(400, "GraphQL operation not implemented by the stand-in")

    def _upsert_bucket(self, v: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            run = self._find_run(v)
            inserted = run is None
            if run is None:
                if not v.get("name"):
                    raise _Refused(
                        400, "UpsertBucket without a run name (server-chosen ids are not implemented)"
                    )
                entity = v.get("entity") or self.default_entity
                project = v.get("project") or "uncategorized"
                run = RunRecord(entity, project, v["name"], _global_id("Run", v["name"], project, entity))
                self._records.runs[run.path] = run
            run.upserts += 1
            for variable, attribute in _BUCKET_FIELDS.items():
                if v.get(variable) is not None:
                    setattr(run, attribute, v[variable])
            if v.get("config") is not None:
                run.config = {key: value["value"] for key, value in json.loads(v["config"]).items()}
            return {
                "bucket": {
                    "id": run.storage_id,
                    "name": run.run_id,
                    "displayName": run.name,
                    "description": run.notes,
                    "config": json.dumps({key: {"value": value} for key, value in run.config.items()}),
                    "sweepName": None,
                    "project": {
                        "id": _global_id("Project", run.project, run.entity),
                        "name": run.project,
                        "entity": {"id": _global_id("Entity", run.entity), "name": run.entity},
                    },
                    "historyLineCount": len(run.streams.get(HISTORY, {})),
                },
                "inserted": inserted,
            }

    def _find_run(self, v: dict[str, Any]) -> RunRecord | None:
        if v.get("id"):
            for run in self._records.runs.values():
                if run.storage_id == v["id"]:
                    return run
            raise _Refused(404, f"UpsertBucket for unknown run id {v['id']!r}")
        path = (
            f"{v.get('entity') or self.default_entity}/{v.get('project') or 'uncategorized'}/{v.get('name')}"
        )
        return self._records.runs.get(path)

    def _create_run_files(self, v: dict[str, Any], upload_base: str) -> dict[str, Any]:
        path = f"{v['entity'] or self.default_entity}/{v['project']}/{v['run']}"
        with self._lock:
            run = self._records.runs.get(path)
            if run is None:
                raise _Refused(404, f"CreateRunFiles for unknown run {path}")
            files = []
            for name in v["files"]:
                token = secrets.token_urlsafe(16)
                self._uploads[token] = (path, name)
                files.append({"name": name, "uploadUrl": f"{upload_base}{_UPLOAD_PREFIX}{token}"})
            return {"runID": run.storage_id, "uploadHeaders": [], "files": files}

    def upload(self, token: str, content: bytes) -> None:
        with self._lock:
            if token not in self._uploads:
                raise _Refused(403, "upload URL not handed out by this server")
            path, name = self._uploads[token]
            self._records.runs[path].files[name] = content

    def file_stream(self, entity: str, project: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            run = self._records.runs.get(f"{entity}/{project}/{run_id}")
            if run is None:
                raise _Refused(404, "file_stream for a run that was never upserted")
            for name, chunk in (body.get("files") or {}).items():
                stream = run.streams.setdefault(name, {})
                for index, line in enumerate(chunk["content"]):
                    stream[chunk["offset"] + index] = line
            run.uploaded.extend(body.get("uploaded") or [])
            if body.get("complete"):
                run.complete = True
            if "exitcode" in body:
                run.exit_code = body["exitcode"]
        # wandb-core only decodes the body as a JSON object; these are the fields W&B's clients read.
        return {"exitcode": None, "limits": {}}


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    stand_in: WandbServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # wandb-core drops its keep-alive connections when it exits: not an error of the server.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # wandb-core keeps connections alive
    server: _HTTPServer

    def _serve(self) -> None:
        stand_in = self.server.stand_in
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        path = self.path.split("?", 1)[0]
        operation = None
        try:
            if self.command == "PUT" and path.startswith(_UPLOAD_PREFIX):
                stand_in.upload(path.removeprefix(_UPLOAD_PREFIX), body)
                answer: dict[str, Any] | None = None
            else:
                self._authorise()
                if self.command == "POST" and path == "/graphql":
                    request = _json_object(body)
                    operation = request.get("operationName") or _operation_in(request.get("query", ""))
                    upload_base = f"http://{self.headers.get('Host') or f'127.0.0.1:{stand_in.port}'}"
                    answer = stand_in.graphql(operation or "", request.get("variables") or {}, upload_base)
                elif self.command == "POST" and (match := _FILE_STREAM.match(path)):
                    answer = stand_in.file_stream(*match.groups(), _json_object(body))
                else:
                    raise _Refused(404, "path not implemented by the stand-in")
        except _Refused as refusal:
            stand_in._note(self.command, path, operation, refusal.status, str(refusal))
            self._answer(refusal.status, {"errors": [{"message": f"W&B stand-in: {refusal}"}]})
            return
        stand_in._note(self.command, path, operation, 200, None)
        self._answer(200, answer)

    def _authorise(self) -> None:
        # wandb-core sends the API key as HTTP basic auth with the user name "api".
        header = self.headers.get("Authorization") or ""
        try:
            user, _, key = (
                base64.b64decode(header.removeprefix("Basic "), validate=True).decode().partition(":")
            )
        except ValueError:
            user = key = ""
        if not header.startswith("Basic ") or user != "api" or not key:
            raise _Refused(401, "no API key (basic auth api:<key>)")

    def _answer(self, status: int, answer: dict[str, Any] | None) -> None:
        payload = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        if answer is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    # Every method comes here, so that any request wandb makes is recorded, not answered 501 unseen.
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # every request is in the records


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise _Refused(400, f"body is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise _Refused(400, "body is not a JSON object")
    return value


def _operation_in(query: str) -> str | None:
    match = _OPERATION.match(query)
    return match.group(1) if match else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="W&B stand-in for `wandb sync` tests, on 127.0.0.1.",
        epilog="Example: python tests/wandb_server.py --port 0 --record-dir /tmp/wb --lifetime 600",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument(
        "--record-dir", type=Path, required=True, help=f"where {READY_FILE} and {RECORDS_FILE} go"
    )
    parser.add_argument(
        "--lifetime", type=float, default=600.0, help="seconds until the server stops by itself"
    )
    args = parser.parse_args(argv)
    args.record_dir.mkdir(parents=True, exist_ok=True)
    server = WandbServer(port=args.port, lifetime_s=args.lifetime)
    dump, done = threading.Event(), threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: dump.set())
    for stopping in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stopping, lambda *_: done.set())
    server.start()
    ready = {"url": server.url, "port": server.port, "pid": os.getpid(), "lifetime_s": args.lifetime}
    _write_atomically(args.record_dir / READY_FILE, json.dumps(ready))
    print(
        f"W&B stand-in listening on {server.url} for {args.lifetime:g} s; records in {args.record_dir}",
        flush=True,
    )
    while not done.is_set() and not server.stopped.wait(0.1):
        if dump.is_set():
            dump.clear()
            server.write_records(args.record_dir)
    server.stop()
    path = server.write_records(args.record_dir)
    why = "lifetime over" if server.expired else "stopped"
    print(f"W&B stand-in {why}; records in {path}", flush=True)
    if server.unexpected:
        print("\n".join(["refused requests it does not implement:", *server.unexpected]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

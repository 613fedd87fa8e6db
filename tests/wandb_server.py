"""A W&B-compatible HTTP server for tests: the part of the protocol `wandb sync` (wandb 0.31.0) speaks.

Only what the real `wandb sync` was seen to send is answered (every request of it logged against a
catch-all server: offline runs with config, history, summary, console, system stats, Tables and file
artifacts, and the train/analysis/gate/rounds runs of a tiny ShopSimRL round):

    POST /graphql  UpsertBucket         creates the run; later calls update it (null fields: unchanged)
    POST /graphql  ServerFeaturesQuery  optional server features: answered with none, the baseline protocol
    POST /graphql  CreateRunFiles       one upload URL per run file (config.yaml, wandb-summary.json,
                                        media/table/*.table.json, ...)
    POST /graphql  CreateArtifact       a PENDING version (a Table is a `run_table` artifact of its own); with
                                        the digest of a COMMITTED version of the collection: that one
    POST /graphql  CreateArtifactManifest   the FULL manifest's id; asked again with the digest: its upload URL
    POST /graphql  CreateArtifactFiles  one upload URL per file (name, base64 MD5), storage layout V2
    POST /graphql  CommitArtifact       COMMITTED, version vN of its collection, aliases (e.g. latest) moved to it
    PUT  <upload URL>                   a run file's, an artifact file's or a manifest's bytes; no W&B
                                        credentials, the URL is the authorisation
    POST /files/<entity>/<project>/<run>/file_stream
                                        lines by offset of wandb-history.jsonl, wandb-summary.json,
                                        wandb-events.jsonl, output.log; the last one `complete` + `exitcode`

Every other request (another GraphQL operation, e.g. NotifyScriptableRunAlert for an alert of an offline
run; a shape of one of the above the stand-in does not model: multipart uploads, patch or incremental
manifests, regional storage; a REST path; an upload URL this server did not hand out; a call without
`Authorization: Basic api:<key>`) is recorded in `unexpected` and refused (400/401/403/404). So is a
CommitArtifact before every file of the uploaded manifest arrived with the MD5 the manifest names (the
stand-in's own check: the real server does not refuse that). Nothing here claims that is how the real
server refuses: `wandb sync` swallows such failures (a refused operation still ends in "Finished
syncing" and the `.synced` marker), so `check()` raises for them and the `wandb_server` fixture calls it
after each test. Set WANDB_ERROR_REPORTING=false for wandb: otherwise wandb-core also posts its own
telemetry to <base_url>/sdk/otel/v1/metrics, which this server does not implement.

    with WandbServer() as server:               # 127.0.0.1, ephemeral port, stops after lifetime_s
        ...  # WANDB_BASE_URL=server.url wandb sync ...
        run = server.snapshot().run("abc123")  # .history, .summary, .config, .files, .exit_code
        data = server.snapshot().artifact("my-data")  # version with alias latest: .files[name].content
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
import hashlib
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
SCHEMA_VERSION = 2
HISTORY, SUMMARY, EVENTS, OUTPUT = (
    "wandb-history.jsonl",
    "wandb-summary.json",
    "wandb-events.jsonl",
    "output.log",
)
_FILE_STREAM = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$")
_UPLOAD_PREFIX = "/_uploads/"  # where this server's upload URLs point (the real one hands out bucket URLs)
_OPERATION = re.compile(r"^\s*(?:query|mutation)\s+(\w+)")
PENDING, COMMITTED = "PENDING", "COMMITTED"  # W&B's ArtifactState values the stand-in uses
MANIFEST_NAME = "wandb_manifest.json"  # the FULL manifest: the only kind the stand-in implements
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


@dataclass
class ArtifactFileRecord:
    """One file of an artifact: the digest the client declared and the bytes that arrived."""

    name: str  # path inside the artifact
    digest: str  # base64 MD5, as in the manifest and CreateArtifactFiles' md5
    content: bytes | None = None  # None until its upload URL received a PUT

    @property
    def uploaded_digest(self) -> str | None:
        """Base64 MD5 of the bytes that arrived (W&B's digest format), None before the upload."""
        return None if self.content is None else _b64_md5(self.content)


@dataclass
class ArtifactRecord:
    """One artifact version as the server holds it."""

    id: str  # the opaque id the server answered
    entity: str
    project: str
    name: str  # the collection (sequence) name
    type: str
    digest: str  # the client's MANIFEST_MD5 digest of the manifest
    run_path: str | None  # "entity/project/run_id" of the run that logged it
    state: str = PENDING
    version: int | None = None  # vN, given at commit
    aliases: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    description: str | None = None
    metadata: dict[str, Any] | None = None  # the client's JSON string, parsed
    history_step: int | None = None
    files: dict[str, ArtifactFileRecord] = field(default_factory=dict)  # from CreateArtifactFiles
    manifest: dict[str, Any] | None = None  # the uploaded wandb_manifest.json, parsed
    manifest_digest: str | None = None  # base64 MD5 of the manifest file, declared before its upload

    @property
    def qualified_name(self) -> str:
        return f"{self.name}:v{self.version}" if self.version is not None else f"{self.name}:pending"

    @property
    def manifest_digests(self) -> dict[str, str]:
        """Path inside the artifact -> digest, from the uploaded manifest."""
        return {path: entry["digest"] for path, entry in (self.manifest or {}).get("contents", {}).items()}


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
    artifacts: dict[str, ArtifactRecord] = field(default_factory=dict)  # server id -> version
    requests: list[RequestRecord] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # one line per refused request

    def run(self, run_id: str) -> RunRecord:
        """The one run with this id (in any entity/project)."""
        found = [run for run in self.runs.values() if run.run_id == run_id]
        if len(found) != 1:
            raise KeyError(f"{len(found)} runs with id {run_id!r}; have {sorted(self.runs)}")
        return found[0]

    def artifact(self, name: str, alias: str = "latest") -> ArtifactRecord:
        """The one artifact version of collection `name` (in any entity/project) holding `alias`."""
        found = [a for a in self.artifacts.values() if a.name == name and alias in a.aliases]
        if len(found) != 1:
            have = sorted(f"{a.name} {a.aliases}" for a in self.artifacts.values())
            raise KeyError(f"{len(found)} artifacts {name!r} with alias {alias!r}; have {have}")
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
        artifacts = {}
        for artifact_id, artifact in self.artifacts.items():
            data = asdict(artifact)
            for name, file in artifact.files.items():
                content = file.content
                data["files"][name]["content"] = None if content is None else _encode_bytes(content)
            artifacts[artifact_id] = data
        return {
            "schema_version": SCHEMA_VERSION,
            "runs": runs,
            "artifacts": artifacts,
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
        artifacts = {}
        for artifact_id, raw in data["artifacts"].items():
            raw = dict(raw)
            raw["files"] = {
                name: ArtifactFileRecord(
                    file["name"],
                    file["digest"],
                    None if file["content"] is None else _decode_bytes(file["content"]),
                )
                for name, file in raw["files"].items()
            }
            artifacts[artifact_id] = ArtifactRecord(**raw)
        requests = [RequestRecord(**r) for r in data["requests"]]
        return cls(runs, artifacts, requests, list(data["unexpected"]))


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


def _b64_md5(content: bytes) -> str:
    return base64.b64encode(hashlib.md5(content).digest()).decode("ascii")


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
        # upload token -> what it stores: ("run", run path, file name), ("artifact", artifact id, file name)
        # or ("manifest", artifact id, MANIFEST_NAME)
        self._uploads: dict[str, tuple[str, str, str]] = {}
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
    def artifacts(self) -> dict[str, ArtifactRecord]:
        return self.snapshot().artifacts

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
        if operation == "CreateArtifact":
            return {"data": {"createArtifact": self._create_artifact(variables["input"])}}
        if operation == "CreateArtifactManifest":
            return {
                "data": {"createArtifactManifest": self._create_artifact_manifest(variables, upload_base)}
            }
        if operation == "CreateArtifactFiles":
            return {
                "data": {"createArtifactFiles": self._create_artifact_files(variables["input"], upload_base)}
            }
        if operation == "CommitArtifact":
            return {"data": {"commitArtifact": self._commit_artifact(variables["artifactID"])}}
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
            files = [{"name": name, "uploadUrl": self._upload_url(upload_base, "run", path, name)}
                     for name in v["files"]]  # fmt: skip
            return {"runID": run.storage_id, "uploadHeaders": [], "files": files}

    def _upload_url(self, upload_base: str, kind: str, key: str, name: str) -> str:
        token = secrets.token_urlsafe(16)
        self._uploads[token] = (kind, key, name)
        return f"{upload_base}{_UPLOAD_PREFIX}{token}"

    def upload(self, token: str, content: bytes) -> None:
        with self._lock:
            if token not in self._uploads:
                raise _Refused(403, "upload URL not handed out by this server")
            kind, key, name = self._uploads[token]
            if kind == "run":
                self._records.runs[key].files[name] = content
                return
            artifact = self._records.artifacts[key]
            if artifact.state != PENDING:
                raise _Refused(400, f"upload to {artifact.qualified_name}, which is {artifact.state}")
            if kind == "artifact":
                artifact.files[name].content = content
            elif artifact.manifest_digest != _b64_md5(content):  # what CreateArtifactManifest declared
                raise _Refused(400, f"manifest of {artifact.name} is not the one declared (MD5 mismatch)")
            else:
                artifact.manifest = _json_object(content)

    # Artifacts, in the order wandb-core's ArtifactSaver sends them: CreateArtifact (PENDING, or an
    # existing COMMITTED version with the same digest: then nothing else is sent), CreateArtifactManifest
    # without upload, CreateArtifactFiles + a PUT per file, CreateArtifactManifest with the digest and an
    # upload URL + the manifest's PUT, CommitArtifact.
    def _create_artifact(self, v: dict[str, Any]) -> dict[str, Any]:
        for unmodelled in ("distributedID", "storageRegion"):  # patch manifests, regional storage
            if v.get(unmodelled) is not None:
                raise _Refused(400, f"CreateArtifact with {unmodelled} (not implemented by the stand-in)")
        entity = v.get("entityName") or self.default_entity
        project, name, type_ = v["projectName"], v["artifactCollectionName"], v["artifactTypeName"]
        with self._lock:
            run_path = None
            if v.get("runName"):
                run_path = f"{entity}/{project}/{v['runName']}"
                if run_path not in self._records.runs:
                    raise _Refused(404, f"CreateArtifact for unknown run {run_path}")
            collection = [a for a in self._records.artifacts.values()
                          if (a.entity, a.project, a.name) == (entity, project, name)]  # fmt: skip
            if any(a.type != type_ for a in collection):
                raise _Refused(
                    400, f"CreateArtifact {name!r} of type {type_!r}: the collection has another type"
                )
            committed = sorted((a for a in collection if a.state == COMMITTED), key=lambda a: a.version or 0)
            same = [a for a in committed if a.digest == v["digest"]]
            if same and v.get("enableDigestDeduplication"):
                artifact = same[-1]
            else:
                artifact = ArtifactRecord(
                    id=_global_id("Artifact", entity, project, name, str(len(collection))),
                    entity=entity,
                    project=project,
                    name=name,
                    type=type_,
                    digest=v["digest"],
                    run_path=run_path,
                    aliases=[alias["alias"] for alias in v.get("aliases") or []],
                    tags=[tag["tagName"] for tag in v.get("tags") or []],
                    description=v.get("description"),
                    metadata=None if v.get("metadata") is None else json.loads(v["metadata"]),
                    history_step=v.get("historyStep"),
                )
                self._records.artifacts[artifact.id] = artifact
            latest = {"id": committed[-1].id} if committed else None
            return {
                "artifact": {
                    "id": artifact.id,
                    "state": artifact.state,
                    "artifactSequence": {"latestArtifact": latest},
                }
            }

    def _pending_artifact(self, artifact_id: str, operation: str) -> ArtifactRecord:
        artifact = self._records.artifacts.get(artifact_id)
        if artifact is None:
            raise _Refused(404, f"{operation} for unknown artifact id {artifact_id!r}")
        if artifact.state != PENDING:
            raise _Refused(400, f"{operation} for {artifact.qualified_name}, which is {artifact.state}")
        return artifact

    def _create_artifact_manifest(self, v: dict[str, Any], upload_base: str) -> dict[str, Any]:
        # The query asks for file.uploadUrl and uploadHeaders only @include(if: $includeUpload).
        if (v["manifestType"], v["name"]) != ("FULL", MANIFEST_NAME):
            raise _Refused(
                400, f"CreateArtifactManifest {v['manifestType']} {v['name']} (only FULL is implemented)"
            )
        with self._lock:
            artifact = self._pending_artifact(v["artifactID"], "CreateArtifactManifest")
            if v["digest"]:
                artifact.manifest_digest = v["digest"]
            file: dict[str, Any] = {"id": _global_id("File", artifact.id, MANIFEST_NAME)}
            if v["includeUpload"]:
                file["uploadUrl"] = self._upload_url(upload_base, "manifest", artifact.id, MANIFEST_NAME)
                file["uploadHeaders"] = []
            return {"artifactManifest": {"id": _manifest_id(artifact.id), "file": file}}

    def _create_artifact_files(self, v: dict[str, Any], upload_base: str) -> dict[str, Any]:
        if (v["storageLayout"], v.get("cloudRegionID")) != ("V2", None):
            raise _Refused(
                400,
                f"CreateArtifactFiles with {v['storageLayout']}, region {v.get('cloudRegionID')} (V2 only)",
            )
        edges = []
        with self._lock:
            for spec in v["artifactFiles"]:
                artifact = self._pending_artifact(spec["artifactID"], "CreateArtifactFiles")
                if spec.get("artifactManifestID") != _manifest_id(artifact.id):
                    raise _Refused(
                        400, f"CreateArtifactFiles with manifest id {spec.get('artifactManifestID')!r}"
                    )
                if spec.get("uploadPartsInput"):
                    raise _Refused(
                        400, "CreateArtifactFiles with multipart upload (not implemented by the stand-in)"
                    )
                artifact.files[spec["name"]] = ArtifactFileRecord(spec["name"], spec["md5"])
                node = {
                    "storagePath": f"wandb_artifacts/{artifact.id}/{spec['name']}",
                    "uploadUrl": self._upload_url(upload_base, "artifact", artifact.id, spec["name"]),
                    "uploadHeaders": [],
                    "uploadMultipartUrls": None,
                    "artifact": {"id": artifact.id},  # the file's birth artifact
                }
                edges.append({"node": node})
        return {"files": {"edges": edges}}

    def _commit_artifact(self, artifact_id: str) -> dict[str, Any]:
        with self._lock:
            artifact = self._pending_artifact(artifact_id, "CommitArtifact")
            # The stand-in's own completeness check (a lost upload must fail the test, not pass unseen).
            if artifact.manifest is None:
                raise _Refused(400, f"CommitArtifact {artifact.name}: no manifest was uploaded")
            for path, digest in artifact.manifest_digests.items():
                file = artifact.files.get(path)
                if file is None or file.digest != digest or file.uploaded_digest != digest:
                    got = None if file is None else file.uploaded_digest
                    raise _Refused(
                        400,
                        f"CommitArtifact {artifact.name}: {path} arrived as {got}, manifest says {digest}",
                    )
            collection = [a for a in self._records.artifacts.values()
                          if (a.entity, a.project, a.name) == (artifact.entity, artifact.project, artifact.name)]  # fmt: skip
            artifact.version = sum(a.state == COMMITTED for a in collection)
            artifact.state = COMMITTED
            for other in collection:  # an alias names one version of a collection
                if other is not artifact:
                    other.aliases = [alias for alias in other.aliases if alias not in artifact.aliases]
            return {"artifact": {"id": artifact.id, "digest": artifact.digest}}

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
        except (KeyError, TypeError, AttributeError) as exc:  # a request shape the stand-in does not know
            refusal = _Refused(400, f"request shape not understood ({type(exc).__name__}: {exc})")
            stand_in._note(self.command, path, operation, refusal.status, str(refusal))
            self._answer(refusal.status, {"errors": [{"message": f"W&B stand-in: {refusal}"}]})
            return
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


def _manifest_id(artifact_id: str) -> str:
    return _global_id("ArtifactManifest", artifact_id, MANIFEST_NAME)


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

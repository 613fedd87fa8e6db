"""A real HTTP server on 127.0.0.1 that speaks SGLang's native `/generate` protocol (test helper).

Request shape checked as sglang's `GenerateReqInput` accepts it (`input_ids`, `sampling_params`,
`return_logprob`); response shaped as sglang's tokenizer manager builds it (`text`, `output_ids`,
`meta_info.finish_reason`, `meta_info.output_token_logprobs` as [logprob, token_id, text]).
Each test scripts the replies; every request body is recorded for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], tuple[int, Any]]  # request body -> (status, JSON body or raw str)


def ok_reply(output_ids: list[int], log_probs: list[float], *, finish: dict[str, Any] | None = None,
             text: str = "", weight_version: str = "default") -> Reply:
    def reply(request: dict[str, Any]) -> tuple[int, Any]:
        return 200, {
            "text": text,
            "output_ids": list(output_ids),
            "meta_info": {
                "id": "rid-1",
                "finish_reason": finish or {"type": "stop", "matched": output_ids[-1] if output_ids else None},
                "prompt_tokens": len(request["input_ids"]),
                "weight_version": weight_version,
                "completion_tokens": len(output_ids),
                "cached_tokens": 0,
                "output_token_logprobs": [[lp, tid, None] for lp, tid in zip(log_probs, output_ids, strict=True)],
            },
        }

    return reply


@dataclass
class FakeSGLang:
    url: str
    replies: list[Reply]
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)


def _handler(state: FakeSGLang) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            return

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(body)
            if self.path != "/generate":
                self._send(404, {"detail": "Not Found"})
                return
            problems = _request_problems(body)
            if problems:
                self._send(400, {"error": problems})
                return
            if state.delay_s:
                time.sleep(state.delay_s)
            reply = state.replies.pop(0) if len(state.replies) > 1 else state.replies[0]
            self._send(*reply(body))

        def _send(self, status: int, payload: Any) -> None:
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                return

    return Handler


def _request_problems(body: Any) -> list[str]:
    problems = []
    if not isinstance(body, dict):
        return ["body is not an object"]
    ids = body.get("input_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
        problems.append("input_ids must be a non-empty list of ints")
    if not isinstance(body.get("sampling_params"), dict):
        problems.append("sampling_params must be an object")
    if body.get("return_logprob") is not True:
        problems.append("return_logprob must be true")
    if "text" in body:
        problems.append("text and input_ids are exclusive")
    return problems


@contextmanager
def fake_sglang(replies: list[Reply], *, delay_s: float = 0.0) -> Iterator[FakeSGLang]:
    """Serve on an ephemeral port of 127.0.0.1 for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    server.block_on_close = False
    state = FakeSGLang(url=f"http://127.0.0.1:{server.server_address[1]}", replies=replies, delay_s=delay_s)
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

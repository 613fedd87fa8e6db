"""Lesson backends: rules, and llm against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from chat_templates import QWEN35_STYLE
from jinja2.sandbox import ImmutableSandboxedEnvironment
from test_analyst_compiler_ledger import card

from shopsimrl.analyst.config import LlmSettings
from shopsimrl.analyst.lessons import RULE_LESSONS, LlmBackend, RulesBackend, lesson_prompt, parse_lesson
from shopsimrl.shop.failure_modes import FailureMode

GOOD = "Compare the price with the limit before adding a product to the cart."


class _ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "good"
        self.last_body: dict = {}
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()  # set at teardown so that sleeping handlers end at once


class _Handler(BaseHTTPRequestHandler):
    server: _ChatServer

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        with server.lock:
            server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            server.last_body = body
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            self._answer(server.mode)
        finally:
            with server.lock:
                server.in_flight -= 1

    def _answer(self, mode: str) -> None:
        if mode == "timeout":
            self.server.release.wait(10)
            return
        if mode == "500":
            self._send(500, {"error": {"message": "boom", "type": "server_error"}})
            return
        if mode == "broken_body":
            self._send_raw(200, b'{"id": "x", "choices": [')
            return
        if mode == "qwen35":
            self._send_completion(_qwen35_answer(self.server.last_body))
            return
        self.server.release.wait(0.05)  # overlap concurrent requests
        content = {"good": json.dumps({"lesson": GOOD}), "fenced": f"```json\n{json.dumps({'lesson': GOOD})}\n```",
                   "malformed": '{"lesson": "Check the cart.",}', "unterminated": '{"lesson": "Check', "no_lesson": '{"advice": "x"}'}[mode]  # fmt: skip
        self._send_completion(content)

    def _send_completion(self, content: str) -> None:
        self._send(200, {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}]})  # fmt: skip

    def _send(self, status: int, payload: dict) -> None:
        self._send_raw(status, json.dumps(payload).encode())

    def _send_raw(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# What a Qwen3.5 model served by SGLang answers (no reasoning parser): the server renders the messages
# with the chat template and the request's chat_template_kwargs; thinking is on unless
# enable_thinking is false, and then the content is the reasoning, braces and all, before the answer.
REASONING = ('The agent added {"product": "P######", "price": 310.0} to the cart although the instruction '
             'said {"max_price": 300}; it never compared them. So the lesson is about the price check.')


def _qwen35_answer(body: dict) -> str:
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(QWEN35_STYLE)
    prompt = template.render(messages=body["messages"], tools=None, add_generation_prompt=True,
                             **body.get("chat_template_kwargs", {}))  # fmt: skip
    answer = json.dumps({"lesson": GOOD})
    if prompt.endswith("<think>\n"):  # thinking: the reasoning, then the answer
        return f"{REASONING}\n</think>\n\n{answer}"
    assert prompt.endswith("<think>\n\n</think>\n\n"), prompt[-40:]
    return answer


@pytest.fixture
def server() -> Iterator[_ChatServer]:
    srv = _ChatServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def backend(srv: _ChatServer, **settings) -> LlmBackend:
    values = {"base_url": f"http://127.0.0.1:{srv.server_address[1]}/v1", "model": "analyst", "timeout_s": 5.0,
              "max_retries": 1, "concurrency": 2, **settings}  # fmt: skip
    return LlmBackend(LlmSettings(**values), environ={"ANALYST_KEY": "k-test"})


CARDS = [card(n, FailureMode.OVER_BUDGET) for n in range(6)]


def test_rules_backend_gives_the_mode_lesson():
    [result] = RulesBackend().lessons([CARDS[0]])
    assert result.lesson.text == RULE_LESSONS[FailureMode.OVER_BUDGET] and result.error is None


def test_good_answers_become_lessons_with_bounded_concurrency(server):
    results = backend(server, api_key_env="ANALYST_KEY").lessons(CARDS)
    assert [r.lesson.text for r in results] == [GOOD] * 6
    assert all(r.lesson.backend == "llm" and r.error is None for r in results)
    assert len(server.requests) == 6 and server.max_in_flight <= 2
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["body"]["model"] == "analyst"
    assert request["auth"] == "Bearer k-test"


def test_a_fenced_json_answer_is_accepted(server):
    server.mode = "fenced"
    assert backend(server).lessons(CARDS[:1])[0].lesson.text == GOOD


def test_a_lesson_request_to_a_qwen35_template_server_parses(server):
    """Qwen3.5's template thinks unless told not to: the request says enable_thinking false."""
    server.mode = "qwen35"
    [result] = backend(server).lessons(CARDS[:1])
    assert result.error is None and result.lesson.text == GOOD
    body = server.requests[0]["body"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_tokens"] == 1024


def test_an_answer_with_reasoning_before_it_gives_the_last_json_object():
    """A server that thinks anyway (no template switch): braces in the reasoning are not the answer."""
    answer = f"{REASONING}\n</think>\n\n" + json.dumps({"lesson": GOOD, "why": {"turn": 3}})
    assert parse_lesson(answer) == GOOD
    assert parse_lesson(f"{REASONING} then the answer " + json.dumps({"lesson": "Use {braces} as text."})) == (
        "Use {braces} as text.")
    assert parse_lesson('An unclosed { in the reasoning, then {"lesson": "Check it."}') == "Check it."


def test_http_500_is_retried_then_an_analysis_error(server):
    server.mode = "500"
    [result] = backend(server).lessons(CARDS[:1])
    assert result.lesson is None
    assert result.error == f"HTTP 500 from http://127.0.0.1:{server.server_address[1]}/v1 (1 retries)"
    assert len(server.requests) == 2  # the first try and one retry


def test_timeout_is_an_analysis_error(server):
    server.mode = "timeout"
    [result] = backend(server, timeout_s=0.3).lessons(CARDS[:1])
    assert result.lesson is None and result.error == "timeout after 0.3 s (1 retries)"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("malformed", "unparseable answer: answer is not valid JSON"),
        ("unterminated", "unparseable answer: no JSON object in the answer"),
        ("no_lesson", 'unparseable answer: answer has no non-empty "lesson" string'),
        ("broken_body", "unparseable answer: the response body is not JSON"),
    ],
)
def test_malformed_answers_are_analysis_errors(server, mode, reason):
    server.mode = mode
    [result] = backend(server).lessons(CARDS[:1])
    assert result.lesson is None and result.error.startswith(reason), result.error


def test_the_prompt_carries_no_gold_and_masks_product_ids():
    prompt = lesson_prompt(CARDS[0])
    gold = CARDS[0].audit["gold"]
    assert json.loads(prompt)["failure_mode"] == "over_budget"
    for pid in gold["gold_product_ids"]:
        assert pid not in prompt
    assert f"{gold['price_ceiling']:.2f}" in CARDS[0].audit["instruction"]  # the instruction the agent saw


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("Buy the grey hoodie under $42.00", "no JSON object in the answer"),
        ('{"lesson": Buy the grey hoodie}', "answer is not valid JSON (Expecting value)"),
        ('{"text": "Buy the grey hoodie"}', 'answer has no non-empty "lesson" string'),
    ],
)
def test_an_unparseable_answer_is_described_by_length_and_hash_never_quoted(answer, reason):
    # Before: the first 80 characters of the answer were quoted, and the reason went into
    # failure_cards.jsonl and analysis_summary.json (the W&B artifact) with whatever gold it held.
    digest = hashlib.sha256(answer.encode()).hexdigest()[:12]
    with pytest.raises(ValueError) as excinfo:
        parse_lesson(answer)
    assert str(excinfo.value) == f"{reason} ({len(answer)} characters, sha256:{digest})"


def test_parse_lesson_rules():
    assert parse_lesson('x {"lesson": "  Check   it. "} y') == "Check it."
    with pytest.raises(ValueError, match="empty answer"):
        parse_lesson("")
    with pytest.raises(ValueError, match="more than 600"):
        parse_lesson(json.dumps({"lesson": "a" * 601}))

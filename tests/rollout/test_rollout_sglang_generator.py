"""SGLangGenerator against a real HTTP server on 127.0.0.1 speaking SGLang's /generate protocol."""

from __future__ import annotations

import asyncio
import socket

import pytest
from sglang_fake_server import fake_sglang, ok_reply

from shopsimrl.errors import ModelServiceError, TechnicalErrorKind
from shopsimrl.rollout.generators import FinishReason, GenerationAborted, SGLangGenerator

PARAMS = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "stop_token_ids": [258]}


def _run(generator: SGLangGenerator, ids: list[int]):
    async def go():
        try:
            return await generator.generate(ids, PARAMS)
        finally:
            await generator.aclose()

    return asyncio.run(go())


def test_success_parses_tokens_logprobs_and_finish_reason():
    with fake_sglang([ok_reply([72, 105, 258], [-0.5, -1.25, -0.125], text="Hi", weight_version="7")]) as server:
        result = _run(SGLangGenerator(server.url, timeout_s=5), [1, 2, 3])
    assert result.token_ids == [72, 105, 258]
    assert result.log_probs == [-0.5, -1.25, -0.125]
    assert result.finish_reason is FinishReason.STOP
    assert result.text == "Hi"
    assert result.weight_version == "7"
    assert server.requests == [{"input_ids": [1, 2, 3], "sampling_params": PARAMS, "return_logprob": True}]


def test_length_finish_reason():
    reply = ok_reply([5, 6], [-1.0, -2.0], finish={"type": "length", "length": 2})
    with fake_sglang([reply]) as server:
        result = _run(SGLangGenerator(server.url, timeout_s=5), [1])
    assert result.finish_reason is FinishReason.LENGTH
    assert result.token_ids == [5, 6]


def test_http_500_is_model_service_error():
    with fake_sglang([lambda request: (500, {"error": "CUDA out of memory"})]) as server:
        with pytest.raises(ModelServiceError) as info:
            _run(SGLangGenerator(server.url, timeout_s=5), [1])
    assert info.value.kind is TechnicalErrorKind.MODEL_SERVICE
    assert info.value.message == f'HTTP 500 from {server.url}/generate: {{"error": "CUDA out of memory"}}'


def test_timeout_is_model_service_error():
    with fake_sglang([ok_reply([1], [-1.0])], delay_s=1.0) as server:
        with pytest.raises(ModelServiceError) as info:
            _run(SGLangGenerator(server.url, timeout_s=0.2), [1])
    assert info.value.message == f"timeout after 0.2s waiting for {server.url}/generate (ReadTimeout)"


def test_connection_refused_is_model_service_error():
    with socket.socket() as probe:  # a port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelServiceError) as info:
        _run(SGLangGenerator(f"http://127.0.0.1:{port}", timeout_s=2), [1])
    assert info.value.message.startswith(f"connection to http://127.0.0.1:{port}/generate failed: ConnectError")


def test_abort_finish_reason_is_generation_aborted():
    finish = {"type": "abort", "message": "Abort in waiting queue", "status_code": None, "err_type": None}
    with fake_sglang([ok_reply([], [], finish=finish)]) as server:
        with pytest.raises(GenerationAborted) as info:
            _run(SGLangGenerator(server.url, timeout_s=5), [1])
    assert isinstance(info.value, ModelServiceError)
    assert info.value.message == f"{server.url}/generate aborted the request: Abort in waiting queue"


def test_malformed_body_is_model_service_error():
    with fake_sglang([lambda request: (200, {"text": "no meta"})]) as server:
        with pytest.raises(ModelServiceError) as info:
            _run(SGLangGenerator(server.url, timeout_s=5), [1])
    assert info.value.message == f"response of {server.url}/generate has no meta_info object: {{'text': 'no meta'}}"


def test_output_ids_disagreeing_with_logprobs_is_rejected():
    def reply(request):
        status, body = ok_reply([1, 2], [-1.0, -1.0])(request)
        body["output_ids"] = [1, 3]
        return status, body

    with fake_sglang([reply]) as server:
        with pytest.raises(ModelServiceError, match="disagree with output_token_logprobs"):
            _run(SGLangGenerator(server.url, timeout_s=5), [1])


def test_client_survives_across_event_loops():
    replies = [ok_reply([7], [-0.5]), ok_reply([8], [-0.25])]
    with fake_sglang(replies) as server:
        generator = SGLangGenerator(server.url, timeout_s=5)
        first = asyncio.run(generator.generate([1], PARAMS))
        second = asyncio.run(generator.generate([1], PARAMS))
    assert (first.token_ids, second.token_ids) == ([7], [8])


def test_base_url_must_be_http():
    with pytest.raises(ValueError, match="base_url must start with http:// or https://, got '127.0.0.1:1'"):
        SGLangGenerator("127.0.0.1:1")

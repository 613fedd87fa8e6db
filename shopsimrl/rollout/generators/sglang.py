"""`SGLangGenerator`: SGLang's native `/generate` endpoint over HTTP (token ids in and out).

Request and response shapes follow sglang's source (cited in docs/rollout.md):
`python/sglang/srt/managers/io_struct.py::GenerateReqInput` for the request
(`input_ids`, `sampling_params`, `return_logprob`) and
`python/sglang/srt/managers/tokenizer_manager.py` (`_handle_batch_output`) for the response
(`{"text", "output_ids", "meta_info": {"finish_reason": {"type": ...}, "output_token_logprobs":
[[logprob, token_id, text|null], ...], "weight_version", ...}}`).

Every way the service can fail becomes a `ModelServiceError`: an HTTP status >= 400, a timeout,
a refused or dropped connection, a body that is not the documented shape, and finish reason
`abort` (`GenerationAborted`).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import httpx

from shopsimrl.errors import ModelServiceError
from shopsimrl.rollout.generators.base import FinishReason, GenerationAborted, GenerationResult

_BODY_EXCERPT = 300  # characters of an error body kept in the message


class SGLangGenerator:
    """POSTs `{base_url}/generate`; one `httpx.AsyncClient` per event loop (clients are loop-bound,
    and the rollout loop and the background retry thread's loop share one generator)."""

    def __init__(self, base_url: str, timeout_s: float = 120.0):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.base_url}/generate"

    def _client_for_running_loop(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None or client.is_closed:
                client = self._clients[loop] = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s))
            return client

    async def aclose(self) -> None:
        """Close the client of the running loop (clients of finished loops are collected with them)."""
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        payload = {
            "input_ids": list(input_ids),
            "sampling_params": dict(sampling_params),
            "return_logprob": True,
        }
        client = self._client_for_running_loop()
        try:
            response = await client.post(self.url, json=payload)
        except httpx.TimeoutException as exc:
            raise ModelServiceError(
                f"timeout after {self.timeout_s:g}s waiting for {self.url} ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            raise ModelServiceError(f"connection to {self.url} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise ModelServiceError(
                f"HTTP {response.status_code} from {self.url}: {response.text[:_BODY_EXCERPT]}"
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise ModelServiceError(
                f"response of {self.url} is not JSON: {response.text[:_BODY_EXCERPT]!r}"
            ) from exc
        return parse_generate_response(body, url=self.url)


def parse_generate_response(body: Any, *, url: str = "/generate") -> GenerationResult:
    """Turn one non-streaming `/generate` response body into a `GenerationResult`."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise ModelServiceError(f"response of {url} has no meta_info object: {str(body)[:_BODY_EXCERPT]}")
    meta = body["meta_info"]
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or "type" not in finish:
        raise ModelServiceError(f"response of {url} has no meta_info.finish_reason.type: {finish!r}")
    kind = finish["type"]
    if kind == FinishReason.ABORT:
        raise GenerationAborted(f"{url} aborted the request: {finish.get('message') or 'no message'}")
    try:
        reason = FinishReason(kind)
    except ValueError:
        raise ModelServiceError(f"response of {url} has unknown finish_reason.type {kind!r}") from None

    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise ModelServiceError(f"response of {url} has no meta_info.output_token_logprobs list")
    token_ids: list[int] = []
    log_probs: list[float] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, (list, tuple)) or len(entry) < 2:
            raise ModelServiceError(
                f"response of {url}: output_token_logprobs[{position}] is not [logprob, token_id, ...]: {entry!r}"
            )
        log_probs.append(float(entry[0]))
        token_ids.append(int(entry[1]))
    output_ids = body.get("output_ids")
    if output_ids is not None and list(output_ids) != token_ids:
        raise ModelServiceError(
            f"response of {url}: output_ids ({len(output_ids)} tokens) disagree with "
            f"output_token_logprobs ({len(token_ids)} tokens)"
        )
    weight_version = meta.get("weight_version")
    return GenerationResult(
        token_ids=token_ids,
        log_probs=log_probs,
        finish_reason=reason,
        text=body.get("text") or "",
        weight_version=None if weight_version is None else str(weight_version),
    )

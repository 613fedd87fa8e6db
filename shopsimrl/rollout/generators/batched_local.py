"""`BatchedLocalHFGenerator`: concurrent `generate()` calls decoded as one left-padded batch.

The local backend runs the n sibling episodes of a group (and the groups of a wave) as concurrent
asyncio tasks. `LocalHFGenerator` serves them one sequence at a time; this generator queues their
requests and, once the event loop has let every runnable episode submit, decodes them together:

* a prefill of the prompts, then one decode step per token for the whole batch with the KV cache.
  With KV reuse (`prefix_cache=True`, the default) each prompt encodes only what the
  `PrefixCache` does not hold already: an episode's next turn reuses its previous turn, a sibling
  reuses the group's shared prompt, and every finished row is stored for its next turn
  (prefix_cache.py says how memory stays bounded). With `prefix_cache=False` (the path before KV
  reuse, kept for bench/bench_rollout.py) one forward encodes the left-padded prompts whole
  (prefill.py);
* every row samples with its own parameters and its own random stream and stops on its own
  (eos, `<|im_end|>`, its `stop_token_ids`, its stop strings, its `max_new_tokens`); a finished row
  is dropped from the batch and its cache rows with it;
* a flush happens when `max_batch` requests wait, or after `settle_rounds` consecutive event-loop
  rounds (`await asyncio.sleep(0)`) in which no new request arrived.

Sampling rules and log-probs are exactly `LocalHFGenerator`'s (the same helper draws the token):
`log_probs[i]` is `log_softmax(logits / temperature)[token_ids[i]]` over the full vocabulary
(temperature 0, i.e. greedy, uses temperature 1). top-p and top-k only choose which token is drawn;
they do not renormalise the reported log-prob. This is the distribution slime's trainer recomputes
(Megatron actor: `logits.div_(args.rollout_temperature)` then log-softmax over the vocabulary) and
the one SGLang reports by default.

Random streams: a request with `sampling_seed` uses a generator seeded with it (as
`LocalHFGenerator` does); any other request gets a row seed drawn from the generator's own stream
(seeded by `seed`) in arrival order, so the same seed and the same calls give the same tokens.
Greedy rows agree with `LocalHFGenerator` token for token (padding changes float rounding only),
and the cached path agrees with the uncached one: same tokens, log-probs within 1e-4 in float32
(tests/rollout/test_rollout_cached_generator.py).

A batch runs synchronously inside the event loop, as `LocalHFGenerator` does; an exception raised
while it runs is delivered to every caller of that batch. One queue per event loop, so a worker
thread with its own loop (the full-skill retries) can use the same generator; the model itself is
used by one batch at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from shopsimrl.rollout.generators.base import FinishReason, GenerationResult
from shopsimrl.rollout.generators.decode_batch import PaddedBatch, RowBatch
from shopsimrl.rollout.generators.prefill import GenerationProfile, prefill_cached, prefill_padded
from shopsimrl.rollout.generators.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache, PrefixCacheStats
from shopsimrl.rollout.generators.sampling import SamplingParams, default_stop_ids, sample_token

_ROW_SEED_BOUND = 2**62  # row seeds drawn from the generator's stream lie in [0, 2**62)


@dataclass(frozen=True)
class BatchStats:
    """What the generator has run so far: batches, requests in them, and the largest batch."""

    batches: int = 0
    requests: int = 0
    largest: int = 0


@dataclass
class _Request:
    input_ids: list[int]
    params: SamplingParams


@dataclass
class _LoopQueue:
    """The waiting requests of one event loop and the task that flushes them."""

    pending: list[tuple[_Request, asyncio.Future[GenerationResult]]] = field(default_factory=list)
    flusher: asyncio.Task[None] | None = None


class BatchedLocalHFGenerator:
    """Batches concurrent requests; each row behaves as `LocalHFGenerator` would (see module doc)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        seed: int = 0,
        stop_token_ids: list[int] | None = None,
        max_batch: int = 16,
        settle_rounds: int = 2,
        prefix_cache: bool = True,
        cache_max_bytes: int = DEFAULT_MAX_BYTES,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        if settle_rounds < 1:
            raise ValueError(f"settle_rounds={settle_rounds} must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.settle_rounds = settle_rounds
        self.stop_token_ids = set(stop_token_ids or ()) | default_stop_ids(tokenizer)
        self._rng = torch.Generator(device="cpu").manual_seed(seed)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue] = (
            weakref.WeakKeyDictionary()
        )
        self._queues_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stats = BatchStats()
        self._profile = GenerationProfile()
        self._prefix_cache = PrefixCache(cache_max_bytes) if prefix_cache else None

    @property
    def stats(self) -> BatchStats:
        return self._stats

    @property
    def profile(self) -> GenerationProfile:
        """Prefill vs decode time and tokens so far (bench/bench_rollout.py reports them)."""
        return self._profile

    @property
    def cache_stats(self) -> PrefixCacheStats | None:
        """The prefix cache's counters; None when KV reuse is off (or the model cannot use it)."""
        return None if self._prefix_cache is None else self._prefix_cache.stats

    def clear_cache(self) -> None:
        """Free every stored KV cache now (they are also dropped when the weights change)."""
        with self._model_lock:
            if self._prefix_cache is not None:
                self._prefix_cache.clear()

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult:
        request = _request(input_ids, sampling_params)  # a bad request fails its own caller only
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()
        queue = self._queue(loop)
        queue.pending.append((request, future))
        if queue.flusher is None or queue.flusher.done():
            queue.flusher = loop.create_task(self._flush(queue))
        return await future

    def generate_batch_sync(
        self, requests: Sequence[tuple[list[int], dict[str, Any]]]
    ) -> list[GenerationResult]:
        """Run `(input_ids, sampling_params)` requests as batches of at most `max_batch`, in order."""
        built = [_request(ids, params) for ids, params in requests]
        results: list[GenerationResult] = []
        for start in range(0, len(built), self.max_batch):
            results.extend(self._run_batch(built[start : start + self.max_batch]))
        return results

    # ------------------------------------------------------------------ queueing
    def _queue(self, loop: asyncio.AbstractEventLoop) -> _LoopQueue:
        with self._queues_lock:
            queue = self._queues.get(loop)
            if queue is None:
                queue = self._queues[loop] = _LoopQueue()
            return queue

    async def _flush(self, queue: _LoopQueue) -> None:
        try:
            while queue.pending:
                quiet = 0
                while len(queue.pending) < self.max_batch and quiet < self.settle_rounds:
                    before = len(queue.pending)
                    await asyncio.sleep(0)  # let every runnable episode reach its next generate()
                    quiet = quiet + 1 if len(queue.pending) == before else 0
                batch = queue.pending[: self.max_batch]
                del queue.pending[: self.max_batch]
                live = [(request, future) for request, future in batch if not future.done()]
                if not live:
                    continue  # every caller of this batch was cancelled
                try:
                    results = self._run_batch([request for request, _ in live])
                except Exception as error:  # noqa: BLE001 - handed to every caller, not swallowed
                    for _, future in live:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (_, future), result in zip(live, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            # Cancelled while waiting (the loop is shutting down): no caller may wait forever.
            for _, future in queue.pending:
                future.cancel()
            queue.pending.clear()

    # ------------------------------------------------------------------ decoding
    def _row_rng(self, params: SamplingParams) -> torch.Generator:
        if params.seed is not None:
            return torch.Generator(device="cpu").manual_seed(params.seed)
        row_seed = int(torch.randint(0, _ROW_SEED_BOUND, (1,), generator=self._rng))
        return torch.Generator(device="cpu").manual_seed(row_seed)

    def _run_batch(self, requests: Sequence[_Request]) -> list[GenerationResult]:
        tokens: list[list[int]] = [[] for _ in requests]
        log_probs: list[list[float]] = [[] for _ in requests]
        reasons = [FinishReason.LENGTH] * len(requests)
        rows = [i for i, request in enumerate(requests) if request.params.max_new_tokens > 0]
        # One batch at a time across threads: the model, the seed stream and the stats are shared.
        with self._model_lock:
            rngs = [self._row_rng(request.params) for request in requests]
            if rows:
                self._decode(requests, rows, rngs, tokens, log_probs, reasons)
            self._stats = BatchStats(
                batches=self._stats.batches + 1,
                requests=self._stats.requests + len(requests),
                largest=max(self._stats.largest, len(requests)),
            )
        return [
            GenerationResult(
                token_ids=tokens[i],
                log_probs=log_probs[i],
                finish_reason=reasons[i],
                text=self.tokenizer.decode(tokens[i], skip_special_tokens=False),
            )
            for i in range(len(requests))
        ]

    def _decode(
        self,
        requests: Sequence[_Request],
        rows: list[int],
        rngs: list[torch.Generator],
        tokens: list[list[int]],
        log_probs: list[list[float]],
        reasons: list[FinishReason],
    ) -> None:
        """Fill `tokens`, `log_probs` and `reasons` of the requests listed in `rows`."""
        was_training = self.model.training
        self.model.eval()  # dropout off while sampling; restored below
        try:
            with torch.inference_mode():
                started = time.perf_counter()
                inputs = [requests[i].input_ids for i in rows]
                batch: PaddedBatch | RowBatch | None = None
                if self._prefix_cache is not None:
                    room = max(requests[i].params.max_new_tokens for i in rows)
                    batch = prefill_cached(self.model, inputs, self._prefix_cache, room)
                    if batch is None:  # this model's cache layers cannot be cut and stacked
                        self._prefix_cache = None
                if batch is None:
                    batch = prefill_padded(self.model, inputs, self._pad_id())
                prefill_s = time.perf_counter() - started
                self._decode_steps(requests, rows, rngs, tokens, log_probs, reasons, batch)
                self._profile = self._profile.add(
                    prefill_s=prefill_s,
                    decode_s=time.perf_counter() - started - prefill_s,
                    prefill_tokens=batch.encoded_tokens,
                    reused_tokens=batch.reused_tokens,
                    decode_tokens=sum(len(tokens[i]) for i in rows),
                )
        finally:
            if was_training:
                self.model.train()

    def _decode_steps(
        self,
        requests: Sequence[_Request],
        rows: list[int],
        rngs: list[torch.Generator],
        tokens: list[list[int]],
        log_probs: list[list[float]],
        reasons: list[FinishReason],
        batch: PaddedBatch | RowBatch,
    ) -> None:
        """One decode step per token on the prefilled batch; finished rows leave it (and are stored)."""
        stop_ids = [
            self.stop_token_ids | set(requests[i].params.stop_token_ids) for i in range(len(requests))
        ]
        while True:
            finished: list[int] = []
            going: dict[int, int] = {}  # request index -> the token it feeds next
            for b, i in enumerate(rows):
                params = requests[i].params
                token, log_prob = sample_token(batch.logits[b], params, rngs[i])
                tokens[i].append(token)
                log_probs[i].append(log_prob)
                if token in stop_ids[i] or self._hits_stop_string(tokens[i], params.stop):
                    reasons[i] = FinishReason.STOP
                    finished.append(b)
                elif len(tokens[i]) < params.max_new_tokens:
                    going[i] = token
                else:
                    finished.append(b)
            if self._prefix_cache is not None and isinstance(batch, RowBatch):
                # What a finished row has seen (its last token was never fed) serves its next turn.
                for b in finished:
                    i = rows[b]
                    self._prefix_cache.insert(requests[i].input_ids + tokens[i][:-1], batch.row_layers(b))
            if not going:
                return
            if finished:
                # A finished row leaves the batch: later steps cost only the rows still going.
                rows = [rows[b] for b in batch.drop(finished)]
            batch.step(self.model, [going[i] for i in rows])

    def _pad_id(self) -> int:
        # Padded positions are masked out, so any valid id will do.
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0

    def _hits_stop_string(self, token_ids: list[int], stops: tuple[str, ...]) -> bool:
        if not stops:
            return False
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return any(text.endswith(stop) for stop in stops)


def _request(input_ids: list[int], sampling_params: dict[str, Any]) -> _Request:
    if not input_ids:
        raise ValueError("input_ids is empty: a generation needs at least one prompt token")
    return _Request(input_ids=[int(t) for t in input_ids], params=SamplingParams.from_dict(sampling_params))

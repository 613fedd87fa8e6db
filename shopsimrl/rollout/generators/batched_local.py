"""`BatchedLocalHFGenerator`: concurrent `generate()` calls decoded as one batch.

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
  is dropped from the batch and its caller gets its result at once;
* continuous batching (with KV reuse): after a step in which rows finished, the event loop runs
  their episodes (tool call, observation) until they send their next turn, and those requests join
  the running batch, up to `max_batch` rows, instead of waiting for its slowest row. Without KV
  reuse a batch runs to its end and the requests that came meanwhile form the next one;
* prompt lookup (with KV reuse, `draft_tokens` > 0): a step feeds each row, after its last token,
  up to `draft_tokens` draft tokens copied from its own context (prompt_lookup.py); the row draws
  from the logits after its last token, and while the token drawn equals the next draft it also
  draws from the logits after that draft, so one step yields 1 to `draft_tokens + 1` tokens. Every
  token is still drawn by the same rule from its row's own stream, in order, from logits that saw
  exactly the tokens drawn before it: drafts change how many forwards a row takes, not what it
  draws (the drafts it does not confirm leave its cache, decode_batch.RowBatch.keep_drawn);
* a batch starts when `max_batch` requests wait, or after `settle_rounds` consecutive event-loop
  rounds (`await asyncio.sleep(0)`) in which no new request arrived; rows join the same way;
* with a `recorder` (and KV reuse), the hidden states entering the recorder's layer are handed over:
  a row's prompt right after its prefill, its whole turn (what the prefix cache stores) when it
  finishes. The local backend's `FrozenTrunk` records so, and the GRPO update reads the frozen
  layers' output of every trajectory back instead of recomputing it (hidden_tap.py).

Sampling rules and log-probs are exactly `LocalHFGenerator`'s (the same helper draws the token):
`log_probs[i]` is `log_softmax(logits / temperature)[token_ids[i]]` over the full vocabulary
(temperature 0, i.e. greedy, uses temperature 1). top-p and top-k only choose which token is drawn;
they do not renormalise the reported log-prob. This is the distribution slime's trainer recomputes
(Megatron actor: `logits.div_(args.rollout_temperature)` then log-softmax over the vocabulary) and
the one SGLang reports by default.

Random streams: a request with `sampling_seed` uses a generator seeded with it (as
`LocalHFGenerator` does). Any other request draws its row seed from its caller's stream: each
caller (the asyncio task that awaits `generate`, an episode) gets a stream seeded from the
generator's own (seeded by `seed`) in the order callers first ask, and `generate_batch_sync`'s
requests one each, in order. So the same seed and the same calls give the same tokens however the
requests are batched: turn by turn without KV reuse, continuously with it.
Greedy rows agree with `LocalHFGenerator` token for token (padding changes float rounding only),
and the cached path agrees with the uncached one: same tokens, log-probs within 1e-4 in float32
(tests/rollout/test_rollout_cached_generator.py).

The model runs synchronously inside the event loop, as in `LocalHFGenerator`, one step at a time
between the loop's other work; an exception raised while a batch runs is delivered to every caller
still in it. One queue per event loop, so a worker thread with its own loop (the full-skill
retries) can use the same generator; the model is used by one thread at a time (a lock around
every prefill and step).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from shopsimrl.rollout.generators.base import FinishReason, GenerationResult
from shopsimrl.rollout.generators.decode_batch import PaddedBatch, RowBatch
from shopsimrl.rollout.generators.hidden_tap import HiddenRecorder, HiddenTap
from shopsimrl.rollout.generators.precision import InferencePrecision, kv_cache_dtype
from shopsimrl.rollout.generators.prefill import (
    EncodedRows,
    GenerationProfile,
    encode_rows,
    prefill_padded,
    row_batch,
)
from shopsimrl.rollout.generators.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache, PrefixCacheStats
from shopsimrl.rollout.generators.prompt_lookup import PromptLookup
from shopsimrl.rollout.generators.sampling import SamplingParams, default_stop_ids, sample_token

_ROW_SEED_BOUND = 2**62  # row seeds drawn from the generator's stream lie in [0, 2**62)
# Draft tokens per row and step. On the demo's rollouts (docs/benchmarks.md, "Prompt lookup") 4 drafts
# made a row draw 3.1 tokens per step it took part in, and decode steps fell 1,108 -> 356; 8 drafts
# gave 268 steps but barely less time (88 s against 92 s): wider blocks cost compute. A step feeding
# 5 tokens a row costs little more than one feeding 1, since a CPU decode step mostly reads the weights.
DRAFT_TOKENS = 4


@dataclass(frozen=True)
class BatchStats:
    """What the generator has run so far: `batches` (times waiting requests were taken in: a new batch,
    or rows joining a running one), the requests in them, and the most rows decoding at once."""

    batches: int = 0
    requests: int = 0
    largest: int = 0


@dataclass
class _Request:
    input_ids: list[int]
    params: SamplingParams
    rng: torch.Generator | None = None  # the row's random stream, set when the request is queued


@dataclass
class _LoopQueue:
    """The waiting requests of one event loop and the task that flushes them."""

    pending: list[tuple[_Request, asyncio.Future[GenerationResult]]] = field(default_factory=list)
    flusher: asyncio.Task[None] | None = None


@dataclass
class _Row:
    """A request being decoded: what it has drawn so far and why it stopped."""

    request: _Request
    future: asyncio.Future[GenerationResult] | None
    stop_ids: set[int]
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    reason: FinishReason = FinishReason.LENGTH
    drafts: list[int] = field(default_factory=list)  # fed by the last step after the last token
    lookup: PromptLookup | None = None  # the row's context so far, for drafts (made at its first step)
    # With a recorder: the hidden states at its layer of the row's positions `hidden_start:` so far
    # (input_ids + tokens[:-1]), and those of the tokens the last step fed, until the draws say how
    # many of them stay.
    hidden_start: int = 0
    hidden: list[torch.Tensor] | None = None
    pending: torch.Tensor | None = None


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
        draft_tokens: int = DRAFT_TOKENS,
        recorder: HiddenRecorder | None = None,
        compute_dtype: torch.dtype = torch.float32,
        kv_dtype: torch.dtype | None = None,
    ):
        precision = InferencePrecision(model, compute_dtype)  # an unknown dtype is an error here
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens={draft_tokens} must be >= 0 (0: no prompt lookup)")
        if settle_rounds < 1:
            raise ValueError(f"settle_rounds={settle_rounds} must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.settle_rounds = settle_rounds
        self.draft_tokens = draft_tokens
        self.stop_token_ids = set(stop_token_ids or ()) | default_stop_ids(tokenizer)
        self._rng = torch.Generator(device="cpu").manual_seed(seed)
        self._callers: weakref.WeakKeyDictionary[asyncio.Task[Any], torch.Generator] = (
            weakref.WeakKeyDictionary()
        )
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue] = (
            weakref.WeakKeyDictionary()
        )
        self._queues_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stats = BatchStats()
        self._profile = GenerationProfile()
        # The caches' keys and values: the compute dtype's (bfloat16 under bfloat16, prefix_cache.py) unless
        # `kv_dtype` says otherwise (torch.float32 under bfloat16: the float32 caches of before, for a bench).
        cache_dtype = kv_cache_dtype(compute_dtype if kv_dtype is None else kv_dtype)
        self._prefix_cache = PrefixCache(cache_max_bytes, kv_dtype=cache_dtype) if prefix_cache else None
        # Hands every row's hidden states at `recorder.layer` over (hidden_tap.py); with KV reuse only.
        self._recorder = recorder
        # bfloat16: the forwards under autocast with bfloat16 copies of the linear weights (precision.py).
        self.compute_dtype = compute_dtype
        self._precision = precision

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
        request.rng = self._row_rng(request.params, asyncio.current_task())
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
        for request in built:
            request.rng = self._row_rng(request.params, None)
        results: list[GenerationResult] = []
        for start in range(0, len(built), self.max_batch):
            results.extend(self._run_batch(built[start : start + self.max_batch]))
        return results

    # ------------------------------------------------------------------ random streams
    def _row_rng(self, params: SamplingParams, caller: asyncio.Task[Any] | None) -> torch.Generator:
        """A request's stream: its `sampling_seed`, else the next seed of its caller's stream.

        Each caller (an episode's asyncio task) gets a stream seeded from the generator's own in the
        order callers first ask, so which batch a request lands in, and when, never changes what it
        draws: a wave decoded turn by turn and the same episodes decoded continuously draw the same."""
        if params.seed is not None:
            return torch.Generator(device="cpu").manual_seed(params.seed)
        with self._queues_lock:
            stream = None if caller is None else self._callers.get(caller)
            if stream is None:
                stream = torch.Generator(device="cpu").manual_seed(_next_seed(self._rng))
                if caller is not None:
                    self._callers[caller] = stream
            return torch.Generator(device="cpu").manual_seed(_next_seed(stream))

    # ------------------------------------------------------------------ queueing
    def _queue(self, loop: asyncio.AbstractEventLoop) -> _LoopQueue:
        with self._queues_lock:
            queue = self._queues.get(loop)
            if queue is None:
                queue = self._queues[loop] = _LoopQueue()
            return queue

    async def _settle(self, queue: _LoopQueue, rows: int) -> None:
        """Let every runnable episode reach its next generate() before requests are taken in."""
        quiet = 0
        while rows + len(queue.pending) < self.max_batch and quiet < self.settle_rounds:
            before = len(queue.pending)
            await asyncio.sleep(0)
            quiet = quiet + 1 if len(queue.pending) == before else 0

    def _take(self, queue: _LoopQueue, room: int) -> list[_Row]:
        """Up to `room` waiting requests whose callers still wait (a cancelled one is skipped), as rows."""
        taken = queue.pending[:room]
        del queue.pending[:room]
        return [self._row(request, future) for request, future in taken if not future.done()]

    async def _flush(self, queue: _LoopQueue) -> None:
        try:
            while queue.pending:
                await self._settle(queue, 0)
                rows = self._take(queue, self.max_batch)
                if not rows:
                    continue  # every caller of this batch was cancelled
                try:
                    await self._stream(queue, rows)  # `rows` keeps the rows still decoding
                except Exception as error:  # noqa: BLE001 - handed to every caller, not swallowed
                    for row in rows:
                        if row.future is not None and not row.future.done():
                            row.future.set_exception(error)
                finally:
                    # Cancelled mid-stream (the loop is shutting down): no row's caller waits forever.
                    for row in rows:
                        if row.future is not None and not row.future.done():
                            row.future.cancel()
        finally:
            # Cancelled while waiting (the loop is shutting down): no caller may wait forever.
            for _, future in queue.pending:
                future.cancel()
            queue.pending.clear()

    # ------------------------------------------------------------------ decoding
    async def _stream(self, queue: _LoopQueue, rows: list[_Row]) -> None:
        """Decode `rows` (every row that joins later is appended to it); each caller gets its result
        as soon as its row finishes. With KV reuse, requests that arrive while the batch runs join it
        between steps (continuous batching) instead of waiting for its slowest row."""
        taken = len(rows)
        rows[:] = self._decodable(rows)
        with self._eval_mode():
            with self._decoding():
                batch = self._prefill(rows, taken)
            while True:
                with self._decoding():
                    done = self._sample(rows, batch)
                    if rows:
                        self._step(rows, batch)
                for row in done:
                    if row.future is not None and not row.future.done():
                        row.future.set_result(self._result(row))
                if isinstance(batch, RowBatch) and (done or queue.pending):
                    # The finished rows' episodes take their turn now; their next requests join here
                    # and draw their first token from their prompt's logits at the next `_sample`.
                    await self._settle(queue, len(rows))
                    joining = self._take(queue, self.max_batch - len(rows))
                    if joining:
                        with self._decoding():
                            self._admit(batch, rows, joining)
                if not rows:
                    return

    def _run_batch(self, requests: Sequence[_Request]) -> list[GenerationResult]:
        """Decode `requests` together, synchronously (no row joins later)."""
        rows = [self._row(request, None) for request in requests]
        decoding = self._decodable(rows)
        with self._eval_mode(), self._decoding():
            batch = self._prefill(decoding, len(rows))
            while True:
                self._sample(decoding, batch)
                if not decoding:
                    break
                self._step(decoding, batch)
        return [self._result(row) for row in rows]

    def _row(self, request: _Request, future: asyncio.Future[GenerationResult] | None) -> _Row:
        return _Row(request, future, self.stop_token_ids | set(request.params.stop_token_ids))

    @contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """Dropout off while a batch decodes; the model's mode is restored after (once per batch:
        `eval()` walks every module, ~5 ms on SmolLM2)."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            yield
        finally:
            if was_training:
                self.model.train()

    @contextmanager
    def _decoding(self) -> Iterator[None]:
        """One thread at a time on the model (it, the prefix cache and the stats are shared), no autograd,
        the forwards in the generator's compute precision."""
        with self._model_lock, torch.inference_mode(), self._precision.forwards():
            yield

    def _decodable(self, rows: list[_Row]) -> list[_Row]:
        """The rows that may draw a token; a caller that asked for none gets its empty result now."""
        for row in rows:
            if row.request.params.max_new_tokens <= 0 and row.future is not None and not row.future.done():
                row.future.set_result(self._result(row))
        return [row for row in rows if row.request.params.max_new_tokens > 0]

    def _prefill(self, rows: list[_Row], taken: int) -> PaddedBatch | RowBatch | None:
        """The rows' prompts (`taken` requests, less those that asked for no token) encoded into a
        new batch; None when there is nothing to decode."""
        started = time.perf_counter()
        self._count(taken=taken, decoding=len(rows))
        if not rows:
            return None
        inputs = [row.request.input_ids for row in rows]
        batch: PaddedBatch | RowBatch | None = None
        if self._prefix_cache is not None:
            room = max(row.request.params.max_new_tokens for row in rows) + self.draft_tokens
            with self._tap() as tap:
                encoded = encode_rows(self.model, inputs, self._prefix_cache, tap)
            if encoded is None:  # this model's cache layers cannot be cut and stacked
                self._prefix_cache = None
            else:
                batch = row_batch(encoded, [len(ids) for ids in inputs], room)
                self._start_recording(rows, encoded)
        if batch is None:
            batch = prefill_padded(self.model, inputs, self._pad_id())
        self._profile = self._profile.add(
            prefill_s=time.perf_counter() - started,
            prefill_tokens=batch.encoded_tokens,
            reused_tokens=batch.reused_tokens,
        )
        return batch

    def _admit(self, batch: RowBatch, rows: list[_Row], joining: list[_Row]) -> None:
        """New rows join the running batch after their prompts are encoded (KV reuse)."""
        started = time.perf_counter()
        taken = len(joining)
        joining = self._decodable(joining)
        self._count(taken=taken, decoding=len(rows) + len(joining))
        if not joining:
            return
        assert self._prefix_cache is not None  # a RowBatch exists only with KV reuse
        rows.extend(joining)  # before encoding: an error there reaches these callers too
        with self._tap() as tap:
            encoded = encode_rows(
                self.model, [row.request.input_ids for row in joining], self._prefix_cache, tap
            )
        assert encoded is not None  # the same model encoded this batch's first rows
        self._start_recording(joining, encoded)
        room = max(row.request.params.max_new_tokens for row in joining) + self.draft_tokens
        batch.admit(encoded.layers, encoded.logits, room)
        self._profile = self._profile.add(
            prefill_s=time.perf_counter() - started,
            prefill_tokens=encoded.encoded_tokens,
            reused_tokens=encoded.reused_tokens,
        )

    def _sample(self, rows: list[_Row], batch: PaddedBatch | RowBatch | None) -> list[_Row]:
        """Each row's next tokens from the batch's logits: one, and one more after each draft its
        draws confirm; the rows that finish leave `rows` and the batch (what a finished row has seen
        is stored for its next turn) and are returned."""
        if batch is None or not rows:
            return []
        started = time.perf_counter()
        finished: list[int] = []
        drawn_total = confirmed = 0
        for b, row in enumerate(rows):
            drawn, finishes = self._draw(row, batch.block(b))
            if row.pending is not None and row.hidden is not None:
                row.hidden.append(row.pending[:drawn].clone())  # the fed tokens that stay in its cache
                row.pending = None
            if finishes:
                finished.append(b)
            confirmed += drawn - 1
            drawn_total += drawn
            row.drafts = []
            batch.keep_drawn(b, drawn)
        self._profile = self._profile.add(
            decode_s=time.perf_counter() - started, decode_tokens=drawn_total, drafts_confirmed=confirmed
        )
        if not finished:
            return []
        done = [rows[b] for b in finished]
        if self._prefix_cache is not None and isinstance(batch, RowBatch):
            # What a finished row has seen (its last token was never fed) serves its next turn.
            for b, row in zip(finished, done, strict=True):
                self._prefix_cache.insert(row.request.input_ids + row.tokens[:-1], batch.row_layers(b))
                self._finish_recording(row)
        if len(finished) < len(rows) or isinstance(batch, RowBatch):  # a RowBatch may take new rows later
            rows[:] = [rows[b] for b in batch.drop(finished)]  # later steps cost only the rows still going
        else:
            rows.clear()
        return done

    def _draw(self, row: _Row, block: torch.Tensor) -> tuple[int, bool]:
        """Draw from the row's logits after its last token, then after each draft the draws confirm;
        returns how many tokens were drawn and whether the row finished."""
        params = row.request.params
        assert row.request.rng is not None
        for drawn, logits in enumerate(block, start=1):
            token, log_prob = sample_token(logits, params, row.request.rng)
            row.tokens.append(token)
            row.log_probs.append(log_prob)
            if token in row.stop_ids or self._hits_stop_string(row.tokens, params.stop):
                row.reason = FinishReason.STOP
                return drawn, True
            if len(row.tokens) >= params.max_new_tokens:
                return drawn, True
            if drawn > len(row.drafts) or token != row.drafts[drawn - 1]:
                return drawn, False  # the logits after an unconfirmed draft saw a token not drawn
        raise AssertionError("a block has one logits row after the last token and one per draft")

    def _step(self, rows: list[_Row], batch: PaddedBatch | RowBatch | None) -> None:
        assert batch is not None
        started = time.perf_counter()
        last = [row.tokens[-1] for row in rows]
        if isinstance(batch, RowBatch):
            if self.draft_tokens:
                for row in rows:
                    row.drafts = self._drafts(row)
            with self._tap() as tap:
                batch.step(self.model, last, [row.drafts for row in rows] if self.draft_tokens else None)
                if tap is not None:
                    fed = tap.take()
                    for b, row in enumerate(rows):
                        row.pending = fed[b, : 1 + len(row.drafts)]
        else:
            batch.step(self.model, last)
        self._profile = self._profile.add(
            decode_s=time.perf_counter() - started,
            decode_steps=1,
            drafts_fed=sum(len(row.drafts) for row in rows),
        )

    def _drafts(self, row: _Row) -> list[int]:
        """Draft tokens to feed after the row's last one: what followed the latest earlier occurrence
        of its context's end, no more than it may still draw after the token the step yields anyway."""
        if row.lookup is None:
            row.lookup = PromptLookup(row.request.input_ids)
        row.lookup.extend(row.tokens[len(row.lookup) - len(row.request.input_ids) :])
        return row.lookup.draft(
            min(self.draft_tokens, row.request.params.max_new_tokens - len(row.tokens) - 1)
        )

    # ------------------------------------------------------------------ hidden states for a recorder
    def _tap(self) -> AbstractContextManager[HiddenTap | None]:
        """A tap on the recorder's layer for one forward or one row's encoding (with KV reuse only)."""
        if self._recorder is None or self._prefix_cache is None:
            return nullcontext()
        return HiddenTap(self._recorder.layer)

    def _start_recording(self, rows: list[_Row], encoded: EncodedRows) -> None:
        """The rows' prompts: what their prefill encoded, handed over at once (a sibling or a next turn
        reuses the same prompt and continues from it)."""
        if self._recorder is None or encoded.hidden is None:
            return
        for row, (start, hidden) in zip(rows, encoded.hidden, strict=True):
            row.hidden_start, row.hidden = start, [hidden]
            self._recorder.record(row.request.input_ids, start, hidden)

    def _finish_recording(self, row: _Row) -> None:
        """A finished row's whole sequence as the prefix cache stores it (its last token never fed)."""
        if self._recorder is None or row.hidden is None:
            return
        self._recorder.record(
            row.request.input_ids + row.tokens[:-1], row.hidden_start, torch.cat(row.hidden)
        )
        row.hidden = None

    def _count(self, *, taken: int, decoding: int) -> None:
        self._stats = BatchStats(
            batches=self._stats.batches + 1,
            requests=self._stats.requests + taken,
            largest=max(self._stats.largest, decoding),
        )

    def _result(self, row: _Row) -> GenerationResult:
        return GenerationResult(
            token_ids=row.tokens,
            log_probs=row.log_probs,
            finish_reason=row.reason,
            text=self.tokenizer.decode(row.tokens, skip_special_tokens=False),
        )

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


def _next_seed(stream: torch.Generator) -> int:
    return int(torch.randint(0, _ROW_SEED_BOUND, (1,), generator=stream))


def _request(input_ids: list[int], sampling_params: dict[str, Any]) -> _Request:
    if not input_ids:
        raise ValueError("input_ids is empty: a generation needs at least one prompt token")
    return _Request(input_ids=[int(t) for t in input_ids], params=SamplingParams.from_dict(sampling_params))

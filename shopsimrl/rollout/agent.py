"""The agent loop: one multi-turn ShopSim episode over a `Generator` (docs/rollout.md).

    trajectory = await run_trajectory(task=task, catalog=catalog, tokenizer=tokenizer,
                                      generator=generator, options=options,
                                      skill_texts=curriculum.skill_texts(assignment),
                                      sampling_params={"temperature": 1.0, "top_p": 1.0})

Per turn: generate from the current segment's tokens, decode, step the environment with the
assistant text, then either append the observation tokens (loss mask 0) to the segment or, when
the offered tool schema changed, start a new segment whose prompt re-renders the whole
conversation with the new tools. Ends on checkout, the environment's turn limit, a turn that hit
max_new_tokens, or the context limit.

A technical error (model service, environment, parser, or a bug in this loop) ends the episode
as unscorable with `technical_error = {kind, message}`; it is never scored 0.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from shopsimrl.config.options import ShopSimOptions, options_from_args
from shopsimrl.contract import Outcome, TechnicalErrorInfo
from shopsimrl.errors import ConfigError, TechnicalError, TechnicalErrorKind
from shopsimrl.rollout.curriculum import Curriculum
from shopsimrl.rollout.generators.base import FinishReason, GenerationAborted, Generator
from shopsimrl.rollout.generators.sglang import SGLangGenerator
from shopsimrl.rollout.prompting import IM_END, TOOL_ROLE, ChatRenderer, initial_messages
from shopsimrl.rollout.trajectory import Segment, StopReason, Trajectory, TrajectoryStatus
from shopsimrl.shop import Catalog, ShopEnv, Task, ToolCallFormat
from shopsimrl.skills.skillbank import empty_skillbank, load_skillbank

logger = logging.getLogger(__name__)


async def run_trajectory(
    *,
    task: Task,
    catalog: Catalog,
    tokenizer: Any,
    generator: Generator,
    options: ShopSimOptions,
    skill_texts: list[str],
    sampling_params: dict[str, Any],
    env_seed: int = 0,
    fmt: ToolCallFormat | None = None,
) -> Trajectory:
    """Run one episode to its end; never raises for a technical failure (it is recorded).

    `fmt` defaults to `options.tool_call_format` (XML for Qwen3.5, JSON for Qwen3-style models).
    The prompt's opening is rendered by the tokenizer's chat template (`ChatRenderer`); a tokenizer
    whose template cannot render it raises `ValueError` before the episode starts (a configuration
    error, the same for every episode, so it is not recorded as one episode's failure).
    """
    trajectory = Trajectory(task_id=task.task_id, split=task.split.value)
    fmt = ToolCallFormat(options.tool_call_format if fmt is None else fmt)
    loop = _AgentLoop(trajectory, tokenizer, generator, options, sampling_params, fmt)
    env = ShopEnv(catalog, max_turns=options.max_turns)
    phase_start = time.perf_counter()
    phase = "setup"
    try:
        instruction, _ = env.reset(task=task, seed=env_seed)
        loop.start(env, initial_messages(skill_texts, instruction))
        trajectory.timings.setup_s = time.perf_counter() - phase_start
        phase, phase_start = "agent", time.perf_counter()
        await loop.run(env)
        trajectory.timings.agent_s = time.perf_counter() - phase_start
        phase, phase_start = "reward", time.perf_counter()
        outcome = env.outcome()
        trajectory.outcome = Outcome(
            reward=outcome.reward, strict_reward=outcome.strict_reward, success=outcome.success, scorable=True
        )
        trajectory.reward_breakdown = dict(outcome.breakdown)
        trajectory.gold_audit = env.gold_audit()
        trajectory.state_hash = env.state_hash()
        trajectory.timings.reward_s = time.perf_counter() - phase_start
    except GenerationAborted as error:
        _mark_technical(trajectory, error, TrajectoryStatus.ABORTED, phase, phase_start)
    except TechnicalError as error:
        _mark_technical(trajectory, error, TrajectoryStatus.FAILED, phase, phase_start)
    except Exception as error:  # a bug of ours inside the loop: unscorable, recorded, never reward 0
        logger.exception("agent loop crashed on task %s", task.task_id)
        internal = TechnicalError(TechnicalErrorKind.INTERNAL, f"{type(error).__name__}: {error}")
        _mark_technical(trajectory, internal, TrajectoryStatus.FAILED, phase, phase_start)
    trajectory.timings.environment_s = max(trajectory.timings.agent_s - trajectory.timings.generation_s, 0.0)
    _drop_trailing_empty_segment(trajectory)
    return trajectory


def _drop_trailing_empty_segment(trajectory: Trajectory) -> None:
    """A segment opened for a new tool set whose first turn never came (context limit, technical
    error) holds no model token: nothing to train or audit, so it is not turned into a sample."""
    segments = trajectory.segments
    if len(segments) > 1 and not segments[-1].response_ids:
        segments.pop()
        segments[-1].message_end = len(trajectory.messages)


def _mark_technical(
    trajectory: Trajectory, error: TechnicalError, status: TrajectoryStatus, phase: str, phase_start: float
) -> None:
    setattr(trajectory.timings, f"{phase}_s", time.perf_counter() - phase_start)
    trajectory.status = status
    trajectory.stop_reason = StopReason.TECHNICAL_ERROR
    trajectory.outcome = Outcome(
        scorable=False, technical_error=TechnicalErrorInfo(kind=error.kind.value, message=error.message)
    )
    if trajectory.segments:
        trajectory.segments[-1].message_end = len(trajectory.messages)


class _AgentLoop:
    def __init__(
        self,
        trajectory: Trajectory,
        tokenizer: Any,
        generator: Generator,
        options: ShopSimOptions,
        sampling_params: dict[str, Any],
        fmt: ToolCallFormat,
    ):
        self.trajectory = trajectory
        self.renderer = ChatRenderer(tokenizer, fmt)
        self.tokenizer = tokenizer
        self.generator = generator
        self.options = options
        self.sampling_params = dict(sampling_params)
        self.end_of_turn_ids = _end_of_turn_ids(tokenizer)
        self.im_end_id = _im_end_id(tokenizer)
        self.tools: list[dict[str, Any]] = []

    def start(self, env: ShopEnv, messages: list[dict[str, Any]]) -> None:
        self.trajectory.messages = messages
        self._open_segment(env)

    def _open_segment(self, env: ShopEnv) -> None:
        self.tools = env.offered_tools()
        text = self.renderer.prompt_text(self.trajectory.messages, self.tools)
        self.trajectory.segments.append(
            Segment(
                index=len(self.trajectory.segments),
                prompt_ids=self._encode(text),
                prompt_text=text,
                tool_schema_hash=env.tool_schema_hash(),
                tool_names=[_tool_name(tool) for tool in self.tools],
                message_start=len(self.trajectory.messages),
            )
        )

    async def run(self, env: ShopEnv) -> None:
        trajectory = self.trajectory
        while True:
            segment = trajectory.segments[-1]
            room = self.options.max_context_tokens - len(segment.tokens)
            if room <= 0:
                self._finish(TrajectoryStatus.TRUNCATED, StopReason.CONTEXT_LIMIT)
                return
            started = time.perf_counter()
            result = await self.generator.generate(segment.tokens, self._turn_params(room))
            trajectory.timings.generation_s += time.perf_counter() - started
            trajectory.num_turns += 1

            last = result.token_ids[-1] if result.token_ids else None
            closed = last in self.end_of_turn_ids
            model_text = self.tokenizer.decode(result.token_ids, skip_special_tokens=False)
            content = _strip_end_of_turn(model_text) if closed else model_text
            segment.append_model(result.token_ids, result.log_probs, model_text)
            if result.weight_version is not None:
                segment.weight_versions.append(result.weight_version)
            messages_before = list(trajectory.messages)
            trajectory.messages.append({"role": "assistant", "content": content})
            if result.finish_reason is FinishReason.LENGTH:
                self._finish(TrajectoryStatus.TRUNCATED, StopReason.LENGTH)
                return

            observation, _, terminated, truncated, _ = env.step(content)
            tool_message = {"role": TOOL_ROLE, "content": observation}
            trajectory.messages.append(tool_message)
            if terminated or truncated:
                self._finish(
                    TrajectoryStatus.COMPLETED, StopReason.DONE if terminated else StopReason.TURN_LIMIT
                )
                return
            if env.tool_schema_hash() != segment.tool_schema_hash:
                segment.message_end = len(trajectory.messages)
                self._open_segment(env)
                continue
            # Only <|im_end|> itself closes the turn in the chat format; after another eos token the
            # <|im_end|> marker is still due and goes into the masked continuation.
            rest = self.renderer.continuation_text(
                messages_before, content, [tool_message], model_closed_turn=last == self.im_end_id
            )
            segment.append_observation(self._encode(rest), rest)

    def _finish(self, status: TrajectoryStatus, reason: StopReason) -> None:
        self.trajectory.status = status
        self.trajectory.stop_reason = reason
        self.trajectory.segments[-1].message_end = len(self.trajectory.messages)

    def _turn_params(self, room: int) -> dict[str, Any]:
        params = dict(self.sampling_params)
        limit = min(self.options.max_new_tokens_per_turn, room)
        if "max_new_tokens" in params:
            limit = min(limit, int(params["max_new_tokens"]))
        params["max_new_tokens"] = limit
        stop_ids = [int(t) for t in params.get("stop_token_ids") or ()]
        params["stop_token_ids"] = stop_ids + sorted(set(self.end_of_turn_ids) - set(stop_ids))
        return params

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _im_end_id(tokenizer: Any) -> int | None:
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    return im_end if isinstance(im_end, int) and im_end != tokenizer.unk_token_id else None


def _end_of_turn_ids(tokenizer: Any) -> set[int]:
    """<|im_end|> and the eos token: either one ends an assistant turn."""
    ids = set()
    im_end = _im_end_id(tokenizer)
    if im_end is not None:
        ids.add(im_end)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(f"tokenizer has neither {IM_END} nor an eos token: cannot end an assistant turn")
    return ids


def _strip_end_of_turn(text: str) -> str:
    for marker in (IM_END, "<|endoftext|>"):
        if text.endswith(marker):
            return text[: -len(marker)]
    return text


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool["function"] if tool.get("type") == "function" else tool
    return str(function["name"])


# Attributes of slime's `args` the local backend (and tests) set to inject their own objects.
INJECT_GENERATOR_ATTR = "shopsim_generator"
INJECT_TOKENIZER_ATTR = "shopsim_tokenizer"
INJECT_CATALOG_ATTR = "shopsim_catalog"
_RUNTIME_ATTR = "_shopsim_runtime"
_RUNTIME_LOCK = threading.Lock()  # generate (event loop) and retries (background thread) share it


@dataclass
class AgentRuntime:
    """Everything an episode needs besides its task: built once per process from slime's `args`."""

    options: ShopSimOptions
    curriculum: Curriculum
    catalog: Catalog
    tokenizer: Any
    generator: Generator

    @classmethod
    def from_args(cls, args: Any) -> AgentRuntime:
        """Cached on `args`. Under slime: the tokenizer from `args.hf_checkpoint` and an
        `SGLangGenerator` on `http://{args.sglang_router_ip}:{args.sglang_router_port}`. The local
        backend injects `args.shopsim_generator`, `args.shopsim_tokenizer` (and optionally
        `args.shopsim_catalog`) instead."""
        with _RUNTIME_LOCK:
            cached = getattr(args, _RUNTIME_ATTR, None)
            if isinstance(cached, AgentRuntime):
                return cached
            options = options_from_args(args)
            skillbank = load_skillbank(options.skillbank) if options.skillbank else empty_skillbank()
            catalog = _injected(args, INJECT_CATALOG_ATTR)
            if catalog is None:
                catalog = options.catalog.build()
            tokenizer = _injected(args, INJECT_TOKENIZER_ATTR)
            if tokenizer is None:
                tokenizer = _load_tokenizer(args)
            generator = _injected(args, INJECT_GENERATOR_ATTR)
            if generator is None:
                generator = _sglang_generator(args, options)
            runtime = cls(
                options=options,
                curriculum=Curriculum(skillbank, options),
                catalog=catalog,
                tokenizer=tokenizer,
                generator=generator,
            )
            setattr(args, _RUNTIME_ATTR, runtime)
            return runtime


def _injected(args: Any, name: str) -> Any:
    # vars() rather than getattr: slime's Namespace has no such attributes unless someone set them.
    return vars(args).get(name)


def _load_tokenizer(args: Any) -> Any:
    checkpoint = vars(args).get("hf_checkpoint")
    if not checkpoint:
        raise ConfigError("args", ["hf_checkpoint is not set and no args.shopsim_tokenizer was injected"])
    from transformers import AutoTokenizer  # heavy import: only in the process that generates

    return AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)


def _sglang_generator(args: Any, options: ShopSimOptions) -> SGLangGenerator:
    host, port = vars(args).get("sglang_router_ip"), vars(args).get("sglang_router_port")
    if not host or not port:
        raise ConfigError(
            "args",
            ["sglang_router_ip/sglang_router_port are not set and no args.shopsim_generator was injected"],
        )
    return SGLangGenerator(f"http://{host}:{port}", timeout_s=options.sglang_timeout_s)

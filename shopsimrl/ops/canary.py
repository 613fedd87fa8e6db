"""The canary: N tasks end to end through the real rollout path with the current policy.

A task passes when its trajectory (1) ends without a technical error, (2) carries a reward — 0 is
allowed, none is not — and (3) is parseable: written to JSON atomically and read back with the same
task id, turns and outcome. `canary_report.json` holds each task's verdict and the P50/P95 of the
setup, agent and reward phases (from `Trajectory.timings`) and of the total; percentiles are
numpy's linear interpolation over the N tasks.

    report = run_canary(CanarySettings(tasks=10, backend="local", out_dir="runs/canary"))

Generators: `local` runs a Hugging Face model in this process (`--model DIR`, default the demo
SmolLM2 model of the local backend) through the local driver's generator,
`BatchedLocalHFGenerator` with KV reuse; `sglang` talks to a running SGLang server (`--url`), with
the tokenizer of the served model (`--tokenizer DIR`). Tests pass their own tokenizer and generator.

The N tasks run as concurrent episodes, so their turns are decoded as batches (and, locally, share
the encoded system prompt); a task's phase times therefore include waiting for its batch. `echo`
reports progress: the model load, then `canary: k/N tasks done` as each episode ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from shopsimrl.config import ShopSimOptions
from shopsimrl.errors import ConfigError
from shopsimrl.ops.model_files import hf_model_problems, tokenizer_problems

SCHEMA_VERSION = 1
REPORT_FILE = "canary_report.json"
PHASES: tuple[str, ...] = ("setup_s", "agent_s", "reward_s", "total_s")


@dataclass(frozen=True)
class CanarySettings:
    tasks: int = 10
    backend: Literal["local", "sglang"] = "local"
    model: str | None = None
    url: str | None = None
    tokenizer: str | None = None
    split: Literal["train", "validation", "test"] = "test"
    seed: int = 0
    out_dir: str = "runs/canary"
    temperature: float = 1.0

    def problems(self) -> list[str]:
        found = []
        if self.tasks < 1:
            found.append(f"tasks={self.tasks}: at least 1")
        if self.backend == "sglang" and not self.url:
            found.append("backend=sglang needs --url (e.g. http://127.0.0.1:30000)")
        if self.backend == "sglang" and not (self.tokenizer or self.model):
            found.append("backend=sglang needs --tokenizer (the served model's tokenizer directory)")
        if self.backend == "local" and self.url:
            found.append("--url is only for backend=sglang")
        # Local directories are checked file by file now, not by a loader's traceback later.
        if self.backend == "local" and self.model and _is_local_path(self.model):
            found += hf_model_problems(self.model)
        tokenizer_dir = self.tokenizer or self.model
        if self.backend == "sglang" and tokenizer_dir and _is_local_path(tokenizer_dir):
            found += tokenizer_problems(tokenizer_dir)
        return found


def _is_local_path(name: str) -> bool:
    """A directory path, as opposed to a Hugging Face hub id such as `org/model`."""
    return name.startswith((".", "/", "~")) or Path(name).exists()


@dataclass
class CanaryTaskResult:
    task_id: str
    passed: bool
    problems: list[str]
    reward: float | None
    status: str
    stop_reason: str
    num_turns: int
    technical_error: dict[str, str] | None
    timings: dict[str, float]
    trajectory_file: str


@dataclass
class CanaryReport:
    settings: dict[str, Any]
    results: list[CanaryTaskResult]
    phases: dict[str, dict[str, float]]
    passed: bool
    schema_version: int = SCHEMA_VERSION
    failed_tasks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95))}


def _trajectory_record(trajectory: Any) -> dict[str, Any]:
    outcome = trajectory.outcome
    return {
        "schema_version": SCHEMA_VERSION,
        "task_id": trajectory.task_id,
        "split": trajectory.split,
        "messages": trajectory.messages,
        "summary": trajectory.summary(),
        "outcome": {
            "reward": outcome.reward,
            "strict_reward": outcome.strict_reward,
            "success": outcome.success,
            "scorable": outcome.scorable,
            "technical_error": None
            if outcome.technical_error is None
            else {"kind": outcome.technical_error.kind, "message": outcome.technical_error.message},
        },
    }


def judge(trajectory: Any, out_dir: Path) -> CanaryTaskResult:
    """Write the trajectory, read it back and apply the three canary criteria."""
    from shopsimrl.storage import atomic_write_json

    record = _trajectory_record(trajectory)
    path = out_dir / "trajectories" / f"{trajectory.task_id}.json"
    problems: list[str] = []
    try:
        atomic_write_json(path, record)
        back = json.loads(path.read_text(encoding="utf-8"))
        if (back["task_id"], back["summary"]["num_turns"], back["outcome"]) != (
            record["task_id"],
            record["summary"]["num_turns"],
            record["outcome"],
        ):
            problems.append("trajectory read back differs from what was written")
        if not back["messages"]:
            problems.append("trajectory has no messages")
    except (TypeError, ValueError, OSError) as exc:
        problems.append(f"trajectory not parseable: {type(exc).__name__}: {exc}")
    error = record["outcome"]["technical_error"]
    if error is not None:
        problems.append(f"technical error ({error['kind']}): {error['message']}")
    reward = record["outcome"]["reward"]
    if not record["outcome"]["scorable"] or reward is None:
        problems.append("no reward")
    timings = trajectory.timings
    phase_times = {
        "setup_s": timings.setup_s,
        "agent_s": timings.agent_s,
        "reward_s": timings.reward_s,
        "total_s": timings.setup_s + timings.agent_s + timings.reward_s,
    }
    return CanaryTaskResult(
        task_id=trajectory.task_id,
        passed=not problems,
        problems=problems,
        reward=reward if record["outcome"]["scorable"] else None,
        status=trajectory.status.value,
        stop_reason=trajectory.stop_reason.value,
        num_turns=trajectory.num_turns,
        technical_error=error,
        timings=phase_times,
        trajectory_file=str(path),
    )


def _local_model(settings: CanarySettings) -> tuple[Any, Any]:
    if settings.model is None:
        from shopsimrl.models.smollm2 import load_smollm2

        loaded = load_smollm2()
        return loaded.tokenizer, loaded.model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(settings.model), AutoModelForCausalLM.from_pretrained(settings.model)


def build_generator(
    settings: CanarySettings, options: ShopSimOptions, echo: Callable[[str], None] | None = None
) -> tuple[Any, Any]:
    """(tokenizer, generator) for the configured backend."""
    if settings.backend == "sglang":
        from transformers import AutoTokenizer

        from shopsimrl.rollout.generators import SGLangGenerator

        tokenizer = AutoTokenizer.from_pretrained(settings.tokenizer or settings.model)
        return tokenizer, SGLangGenerator(settings.url, timeout_s=options.sglang_timeout_s)
    from shopsimrl.rollout.generators import BatchedLocalHFGenerator

    if echo is not None:
        echo(f"canary: loading {settings.model or 'the demo model (SmolLM2-135M-Instruct)'} ...")
    started = time.perf_counter()
    tokenizer, model = _local_model(settings)
    if echo is not None:
        echo(f"canary: model loaded in {time.perf_counter() - started:.1f}s")
    return tokenizer, BatchedLocalHFGenerator(model, tokenizer, seed=settings.seed)


def run_canary(
    settings: CanarySettings,
    *,
    tokenizer: Any = None,
    generator: Any = None,
    options: ShopSimOptions | None = None,
    echo: Callable[[str], None] | None = print,
) -> CanaryReport:
    """Run the canary and write `<out_dir>/canary_report.json` atomically. Raises ConfigError on bad settings.

    `echo` gets one progress line per step (None: silent)."""
    from shopsimrl.rollout.agent import run_trajectory
    from shopsimrl.shop import load_split
    from shopsimrl.storage import atomic_write_json

    problems = settings.problems()
    if problems:
        raise ConfigError("canary settings", problems)
    out_dir = Path(settings.out_dir)
    options = options or ShopSimOptions(run_dir=str(out_dir))
    if generator is None:
        tokenizer, generator = build_generator(settings, options, echo)
    catalog = options.catalog.build()
    tasks = load_split(catalog, settings.split, limit=settings.tasks)
    if len(tasks) < settings.tasks:
        raise ConfigError(
            "canary settings",
            [f"split {settings.split!r} has only {len(tasks)} tasks, asked for {settings.tasks}"],
        )
    sampling = {"temperature": settings.temperature, "top_p": 1.0, "sampling_seed": settings.seed}

    done = 0

    async def _one(i: int, task: Any) -> Any:
        nonlocal done
        trajectory = await run_trajectory(
            task=task,
            catalog=catalog,
            tokenizer=tokenizer,
            generator=generator,
            options=options,
            skill_texts=[],
            sampling_params=dict(sampling),
            env_seed=settings.seed + i,
        )
        done += 1
        if echo is not None:
            reward = trajectory.outcome.reward
            echo(
                f"canary: {done}/{len(tasks)} tasks done ({trajectory.task_id}: "
                f"{'no reward' if reward is None else f'reward {reward:.3f}'}, {trajectory.num_turns} turns, "
                f"{time.perf_counter() - started:.1f}s)"
            )
        return trajectory

    async def _all() -> list[Any]:
        return list(await asyncio.gather(*(_one(i, task) for i, task in enumerate(tasks))))

    if echo is not None:
        echo(f"canary: running {len(tasks)} tasks of split {settings.split!r} concurrently")
    started = time.perf_counter()
    trajectories = asyncio.run(_all())
    results = [judge(t, out_dir) for t in trajectories]
    phases = {phase: percentiles([r.timings[phase] for r in results]) for phase in PHASES}
    phases["wall_s"] = {"total": time.perf_counter() - started}
    failed_tasks = [r.task_id for r in results if not r.passed]
    settings_dict = {k: v for k, v in asdict(settings).items()}
    report = CanaryReport(
        settings=settings_dict,
        results=results,
        phases=phases,
        passed=not failed_tasks,
        failed_tasks=failed_tasks,
    )
    atomic_write_json(out_dir / REPORT_FILE, report.to_dict())
    return report


def render_canary(report: CanaryReport) -> str:
    lines = [f"{'task':<28} {'verdict':<7} {'reward':>7} {'turns':>5}  problems"]
    for r in report.results:
        reward = "-" if r.reward is None else f"{r.reward:.3f}"
        lines.append(
            f"{r.task_id:<28} {'PASS' if r.passed else 'FAIL':<7} {reward:>7} {r.num_turns:>5}  "
            + "; ".join(r.problems)
        )
    for phase in PHASES:
        p = report.phases[phase]
        lines.append(f"{phase:<9} p50={p['p50']:.4f}s p95={p['p95']:.4f}s")
    passed = sum(r.passed for r in report.results)
    lines.append(
        f"canary: {passed}/{len(report.results)} passed -> {Path(report.settings['out_dir']) / REPORT_FILE}"
    )
    return "\n".join(lines)

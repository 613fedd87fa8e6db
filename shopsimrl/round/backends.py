"""Where a round's three stages run: in this process (local, CPU) or in the compose services (docker, slime).

    backend = LocalBackend()                                   # shopsimrl training round (default)
    backend = DockerBackend(compose="docker compose --env-file docker/versions.env")
    trained = backend.train(config, settings=settings, echo=print)
    backend.analyze(config, trained.checkpoint, settings=settings, echo=print)
    lines = backend.gate(config, trained.checkpoint, settings=settings, echo=print)

The round runner (runner.py) owns the order, `round_state.json`, the manifest, the next round and the
report; a backend only runs a stage and says what it produced. Both write their stage outputs to the
same places (runs/<group>/{train,analysis,gate}/), so everything after a stage is backend-blind.

The docker backend runs on the host and calls `<compose> run --rm <service>` once per stage with the
round's inputs in the environment (the contract of compose.yaml and scripts/run_shopsimrl_slime.sh):
WANDB_GROUP, the tracking settings, START_LOAD and ROLLOUT_SEED (train), SHOPSIM_CONFIG /
ANALYZE_CONFIG / GATE_CONFIG (the configs the round derived into runs/<group>/) and the
ANALYZE_CHECKPOINT / GATE_CHECKPOINT that SGLang serves. Each service's output is copied to
runs/<group>/logs/<stage>.log; a failed service is a RoundError naming it and that log.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from shopsimrl.errors import rerun_command
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.state import RoundError, utc_now
from shopsimrl.storage import atomic_write_text
from shopsimrl.storage.layout import ANALYSIS_CONFIG_FILE, GATE_CONFIG_FILE
from shopsimrl.tracking import WandbSettings

Echo = Callable[[str], None]
LOG_DIR = "logs"


@dataclass(frozen=True)
class Trained:
    checkpoint: Path  # the policy the Analyst's trials, the gate and the next round start from
    sha256: str
    run_id: str | None = None
    warm_start_steps: int = 0  # supervised steps before GRPO in this stage (0: the first step was GRPO)
    save_dir: Path | None = None  # docker: slime's --save directory (the next round's START_LOAD)


class StageBackend(Protocol):
    name: str
    dry_run: bool  # print what each stage would run, run nothing, write nothing

    def train(self, config: RoundConfig, *, settings: WandbSettings, echo: Echo,
              on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Trained: ...  # fmt: skip

    def analyze(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo) -> None: ...

    def gate(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo,
             progress: bool = False) -> list[str]: ...  # fmt: skip

    def checkpoint_sha256(self, path: Path) -> str: ...


class LocalBackend:
    """The stages in this process on the CPU backend (torch is imported only when a stage runs)."""

    name = "local"
    dry_run = False

    def train(self, config: RoundConfig, *, settings: WandbSettings, echo: Echo,
              on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Trained:  # fmt: skip
        from shopsimrl.local.run import run_training

        train_config = config.train_config()
        _set_aside_unfinished(train_config.stage_dir, train_config.checkpoint_dir, echo)
        result = run_training(train_config, settings=settings, echo=echo, on_event=on_event)
        if not result.checkpoints:
            raise RoundError(f"{train_config.checkpoint_dir}: the training saved no checkpoint")
        final = result.checkpoints[-1]
        steps = result.warm_start.steps if result.warm_start is not None else 0
        return Trained(final.path, final.sha256, result.run_id, warm_start_steps=steps)

    def analyze(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo) -> None:
        from shopsimrl.analyst.stage import run_analysis

        run_analysis(config.analysis_config(checkpoint), settings=settings, echo=echo)

    def gate(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo,
             progress: bool = False) -> list[str]:  # fmt: skip
        from shopsimrl.gate.stage import run_gate

        return run_gate(config.gate_config(checkpoint), settings=settings, echo=echo, progress=progress).lines

    def checkpoint_sha256(self, path: Path) -> str:
        from shopsimrl.models.checkpoint import verify_checkpoint

        return verify_checkpoint(path).sha256  # CheckpointError naming the path: missing, unfinished, changed


@dataclass
class DockerBackend:
    """The stages as compose services (`make round RUNNER=docker`); `dry_run` prints, runs nothing."""

    compose: str = "docker compose --env-file docker/versions.env"
    dry_run: bool = False
    trainer: str = "slime"  # local: the CPU services of compose.cpu.yaml run the CPU backend
    name: str = field(default="docker", init=False)

    def train(self, config: RoundConfig, *, settings: WandbSettings, echo: Echo,
              on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Trained:  # fmt: skip
        if self.trainer == "local":
            return self._train_local(config, settings, echo)
        from shopsimrl.models.slime_saves import SlimeSaveError, last_hf_save, prune_saves

        self._run(config, "train", config.slime_train().service, train_environment(config), settings, echo)
        if self.dry_run:
            return Trained(Path(f"<last HF save of {config.checkpoint_dir}>"), "0" * 64, save_dir=config.checkpoint_dir)
        try:
            checkpoint = last_hf_save(config.checkpoint_dir)
        except SlimeSaveError as exc:  # the service exited 0 but left nothing to serve: say where to look
            log = config.round_dir / LOG_DIR / "train.log"
            raise RoundError(f"train: {exc}; the training's output is in {log}") from None
        if config.slime_train().keep_saves == "last":
            try:
                removed = prune_saves(config.checkpoint_dir)
            except SlimeSaveError as exc:  # keep everything: the round goes on, the disk is the operator's
                echo(f"round {config.group}: saves not pruned: {exc}")
            else:
                if removed:
                    echo(f"round {config.group}: removed the earlier saves {', '.join(p.name for p in removed)} of "
                         f"{config.checkpoint_dir}; kept the tracker's iteration and {checkpoint.name} "
                         "(train.keep_saves: last)")  # fmt: skip
        return Trained(checkpoint, self.checkpoint_sha256(checkpoint), save_dir=config.checkpoint_dir)

    def analyze(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo) -> None:
        path = config.round_dir / ANALYSIS_CONFIG_FILE
        if not self.dry_run:
            _write_yaml(path, config.analysis_config(checkpoint).model_dump(mode="json"))
        env = {"ANALYZE_CONFIG": str(path), "ANALYZE_CHECKPOINT": str(checkpoint)}
        self._run(config, "analysis", "analyze", env, settings, echo)

    def gate(self, config: RoundConfig, checkpoint: Path, *, settings: WandbSettings, echo: Echo,
             progress: bool = False) -> list[str]:  # fmt: skip
        path = config.round_dir / GATE_CONFIG_FILE
        if not self.dry_run:
            _write_yaml(path, config.gate_config(checkpoint).model_dump(mode="json"))
        self._run(config, "gate", "gate", {"GATE_CONFIG": str(path), "GATE_CHECKPOINT": str(checkpoint)}, settings, echo)
        return []

    def _train_local(self, config: RoundConfig, settings: WandbSettings, echo: Echo) -> Trained:
        """The CPU train service (compose.cpu.yaml) runs `shopsimrl training run` on the round's derived
        runs/<group>/train_config.yaml; its local_run.json says what it saved."""
        from shopsimrl.local.run import RUN_MANIFEST

        train_config = config.train_config()
        if not self.dry_run:
            _set_aside_unfinished(train_config.stage_dir, train_config.checkpoint_dir, echo)
        self._run(config, "train", "train", {"TRAIN_CONFIG": str(config.train_config_path)}, settings, echo)
        if self.dry_run:
            return Trained(Path(f"<final checkpoint under {train_config.checkpoint_dir}>"), "0" * 64)
        log = config.round_dir / LOG_DIR / "train.log"
        record_path = train_config.stage_dir / RUN_MANIFEST
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            final = record["checkpoints"][-1]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            raise RoundError(f"train: the service exited 0 but {record_path} names no saved checkpoint; "
                             f"the training's output is in {log}") from None  # fmt: skip
        return Trained(Path(final["path"]), self.checkpoint_sha256(Path(final["path"])), record.get("run_id"),
                       warm_start_steps=int(record.get("warm_start_steps") or 0))  # fmt: skip

    def checkpoint_sha256(self, path: Path) -> str:
        from shopsimrl.models.checkpoint import checkpoint_sha256

        # Ours (the CPU trainer) verified against its checkpoint.json; slime's --save-hf directory hashed whole.
        return checkpoint_sha256(path)

    def command(self, service: str) -> tuple[dict[str, str], list[str]]:
        """`compose` split into its leading NAME=value assignments and the command, plus `run --rm SERVICE`."""
        words = shlex.split(self.compose)
        assignments: dict[str, str] = {}
        while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
            name, value = words.pop(0).split("=", 1)
            assignments[name] = value
        if not words:
            raise RoundError(f"compose command {self.compose!r} names no program")
        return assignments, [*words, "run", "--rm", service]

    def _run(self, config: RoundConfig, stage: str, service: str, env: dict[str, str], settings: WandbSettings,
             echo: Echo) -> None:  # fmt: skip
        assignments, argv = self.command(service)
        stage_env = {**assignments, **round_environment(config, settings), **env}
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in stage_env.items())
        echo(f"round {config.group}: {stage}: {shown} {shlex.join(argv)}")
        if self.dry_run:
            return
        if (image := self._missing_image(argv[:-3], {**os.environ, **stage_env}, service)) is not None:
            raise RoundError(f"{stage}: the image {image} of compose service {service!r} is not built: run "
                             "`make images` (with the same RUNNER, STANDIN and CPU settings), then the same command")  # fmt: skip
        log = config.round_dir / LOG_DIR / f"{stage}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"=== {utc_now()} {shlex.join(argv)}\n")
            handle.flush()
            try:
                process = subprocess.Popen(argv, env={**os.environ, **stage_env}, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True, errors="replace")  # fmt: skip
            except FileNotFoundError:
                raise RoundError(f"{argv[0]}: not found; the docker backend runs the stages with `{self.compose}`") from None
            assert process.stdout is not None
            for line in process.stdout:  # the operator sees the service's progress as it happens
                sys.stdout.write(line)
                handle.write(line)
            code = process.wait()
        if code != 0:
            how = f"killed by {signal.Signals(code - 128).name}" if 128 < code < 160 else f"exited {code}"
            raise RoundError(f"{stage}: compose service {service!r} {how}; its output is in {log}; "
                             f"retry: {rerun_command()} (finished stages are not re-run)")  # fmt: skip

    @staticmethod
    def _missing_image(compose: list[str], env: dict[str, str], service: str) -> str | None:
        """The service's image when the engine lacks it (compose would try to pull it, which fails
        without a registry login or builds it half-configured), else None; None too when compose or the
        engine cannot say (compose's own error then names the problem)."""
        try:
            done = subprocess.run([*compose, "config", "--format", "json"], env=env, capture_output=True,
                                  text=True, timeout=60, check=False)  # fmt: skip
            image = json.loads(done.stdout)["services"][service]["image"] if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return None
        if not image or Path(compose[0]).name != "docker":  # another program's CLI: no `image inspect` to ask
            return None
        inspect = subprocess.run([compose[0], "image", "inspect", image], capture_output=True, text=True,
                                 timeout=60, check=False)  # fmt: skip
        # Only the engine's own answer counts: an unreachable daemon is compose's to report.
        return image if inspect.returncode != 0 and "no such image" in inspect.stderr.lower() else None


def train_environment(config: RoundConfig) -> dict[str, str]:
    """What the train service's launcher takes from the round (scripts/run_shopsimrl_slime.sh)."""
    return {"SHOPSIM_CONFIG": str(config.train_config_path), "ROLLOUT_SEED": str(config.seeds.rollout),
            "START_LOAD": config.round.start_load or ""}  # fmt: skip


def round_environment(config: RoundConfig, settings: WandbSettings) -> dict[str, str]:
    """The round's identity and tracking for every service (the launcher always passes --wandb-mode)."""
    env = {"WANDB_GROUP": config.group, "USE_WANDB": "1" if settings.enabled else "0",
           "WANDB_MODE": settings.mode.value, "WANDB_PROJECT": settings.project}  # fmt: skip
    if settings.entity:
        env["WANDB_ENTITY"] = settings.entity
    return env


def _write_yaml(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False))


def _set_aside_unfinished(stage_dir: Path, checkpoint_dir: Path, echo: Echo) -> None:
    """A killed local training left a used run directory (refused by the start-up checks) and maybe
    checkpoints: keep them for the post-mortem, out of the way of the new attempt. (slime resumes a
    killed run from its own --save directory, so the docker backend keeps both.)"""
    suffix = f"unfinished-{utc_now().replace(':', '')}"
    for path in (stage_dir, checkpoint_dir):
        if path.exists():
            target = path.with_name(f"{path.name}.{suffix}")
            os.rename(path, target)
            echo(f"round: an unfinished training left {path}; moved to {target}")


def backend_for(config: RoundConfig, *, compose: str | None = None, dry_run: bool = False) -> StageBackend:
    if config.backend == "local":
        if dry_run:
            raise RoundError("--dry-run is for a docker round (round.backend: docker)")
        return LocalBackend()
    compose = compose or DockerBackend.compose
    if config.trainer == "local" and "compose.cpu.yaml" not in compose:
        raise RoundError("round.trainer: local on round.backend: docker runs the CPU services of compose.cpu.yaml; "
                         f"the compose command {compose!r} lacks it: `make round|rounds RUNNER=docker CPU=1`")  # fmt: skip
    return DockerBackend(compose=compose, dry_run=dry_run, trainer=config.trainer)

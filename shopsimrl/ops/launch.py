"""What `scripts/run_shopsimrl_slime.sh` checks and prepares before it starts Ray.

One source for a round's identity: the launcher derives the run group (`WANDB_GROUP` for a formal
round, `<WANDB_GROUP>-smoke` for a smoke run) and from it the run directory, the checkpoint
directory and the W&B group. The shipped plugin configs (`configs/shopsim.{smoke,formal}.yaml`) say
`run_dir: runs/{group}/train`; `prepare_launch` fills in the group, makes the paths absolute against
the launch directory (Ray runs the hooks in other working directories), validates the result and
writes it to `<run_dir>/shopsim_options.yaml`, the file slime gets as `--custom-config-path`. For PPO
under SAVE_DIR it also writes `<run_dir>/megatron_roles.yaml`, the role file with the critic's own
load and save (shopsimrl.ops.critic), which slime gets as `--megatron-config-path`.

Nothing is created outside the launch directory (the container's /workspace, or the checkout on a
host), and nothing at all before every input has been checked: a missing model, converted
checkpoint or prompt file stops the launch with one line per problem, before Ray starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.config import load_options_file
from shopsimrl.config.files import load_yaml_file
from shopsimrl.config.options import OPTIONS_KEY, ShopSimOptions, validate_options
from shopsimrl.errors import ConfigError
from shopsimrl.models.slime_saves import TRACKER_FILE, SlimeSaveError, latest_iteration
from shopsimrl.ops import model_files
from shopsimrl.ops.critic import RESOLVED_ROLES_NAME, critic_plan, resolved_roles
from shopsimrl.storage import atomic_write_text

GROUP_PLACEHOLDER = "{group}"
RESOLVED_OPTIONS_NAME = "shopsim_options.yaml"
_GROUP_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class LaunchError(Exception):
    """The launch cannot start; `problems` lists every reason, one line each."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class LaunchPaths:
    run_dir: Path
    options_file: Path
    start: str  # where slime will start this launch from (the plan's `start:` line)
    roles_file: Path | None = None  # PPO: the resolved --megatron-config-path
    critic: str | None = None  # PPO: where the critic starts (the plan's `critic:` line)


def _absolute(value: str, base_dir: Path) -> str:
    path = Path(value)
    return str(path if path.is_absolute() else base_dir / path)


def resolve_options(config_path: str | Path, group: str, base_dir: str | Path) -> tuple[dict[str, Any], ShopSimOptions]:
    """The plugin config with the group filled in and absolute paths, validated. Raises LaunchError."""
    if not _GROUP_PATTERN.match(group):
        raise LaunchError([f"run group {group!r} is not a plain name (letters, digits, '.', '_', '-')"])
    try:
        load_options_file(config_path)  # every problem of the file as written, with locations
    except ConfigError as exc:
        raise LaunchError([str(exc)]) from None
    document = load_yaml_file(config_path)  # the whole document: slime reads its top-level keys too
    _check_retry_mode(document, config_path)
    section = dict(document[OPTIONS_KEY])
    base = Path(base_dir)
    section["run_dir"] = _absolute(str(section["run_dir"]).replace(GROUP_PLACEHOLDER, group), base)
    if section.get("skillbank"):
        section["skillbank"] = _absolute(str(section["skillbank"]), base)
    try:
        options = validate_options(section, f"{config_path} (resolved for group {group})")
    except ConfigError as exc:
        raise LaunchError([str(exc)]) from None
    return {**document, OPTIONS_KEY: section}, options


def _check_retry_mode(document: dict[str, Any], config_path: str | Path) -> None:
    """The launcher always colocates training and SGLang: refuse retry modes that race that."""
    from types import SimpleNamespace

    from shopsimrl.rollout.retries import RETRY_MODE_ATTR, retry_mode

    if RETRY_MODE_ATTR in document:
        try:
            retry_mode(SimpleNamespace(colocate=True, **{RETRY_MODE_ATTR: document[RETRY_MODE_ATTR]}))
        except ValueError as exc:
            raise LaunchError([f"{config_path}: {exc}"]) from None


def input_problems(
    *, hf_checkpoint: str, ref_load: str, prompt_data: str, model_args: Sequence[str]
) -> list[str]:
    """Every missing or mismatching input of a launch, one line each."""
    problems = model_files.hf_model_problems(hf_checkpoint)
    config = Path(hf_checkpoint) / "config.json"
    if config.is_file():
        try:
            hf_config = json.loads(config.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(f"{config}: not JSON ({exc})")
        else:
            problems += [
                f"{problem} (configs/slime/models/*.sh vs {config})"
                for problem in model_files.architecture_problems(model_args, hf_config)
            ]
    problems += model_files.converted_checkpoint_problems(ref_load, hf_checkpoint, model_args)
    if not Path(prompt_data).is_file():
        problems.append(
            f"prompt data not found: {prompt_data} (write it with `shopsimrl tasks export --config "
            "configs/shopsim.formal.yaml --out runs/prompts/shopsim_train.jsonl`)"
        )
    return problems


def _same_dir(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def start_problems(*, save_dir: str | None, start_load: str | None, check_disk: bool) -> list[str]:
    """Why a round cannot start from `start_load` (the previous round's save dir), one line each.

    START_LOAD must never be this round's own save dir: slime would resume it at its iteration + 1
    and train nothing new (the 0-step trap, docs/slime_handoff.md). With `check_disk`, it must hold
    Megatron's tracker: slime initialises the actor from that iteration.
    """
    if not start_load:
        return []
    if save_dir and _same_dir(start_load, save_dir):
        return [
            f"START_LOAD {start_load} is this round's own save dir: slime would resume it at its iteration + 1 "
            "and train 0 new steps; START_LOAD is the previous round's save dir (checkpoints/<previous group>)"
        ]
    if not check_disk:
        return []
    try:
        iteration = latest_iteration(start_load)
    except SlimeSaveError as exc:
        return [f"START_LOAD: {exc}"]
    if iteration is None:
        return [
            f"START_LOAD {start_load} holds no {TRACKER_FILE}: it is not a finished slime save dir "
            "(the previous round's checkpoints/<group>, written with --save)"
        ]
    return []


def start_plan(*, save_dir: str | None, start_load: str | None, ref_load: str) -> str:
    """One line saying what slime will load for this launch, read from the trackers on disk now."""
    try:
        own = latest_iteration(save_dir) if save_dir else None
        previous = latest_iteration(start_load) if start_load else None
    except SlimeSaveError as exc:
        return f"UNREADABLE: {exc}"
    init = start_load or ref_load
    if own is not None:
        return (f"resume: {save_dir} holds iteration {own}: slime resumes this round at rollout {own + 1} "
                f"(model, optimizer, RNG, data position); --ref-load {init} is only the reference model")  # fmt: skip
    if start_load:
        found = f"iteration {previous}" if previous is not None else f"no {TRACKER_FILE} yet: a real launch refuses"
        fresh = f" with an empty --load {save_dir}" if save_dir else ""
        return (f"hand-off: --ref-load {start_load} ({found}){fresh}: slime starts at rollout 0 from the previous "
                "round's final weights with a fresh optimizer (docs/slime_handoff.md)")  # fmt: skip
    return f"base: rollout 0 from --ref-load {ref_load} (the converted base model) with a fresh optimizer"


def prepare_launch(
    *,
    config_path: str | Path,
    group: str,
    base_dir: str | Path,
    hf_checkpoint: str,
    ref_load: str,
    prompt_data: str,
    model_args: Sequence[str],
    write: bool,
    start_load: str | None = None,
    save_dir: str | None = None,
    roles_config: str | None = None,
) -> LaunchPaths:
    """Validate everything; with `write`, also check the inputs and write the resolved options file.

    `start_load` is the previous round's save dir (START_LOAD), `save_dir` this round's (--load and
    --save). `roles_config` (PPO): the shipped --megatron-config-path, resolved with the critic's own
    load and save into `<run_dir>/megatron_roles.yaml`. Raises LaunchError listing every problem;
    creates nothing when it raises.
    """
    document, options = resolve_options(config_path, group, base_dir)
    run_dir = Path(options.run_dir)
    critic = critic_plan(save_dir=save_dir, start_load=start_load) if roles_config else None
    paths = LaunchPaths(run_dir=run_dir, options_file=run_dir / RESOLVED_OPTIONS_NAME,
                        start=start_plan(save_dir=save_dir, start_load=start_load, ref_load=ref_load),
                        roles_file=run_dir / RESOLVED_ROLES_NAME if critic else None,
                        critic=critic.line if critic else None)  # fmt: skip
    trap = start_problems(save_dir=save_dir, start_load=start_load, check_disk=False)
    if trap:
        raise LaunchError(trap)
    try:
        roles = resolved_roles(roles_config, critic) if roles_config and critic else None
    except ConfigError as exc:
        raise LaunchError([str(exc)]) from None
    if not write:
        return paths
    problems = start_problems(save_dir=save_dir, start_load=start_load, check_disk=True)
    problems += [critic.problem] if critic and critic.problem else []
    problems += input_problems(
        hf_checkpoint=hf_checkpoint, ref_load=ref_load, prompt_data=prompt_data, model_args=model_args
    )
    if problems:
        raise LaunchError(problems)
    header = (
        f"# Written by scripts/run_shopsimrl_slime.sh from {config_path} for run group {group};\n"
        "# slime reads it with --custom-config-path. Edit the source file, not this copy.\n"
    )
    atomic_write_text(paths.options_file, header + yaml.safe_dump(document, sort_keys=False))
    if roles is not None and paths.roles_file is not None:
        atomic_write_text(paths.roles_file, (
            f"# Written by scripts/run_shopsimrl_slime.sh from {roles_config} for run group {group}: the critic's\n"
            "# load and save (shopsimrl/ops/critic.py); slime reads it with --megatron-config-path.\n"
        ) + yaml.safe_dump(roles, sort_keys=False))  # fmt: skip
    return paths

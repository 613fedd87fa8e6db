"""Resolve hooks by dotted path exactly as slime does (`slime/utils/misc.py::load_function`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shopsimrl.local.config import HookPaths


def load_function(path: str) -> Callable[..., Any]:
    """`module, _, attr = path.rpartition(".")`; import the module; return the attribute.

    Like slime, only dotted paths work (not `file.py:func`); errors name the path.
    """
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"hook path {path!r} is not a dotted path `package.module.function`")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AttributeError(
            f"hook path {path!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None


@dataclass(frozen=True)
class Hooks:
    generate: Callable[..., Any]
    reward: Callable[..., Any]
    reward_post_process: Callable[..., Any]
    dynamic_filter: Callable[..., Any] | None
    all_samples_process: Callable[..., Any] | None
    rollout_log: Callable[..., Any] | None


def resolve_hooks(paths: HookPaths) -> Hooks:
    """Resolve every configured hook now, so a wrong path fails before any model work."""

    def optional(path: str | None) -> Callable[..., Any] | None:
        return None if path is None else load_function(path)

    return Hooks(
        generate=load_function(paths.custom_generate_function_path),
        reward=load_function(paths.custom_rm_path),
        reward_post_process=load_function(paths.custom_reward_post_process_path),
        dynamic_filter=optional(paths.dynamic_sampling_filter_path),
        all_samples_process=optional(paths.rollout_all_samples_process_path),
        rollout_log=optional(paths.custom_rollout_log_function_path),
    )

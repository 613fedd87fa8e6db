"""The local optimizers' lr warm-up against the real thing: slime v0.3.1's `get_optimizer_param_scheduler`
(read from slime's source as tests/slime_source.py finds it, and run) building Megatron's own `OptimizerParamScheduler` (megatron-core,
installed by `make setup` without its dependencies: the scheduler is plain Python over torch)."""

from __future__ import annotations

import ast
import math
from argparse import Namespace
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_source import SLIME_SRC, requires_slime

from shopsimrl.errors import ConfigError
from shopsimrl.local.config import DriverConfig, RunConfig
from shopsimrl.local.lr_warmup import LinearWarmup
from shopsimrl.local.run import run_training
from shopsimrl.metrics import names as m
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings

NO_WANDB = WandbSettings.from_env({"USE_WANDB": "0"})


def _slime_scheduler_factory() -> Callable[[Namespace, Any], Any]:
    """slime's `get_optimizer_param_scheduler`, its own source, run against Megatron's scheduler class.

    Only that function is taken (model.py imports Megatron's training stack, which a CPU has no use for)."""
    megatron_scheduler = pytest.importorskip(
        "megatron.core.optimizer_param_scheduler", reason="megatron-core is not installed (make setup installs it)"
    )
    model_py = Path(SLIME_SRC) / "slime/backends/megatron_utils/model.py"
    tree = ast.parse(model_py.read_text())
    [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_optimizer_param_scheduler"]
    namespace: dict[str, Any] = {
        "Namespace": Namespace,
        "MegatronOptimizer": Any,
        "OptimizerParamScheduler": megatron_scheduler.OptimizerParamScheduler,
    }
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(model_py), "exec"), namespace)  # noqa: S102
    return namespace["get_optimizer_param_scheduler"]


def _slime_args(driver: DriverConfig) -> Namespace:
    """The arguments that function reads, as the launcher sets them (scripts/run_shopsimrl_slime.sh) and
    Megatron defaults the rest (start/end weight decay: --weight-decay, as Megatron's validate_args sets)."""
    return Namespace(
        num_rollout=driver.num_rollout,
        rollout_batch_size=driver.rollout_batch_size,
        n_samples_per_prompt=driver.n_samples_per_prompt,
        global_batch_size=driver.global_batch_size,
        lr=driver.lr,
        lr_warmup_fraction=driver.lr_warmup_fraction,
        lr_warmup_iters=0,
        lr_warmup_init=0.0,
        lr_decay_iters=None,
        lr_decay_style="constant",
        lr_wsd_decay_iters=None,
        lr_wsd_decay_style="exponential",
        min_lr=0.0,
        start_weight_decay=driver.weight_decay,
        end_weight_decay=driver.weight_decay,
        weight_decay_incr_style="constant",
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=False,
    )


def _megatron_lrs(driver: DriverConfig, increments: Sequence[int]) -> tuple[float, list[float]]:
    """Megatron's lr before the first step, and after each step of `increments` samples (what slime logs)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=driver.lr)
    scheduler = _slime_scheduler_factory()(_slime_args(driver), optimizer)
    first = optimizer.param_groups[0]["lr"]
    after = []
    for samples in increments:
        scheduler.step(increment=samples)
        after.append(optimizer.param_groups[0]["lr"])
    return first, after


def _driver(**overrides: Any) -> DriverConfig:
    base = {"num_rollout": 4, "rollout_batch_size": 2, "n_samples_per_prompt": 4, "global_batch_size": 4, "lr": 1e-4}
    return DriverConfig(**{**base, **overrides})


@requires_slime
@pytest.mark.parametrize(
    ("fraction", "increments"),
    [
        (0.25, [4] * 8),  # 8 optimizer steps of 4: warm-up over 2 steps
        (0.5, [4, 3, 4, 2, 4, 4, 1, 4]),  # uneven steps (slime's per-step batch size under dynamic sampling)
        (0.0, [4] * 8),  # no warm-up: the lr as given from the first step
    ],
)
def test_the_lr_before_and_after_every_step_is_megatrons(fraction: float, increments: list[int]) -> None:
    driver = _driver(lr_warmup_fraction=fraction)
    megatron_first, megatron_after = _megatron_lrs(driver, increments)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=driver.lr)
    warmup = LinearWarmup(optimizer, lr=driver.lr, warmup_samples=driver.lr_warmup_samples)
    ours_first = optimizer.param_groups[0]["lr"]
    ours_after = []
    for samples in increments:
        warmup.step(samples)
        ours_after.append(optimizer.param_groups[0]["lr"])
    # The same arithmetic on Python floats in the same order; rel 1e-12 allows for nothing but that.
    assert ours_first == pytest.approx(megatron_first, rel=1e-12, abs=0.0)
    assert ours_after == pytest.approx(megatron_after, rel=1e-12, abs=0.0)
    if fraction > 0:
        assert megatron_first == 0.0  # the first step moves no weight
        assert 0.0 < megatron_after[0] < driver.lr
    assert megatron_after[-1] == pytest.approx(driver.lr, rel=1e-12)


def test_a_warm_up_as_long_as_the_run_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="lr_warmup_fraction"):
        _driver(lr_warmup_fraction=1.0)


def test_the_round_config_names_a_bad_fraction(tiny_config: Callable[..., RunConfig]) -> None:
    with pytest.raises(ConfigError, match="lr_warmup_fraction"):
        tiny_config(driver={"lr_warmup_fraction": -0.1})


def _rows_with(config: RunConfig, key: str) -> list[dict[str, Any]]:
    """The run's metrics.jsonl rows that carry `key`, after a real local run."""
    result = run_training(config, settings=NO_WANDB, echo=lambda _line: None)
    return [r for r in read_jsonl(result.stage_dir / "metrics.jsonl").records if isinstance(r, dict) and key in r]


@requires_slime
def test_a_local_run_logs_megatrons_lrs_and_its_first_step_moves_no_weight(tiny_config) -> None:
    # tiny_run_config: 2 rollouts x 4 trajectories, 2 a step -> 4 optimizer steps; half of them warm up.
    config = tiny_config(driver={"lr_warmup_fraction": 0.5})
    rows = _rows_with(config, m.TRAIN_LR_PG0.name)
    increments = [int(r[m.TRAIN_GLOBAL_BATCH_SIZE.name]) for r in rows]
    assert len(rows) == 4
    _first, megatron_after = _megatron_lrs(config.driver, increments)
    assert [r[m.TRAIN_LR_PG0.name] for r in rows] == pytest.approx(megatron_after, rel=1e-12, abs=0.0)
    # Step 1 of rollout 0 scores its trajectories against log-probs taken before step 0. Step 0 ran at
    # lr 0, so nothing moved: the ratio is 1 up to the rounding between autograd and no-grad kernels
    # (the bound slime's CI and tests/local/test_driver.py use for a rollout's first step).
    assert abs(rows[1][m.TRAIN_PPO_KL.name]) < 1e-6


def test_without_warm_up_the_first_step_moves_the_policy(tiny_config) -> None:
    """The control for the test above: the same run at a constant lr, where step 0 does change step 1's ratio."""
    rows = _rows_with(tiny_config(), m.TRAIN_LR_PG0.name)
    assert [r[m.TRAIN_LR_PG0.name] for r in rows] == pytest.approx([1e-3] * 4)
    assert abs(rows[1][m.TRAIN_PPO_KL.name]) > 1e-6
    assert all(math.isfinite(r[m.TRAIN_PPO_KL.name]) for r in rows)


@requires_slime
def test_the_critic_warms_up_with_the_actor(tiny_config) -> None:
    """slime's critic role inherits every actor argument its overrides leave alone, --lr-warmup-fraction too."""
    config = tiny_config(driver={"advantage_estimator": "ppo", "lr_warmup_fraction": 0.5}, critic={"lr": 3e-3})
    critic = _rows_with(config, m.TRAIN_CRITIC_LR_PG0.name)
    increments = [int(r[m.TRAIN_CRITIC_GLOBAL_BATCH_SIZE.name]) for r in critic]
    _first, megatron_after = _megatron_lrs(config.driver.model_copy(update={"lr": 3e-3}), increments)
    assert [r[m.TRAIN_CRITIC_LR_PG0.name] for r in critic] == pytest.approx(megatron_after, rel=1e-12, abs=0.0)
    assert megatron_after[0] < 3e-3

from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.tracking import WandbMode, WandbSettings


def test_defaults_when_nothing_is_set():
    settings = WandbSettings.from_env({})
    assert settings.enabled is False
    assert settings.project == "shopsimrl"
    assert settings.group is None
    assert settings.mode is WandbMode.OFFLINE
    assert settings.dir == Path("wandb").absolute()
    assert settings.data_dir == settings.dir / "data"
    assert settings.cache_dir == settings.dir / "cache"


def test_use_wandb_2_is_rejected_with_the_value_named():
    with pytest.raises(ConfigError) as info:
        WandbSettings.from_env({"USE_WANDB": "2"})
    assert info.value.problems == ['USE_WANDB must be exactly "0" or "1", got "2"']


@pytest.mark.parametrize("raw", ["true", "yes", " 1", ""])
def test_use_wandb_accepts_only_0_or_1(raw):
    with pytest.raises(ConfigError, match=f'USE_WANDB must be exactly "0" or "1", got "{raw}"'):
        WandbSettings.from_env({"USE_WANDB": raw})


def test_every_problem_is_reported_together():
    with pytest.raises(ConfigError) as info:
        WandbSettings.from_env({"USE_WANDB": "on", "WANDB_MODE": "dryrun"})
    assert info.value.problems == [
        'USE_WANDB must be exactly "0" or "1", got "on"',
        "W&B mode must be one of ['online', 'offline', 'disabled'], got 'dryrun' (from WANDB_MODE)",
    ]


def test_wandb_group_is_mapped_to_the_run_group_and_run_group_is_an_alias():
    assert WandbSettings.from_env({"WANDB_GROUP": "r-000"}).group == "r-000"
    assert WandbSettings.from_env({"WANDB_RUN_GROUP": "r-001"}).group == "r-001"
    with pytest.raises(ConfigError, match="WANDB_GROUP='a' and WANDB_RUN_GROUP='b' disagree"):
        WandbSettings.from_env({"WANDB_GROUP": "a", "WANDB_RUN_GROUP": "b"})


def test_overrides_win_over_the_environment(tmp_path):
    env = {
        "USE_WANDB": "0",
        "WANDB_PROJECT": "p",
        "WANDB_GROUP": "g",
        "WANDB_MODE": "online",
        "WANDB_DIR": "/nonexistent",
        "WANDB_ENTITY": "team",
    }
    settings = WandbSettings.from_env(
        env,
        overrides={"enabled": True, "group": "g2", "mode": "offline", "dir": str(tmp_path), "project": None},
    )
    assert (settings.enabled, settings.project, settings.group, settings.entity) == (True, "p", "g2", "team")
    assert settings.mode is WandbMode.OFFLINE
    assert settings.dir == tmp_path


def test_unknown_override_is_an_error():
    with pytest.raises(ConfigError, match=r"unknown override\(s\) \['colour'\]"):
        WandbSettings.from_env({}, overrides={"colour": "red"})

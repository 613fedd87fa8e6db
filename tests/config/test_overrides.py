"""`--set KEY=VALUE` overrides, one implementation for every config-taking command."""

from __future__ import annotations

import pytest

from shopsimrl.config.overrides import MalformedOverride, parse_overrides, set_dotted
from shopsimrl.errors import ConfigError


def test_values_are_yaml_and_sections_are_created():
    raw = {"driver": {"lr": 1e-6}}
    for key, value in parse_overrides(("driver.num_rollout=3", "model.name=tiny", "q.start=[0.5]"), example="x=1").items():
        set_dotted(raw, key, value, "demo.yaml")
    assert raw == {"driver": {"lr": 1e-6, "num_rollout": 3}, "model": {"name": "tiny"}, "q": {"start": [0.5]}}


def test_bad_overrides_say_which_and_where():
    with pytest.raises(MalformedOverride) as malformed:  # a ConfigError: the library knows no click
        parse_overrides(("model.name",), example="model.name=tiny")
    assert (malformed.value.source, malformed.value.problems) == ("--set", ["'model.name' is not KEY=VALUE (e.g. model.name=tiny)"])
    with pytest.raises(ConfigError) as error:
        set_dotted({"driver": 5}, "driver.lr", 1.0, "demo.yaml")
    assert error.value.problems == ["override driver.lr: not inside a section"]

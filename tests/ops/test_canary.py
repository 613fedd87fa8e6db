"""The canary over the real rollout path: a tiny model built here, and a model server that refuses."""

from __future__ import annotations

import json
import socket

import pytest

from shopsimrl.config import ShopSimOptions
from shopsimrl.errors import ConfigError
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.ops.canary import PHASES, CanarySettings, percentiles, render_canary, run_canary
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, SGLangGenerator


def _options(tmp_path) -> ShopSimOptions:
    return ShopSimOptions(run_dir=str(tmp_path), max_turns=2, max_new_tokens_per_turn=6,
                          catalog={"seed": 0, "num_products": 200})


def test_tiny_model_canary_passes_and_writes_the_report(tmp_path):
    tokenizer = tiny_tokenizer()
    generator = BatchedLocalHFGenerator(tiny_model(tokenizer, seed=0), tokenizer, seed=0)
    settings = CanarySettings(tasks=3, out_dir=str(tmp_path / "canary"))
    lines: list[str] = []
    report = run_canary(
        settings, tokenizer=tokenizer, generator=generator, options=_options(tmp_path), echo=lines.append
    )
    # The three episodes ran concurrently (one batch per turn) and progress was reported per task.
    assert generator.stats.largest == 3
    assert lines[0] == "canary: running 3 tasks of split 'test' concurrently"
    assert [line.split(" (")[0] for line in lines[1:]] == [f"canary: {k}/3 tasks done" for k in (1, 2, 3)]
    assert report.passed, render_canary(report)
    on_disk = json.loads((tmp_path / "canary" / "canary_report.json").read_text())
    assert on_disk["schema_version"] == 1 and on_disk["passed"] is True and on_disk["failed_tasks"] == []
    assert len(on_disk["results"]) == 3
    for row in on_disk["results"]:
        assert row["problems"] == [] and row["technical_error"] is None
        assert 0.0 <= row["reward"] <= 1.0
        saved = json.loads(open(row["trajectory_file"]).read())
        assert saved["task_id"] == row["task_id"] and saved["messages"]
    assert set(on_disk["phases"]) == {*PHASES, "wall_s"}
    for phase in PHASES:
        values = [row["timings"][phase] for row in on_disk["results"]]
        assert on_disk["phases"][phase] == percentiles(values)
    text = render_canary(report)
    assert "canary: 3/3 passed" in text


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_model_service_error_fails_the_canary_without_a_reward(tmp_path):
    generator = SGLangGenerator(f"http://127.0.0.1:{_closed_port()}", timeout_s=2.0)
    settings = CanarySettings(tasks=2, backend="sglang", url="http://unused", tokenizer="unused",
                              out_dir=str(tmp_path / "c"))
    report = run_canary(settings, tokenizer=tiny_tokenizer(), generator=generator, options=_options(tmp_path))
    assert not report.passed
    assert len(report.failed_tasks) == 2
    for result in report.results:
        assert result.reward is None
        assert result.technical_error["kind"] == "model_service"
        assert result.problems[-1] == "no reward"
        assert result.problems[0].startswith("technical error (model_service): ")


def test_percentiles_are_numpy_linear():
    # p95 = 1 + 0.95 * (4 - 1) by linear interpolation between order statistics
    assert percentiles([1.0, 2.0, 3.0, 4.0]) == {"p50": 2.5, "p95": pytest.approx(3.85, abs=1e-12)}


@pytest.mark.parametrize("kwargs,problem", [
    ({"backend": "sglang"}, "backend=sglang needs --url (e.g. http://127.0.0.1:30000)"),
    ({"backend": "local", "url": "http://x"}, "--url is only for backend=sglang"),
])
def test_bad_settings_are_config_errors(tmp_path, kwargs, problem):
    with pytest.raises(ConfigError) as info:
        run_canary(CanarySettings(out_dir=str(tmp_path), **kwargs))
    assert problem in info.value.problems

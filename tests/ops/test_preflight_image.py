"""The in-container rows about the image: what it was built from against the pins, and SGLang."""

from __future__ import annotations

import json
from pathlib import Path

from shopsimrl.ops.preflight import PreflightContext, Runner, Status, run_preflight
from shopsimrl.ops.preflight_image import check_image_base, check_sglang, image_kind

DIGEST = "sha256:" + "ab" * 32


def _ctx(tmp_path: Path, record: dict | None, pinned: str = "") -> PreflightContext:
    (tmp_path / "docker").mkdir(exist_ok=True)
    (tmp_path / "docker" / "versions.env").write_text(f"SLIME_IMAGE_DIGEST={pinned}\nPYTHON_IMAGE_DIGEST={pinned}\n")
    image_file = tmp_path / "IMAGE.json"
    if record is not None:
        image_file.write_text(json.dumps(record))
    return PreflightContext(root=tmp_path, runner=Runner.CONTAINER, image_file=image_file)


def test_an_image_on_a_stand_in_base_fails_with_the_production_fix(tmp_path):
    ctx = _ctx(tmp_path, {"image": "tools", "base": "localhost:5000/shopsimrl-standin/python:3.11", "digest": DIGEST})
    row = check_image_base(ctx)
    assert row.status is Status.FAIL
    assert "pins no PYTHON_IMAGE_DIGEST (a STAND-IN base" in row.detail
    assert row.fix == "on a training host: make pin-images && make images"


def test_an_image_built_from_the_pinned_base_passes_and_another_base_fails(tmp_path):
    record = {"image": "train", "base": "slimerl/slime:nightly", "digest": DIGEST}
    assert check_image_base(_ctx(tmp_path, record, pinned=DIGEST)).status is Status.PASS
    other = check_image_base(_ctx(tmp_path, record, pinned="sha256:" + "cd" * 32))
    assert other.status is Status.FAIL and other.fix == "rebuild from the pins: make images"


def test_a_missing_record_fails_and_the_image_counts_as_train(tmp_path):
    ctx = _ctx(tmp_path, None)
    assert check_image_base(ctx).status is Status.FAIL and check_image_base(ctx).fix == "rebuild: make images"
    assert image_kind(ctx) == "train"


def test_sglang_missing_is_a_fail_with_the_fix(tmp_path):
    row = check_sglang(_ctx(tmp_path, None))  # the dev venv has no sglang
    assert row.status is Status.FAIL and "cannot serve the round's checkpoint" in row.detail


def test_the_tools_image_runs_only_the_rows_sync_and_export_need(tmp_path):
    ctx = _ctx(tmp_path, {"image": "tools", "base": "python:3.11-slim", "digest": DIGEST}, pinned=DIGEST)
    ctx.env = {"PATH": "/usr/bin:/bin", "USE_WANDB": "0"}
    names = [row.name for row in run_preflight(ctx)]
    assert names == ["wandb importable", "wandb credentials", "image base pinned", "persistent volumes",
                     "W&B dirs on the volume"]  # fmt: skip

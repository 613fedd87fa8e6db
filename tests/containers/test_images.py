"""Both images, built on the stand-ins: the CLI runs and preflight says what is missing and how to get it."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import HOST_UID, make_workspace

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]  # whole rounds in containers on 2 cores

COMPOSE = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.standin.yaml",
           "--env-file", "docker/versions.local.env"]  # fmt: skip


@pytest.mark.parametrize("image_key", ["SHOPSIMRL_TRAIN_IMAGE", "SHOPSIMRL_TOOLS_IMAGE"])
def test_the_cli_runs_in_both_images(pins, image_key):
    done = subprocess.run(["docker", "run", "--rm", "--network", "host", pins[image_key], "shopsimrl", "--help"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ShopSimRL: train LLM shopping agents" in done.stdout
    for group in ("training", "wandb", "preflight", "eval"):
        assert f"  {group} " in done.stdout


def _preflight(tmp_path, service: list[str]) -> dict[str, dict]:
    workspace = make_workspace(tmp_path / "ws")
    env = {"HOST_UID": str(HOST_UID), "HOST_GID": str(HOST_UID), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    done = subprocess.run([*COMPOSE, "run", "--rm", "-T", *service], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert done.returncode == 1, "a FAIL row exits 1"
    return {row["name"]: row for row in report["checks"]}


def test_preflight_in_the_train_image_fails_what_a_stand_in_lacks_and_passes_the_rest(tmp_path):
    rows = _preflight(tmp_path, ["preflight"])
    statuses = {name: row["status"] for name, row in rows.items()}
    # What the stand-in lacks, each with a fix a user can act on.
    assert rows["GPU visible in container"]["detail"] == "nvidia-smi not found"
    assert "NVIDIA Container Toolkit" in rows["GPU visible in container"]["fix"]
    assert statuses["SGLang in image"] == "FAIL" and "make pin-images && make images" in rows["SGLang in image"]["fix"]
    base = rows["image base pinned"]
    assert base["status"] == "FAIL" and "STAND-IN" in base["detail"] and "standin/slime" in base["detail"]
    assert base["fix"] == "on a training host: make pin-images && make images"
    # No model and no converted checkpoint here: the launch inputs are missing, and say how to make them.
    assert statuses["slime launch inputs"] == "FAIL" and "make convert" in rows["slime launch inputs"]["fix"]
    assert statuses["chat template agreement"] == "SKIP"
    # The rest is right about this container.
    assert statuses["wandb importable"] == "PASS" and "wandb 0.31." in rows["wandb importable"]["detail"]
    assert statuses["wandb credentials"] == "SKIP"  # USE_WANDB unset: 0
    assert statuses["persistent volumes"] == "PASS"
    assert statuses["W&B dirs on the volume"] == "PASS"
    assert statuses["slime source in image"] == "PASS" and "a6272da0d4f3" in rows["slime source in image"]["detail"]
    assert statuses["free disk"] in ("PASS", "FAIL") and "formal profile needs" in rows["free disk"]["detail"]


def test_preflight_in_the_tools_image_checks_what_sync_and_export_need(tmp_path):
    rows = _preflight(tmp_path, ["wandb-sync", "shopsimrl", "preflight", "--format", "json"])
    assert {name: row["status"] for name, row in rows.items()} == {
        "wandb importable": "PASS",
        "wandb credentials": "SKIP",
        "image base pinned": "FAIL",
        "persistent volumes": "PASS",
        "W&B dirs on the volume": "PASS",
    }
    assert "standin/python" in rows["image base pinned"]["detail"]

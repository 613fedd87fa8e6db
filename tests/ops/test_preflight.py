"""shopsimrl preflight on this host, on a fake Docker (an executable on PATH), and in container mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from ops_helpers import ROOT

from shopsimrl.cli import main
from shopsimrl.ops.preflight import (
    PreflightContext,
    Runner,
    Status,
    check_free_disk,
    check_local_images,
    check_no_api_key,
    check_persistent_mounts,
    check_wandb_dirs,
    check_wandb_status,
    failed,
    mount_points,
    render_table,
    run_preflight,
)

DOCKER_CHECKS = ("Docker engine", "local images match pins", "GPU visible on host", "container checks")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k not in ("USE_WANDB", "NETRC")}
    env.update({"HOME": str(tmp_path / "home"), **extra})
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def _by_name(results):
    return {r.name: r for r in results}


def test_local_runner_on_this_host_passes_and_skips_docker(tmp_path):
    results = run_preflight(PreflightContext(root=ROOT, runner=Runner.LOCAL, env=_env(tmp_path), min_free_gib=0.01))
    named = _by_name(results)
    for name in DOCKER_CHECKS:
        assert named[name].status is Status.SKIP, name
    assert named["wandb importable"].status is Status.PASS
    assert named["wandb importable"].detail.startswith("wandb 0.31.")
    assert named["compose.yaml"].status is Status.PASS
    assert named["slime launcher dry run"].status is Status.PASS
    assert named["persistent volumes"].status is Status.PASS
    assert named["image digests pinned"].status in (Status.PASS, Status.WARN)
    assert not failed(results), render_table(results)


def _path_without(tool: str, path: str, tmp_path: Path) -> str:
    """PATH with one binary hidden: each directory holding `tool` is replaced by a directory of links
    to everything else in it (dropping the directory would hide bash too, where docker is in /usr/bin)."""
    entries = []
    for index, directory in enumerate(path.split(":")):
        if not (Path(directory) / tool).exists():
            entries.append(directory)
            continue
        shadow = tmp_path / f"path-without-{tool}-{index}"
        shadow.mkdir()
        for entry in Path(directory).iterdir():
            if entry.name != tool:
                (shadow / entry.name).symlink_to(entry)
        entries.append(str(shadow))
    return ":".join(entries)


def test_docker_runner_without_docker_fails_and_says_what_it_could_not_check(tmp_path):
    env = _env(tmp_path, PATH=_path_without("docker", f"{Path(sys.executable).parent}:/usr/bin:/bin", tmp_path))
    results = run_preflight(PreflightContext(root=ROOT, runner=Runner.DOCKER, env=env, min_free_gib=0.01))
    named = _by_name(results)
    assert (named["Docker engine"].status, named["Docker engine"].detail) == (Status.FAIL, "`docker` not found")
    assert named["Docker engine"].fix == "install Docker, or use RUNNER=local"
    assert (named["local images match pins"].status, named["local images match pins"].detail) == (
        Status.SKIP, "Docker engine not reachable")
    assert (named["container checks"].status, named["container checks"].detail) == (
        Status.SKIP, "not run: Docker engine not reachable")
    table = render_table(results)
    assert "fix: install Docker, or use RUNNER=local" in table
    assert failed(results)


def _fake_docker(tmp_path: Path, base_digest: str) -> Path:
    """A `docker` executable that answers `info` and `image inspect` like a daemon with our images."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    labels = json.dumps({"org.shopsimrl.base.digest": base_digest})
    script.write_text(f"""#!/usr/bin/env bash
case "$1 $2" in
  "info --format") echo 28.2.2 ;;
  "image inspect") echo '{labels}' ;;
  *) echo "unexpected: $*" >&2; exit 3 ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.mark.parametrize("label,expected", [("sha256:" + "a" * 64, Status.PASS), ("sha256:" + "b" * 64, Status.FAIL)])
def test_local_images_compared_with_the_pins(tmp_path, label, expected):
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "docker/versions.env").write_text(
        "SHOPSIMRL_TRAIN_IMAGE=t:1\nSHOPSIMRL_TOOLS_IMAGE=u:1\n"
        f"SLIME_IMAGE_DIGEST=sha256:{'a' * 64}\nPYTHON_IMAGE_DIGEST=sha256:{'a' * 64}\n")
    bin_dir = _fake_docker(tmp_path, label)
    ctx = PreflightContext(root=root, runner=Runner.DOCKER, env=_env(tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin"))
    from shopsimrl.ops.preflight import check_docker_engine

    engine = check_docker_engine(ctx)
    assert (engine.status, engine.detail) == (Status.PASS, "server 28.2.2")
    result = check_local_images(ctx, engine)
    assert result.status is expected
    if expected is Status.FAIL:
        assert result.detail == (f"t:1 built from {label}, pinned sha256:{'a' * 64}; "
                                 f"u:1 built from {label}, pinned sha256:{'a' * 64}")
        assert result.fix == "rebuild: make images"


def _mountinfo(tmp_path: Path, points: list[str]) -> Path:
    lines = ["22 1 0:21 / / rw,relatime - overlay overlay rw"]
    lines += [f"{30 + i} 22 8:1 /host{p} {p} rw,relatime - ext4 /dev/sda1 rw" for i, p in enumerate(points)]
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_mount_points_decode_octal_escapes(tmp_path):
    path = tmp_path / "mi"
    path.write_text("36 35 98:0 /mnt1 /mnt\\040with\\040space rw - ext3 /dev/root rw\n")
    assert mount_points(path) == {"/mnt with space"}


def test_container_mounts_missing_and_present(tmp_path):
    ws = "/workspace"
    ctx = PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=_env(tmp_path),
                           mountinfo=_mountinfo(tmp_path, [f"{ws}/runs", f"{ws}/configs"]))
    result = check_persistent_mounts(ctx)
    assert (result.status, result.detail) == (
        Status.FAIL, "not mounted (container layer): /workspace/checkpoints, /workspace/wandb")
    ctx.mountinfo = _mountinfo(tmp_path, [f"{ws}/runs", f"{ws}/checkpoints", f"{ws}/wandb"])
    assert check_persistent_mounts(ctx).status is Status.PASS


def test_container_wandb_dirs_must_be_inside_the_volume(tmp_path):
    ws = tmp_path / "workspace"
    (ws / "wandb").mkdir(parents=True)
    env = _env(tmp_path, WANDB_DIR=str(ws / "wandb"), WANDB_DATA_DIR=str(tmp_path / "elsewhere"))
    result = check_wandb_dirs(PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env, workspace=ws))
    assert result.status is Status.FAIL
    assert result.detail == (f"WANDB_DATA_DIR={tmp_path / 'elsewhere'} is outside {ws / 'wandb'}; WANDB_CACHE_DIR unset "
                             "(wandb would stage under ~/.local or ~/.cache, in the container layer)")
    env.update(WANDB_DATA_DIR=str(ws / "wandb/data"), WANDB_CACHE_DIR=str(ws / "wandb/cache"))
    assert check_wandb_dirs(PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env, workspace=ws)).status is Status.PASS


def test_host_wandb_data_dir_outside_wandb_dir_fails(tmp_path):
    env = _env(tmp_path, WANDB_DIR=str(tmp_path / "w"), WANDB_DATA_DIR=str(tmp_path / "d"))
    result = check_wandb_dirs(PreflightContext(root=ROOT, runner=Runner.LOCAL, env=env))
    assert (result.status, result.detail) == (Status.FAIL, f"WANDB_DATA_DIR={tmp_path / 'd'} is outside WANDB_DIR")


def test_free_disk_threshold(tmp_path):
    result = check_free_disk(PreflightContext(root=tmp_path, runner=Runner.LOCAL, env=_env(tmp_path), min_free_gib=1e9))
    assert result.status is Status.FAIL and result.detail.endswith("margin only 1e+09 GiB")


@pytest.mark.parametrize("env_extra,status,detail", [
    ({"USE_WANDB": "2"}, Status.FAIL, "USE_WANDB='2'"),
    ({"USE_WANDB": "0"}, Status.SKIP, "USE_WANDB=0: W&B is not used (local files only)"),
    ({"USE_WANDB": "1", "WANDB_MODE": "offline"}, Status.PASS,
     "WANDB_MODE=offline: no credentials needed until `make wandb-sync`"),
])
def test_wandb_credentials(tmp_path, env_extra, status, detail):
    result = check_wandb_status(PreflightContext(root=ROOT, runner=Runner.LOCAL, env=_env(tmp_path, **env_extra)))
    assert (result.status, result.detail) == (status, detail)


def test_wandb_online_without_credentials_fails_and_netrc_passes(tmp_path):
    env = _env(tmp_path, USE_WANDB="1", WANDB_MODE="online", PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    result = check_wandb_status(PreflightContext(root=ROOT, runner=Runner.LOCAL, env=env))
    assert result.status is Status.FAIL and result.detail.startswith("WANDB_MODE=online and no credentials for ")
    host = result.detail.rsplit(" ", 1)[1]
    netrc = tmp_path / "home/.netrc"
    netrc.write_text(f"machine {host}\n  login user\n  password {'p' * 40}\n")
    netrc.chmod(0o600)
    result = check_wandb_status(PreflightContext(root=ROOT, runner=Runner.LOCAL, env=env))
    assert (result.status, result.detail) == (Status.PASS, f"credentials for {host} in netrc (wandb login)")


def test_api_key_in_a_tracked_file_fails(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "settings.sh").write_text("export WANDB_API_KEY=" + "0123456789abcdef" * 3 + "\n")
    subprocess.run([*git, "add", "settings.sh"], check=True)
    ctx = PreflightContext(root=repo, runner=Runner.LOCAL, env=_env(tmp_path))
    result = check_no_api_key(ctx)
    assert result.status is Status.FAIL
    assert result.detail == "settings.sh:1:export WANDB_API_KEY=" + "0123456789abcdef" * 3
    (repo / "settings.sh").write_text("export WANDB_API_KEY=\n")
    subprocess.run([*git, "add", "settings.sh"], check=True)
    assert check_no_api_key(ctx).status is Status.PASS


def test_cli_json_report_and_exit_codes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    for name in [k for k in os.environ if k.startswith("WANDB_")] + ["USE_WANDB"]:
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "preflight.json"
    result = CliRunner().invoke(main, ["preflight", "--runner", "local", "--format", "json", "--min-free-gib", "0.01",
                                       "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1 and report["runner"] == "local"
    assert json.loads(result.output) == report
    failing = CliRunner().invoke(main, ["preflight", "--runner", "local", "--min-free-gib", "1e12"])
    assert failing.exit_code == 1
    assert "FAIL    free disk" in failing.output


def test_help_has_an_example():
    for command in ("preflight", "canary"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "Example: shopsimrl " + command in result.output


def test_container_credentials_come_from_the_mounted_netrc_or_the_passed_key(tmp_path):
    """Inside the train container: compose mounts the host's netrc (or /dev/null) and passes the key by name."""
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    env = _env(tmp_path, USE_WANDB="1", WANDB_MODE="online", PATH=path, NETRC="/dev/null")
    result = check_wandb_status(PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env))
    assert result.status is Status.FAIL
    assert result.detail.endswith("inside the container (no WANDB_API_KEY, netrc /dev/null has none)")
    assert "compose passes it by name" in result.fix
    host = result.detail.split("no credentials for ", 1)[1].split(" ", 1)[0]
    mounted = tmp_path / "wandb.netrc"
    mounted.write_text(f"machine {host}\n  login user\n  password {'p' * 40}\n")
    env["NETRC"] = str(mounted)
    result = check_wandb_status(PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env))
    assert (result.status, result.detail) == (Status.PASS, f"credentials for {host} in netrc {mounted} (mounted)")
    env.update(NETRC="/dev/null", WANDB_API_KEY="k" * 40)
    assert check_wandb_status(PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env)).status is Status.PASS


def _nvidia_smi(tmp_path: Path, count: int) -> str:
    """A PATH whose nvidia-smi lists `count` GPUs as `nvidia-smi -L` does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    lines = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\\n" for i in range(count))
    tool.write_text(f"#!/bin/sh\nprintf '{lines}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:/usr/bin:/bin"


def test_the_visible_gpus_are_compared_with_the_profiles_count_in_the_container(tmp_path):
    """`ray start --num-gpus N` trusts the profile; on a 4-GPU host the default 8 fails minutes in."""
    from shopsimrl.ops.preflight_launch import check_gpu_count

    env = _env(tmp_path, PATH=_nvidia_smi(tmp_path, 4))
    ctx = PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env, workspace=ROOT)
    result = check_gpu_count(ctx)
    assert (result.status, result.detail) == (
        Status.FAIL, "4 GPU(s) visible; configs/slime/formal.env trains on 8, configs/slime/smoke.env on 1")
    assert result.fix == "set NUM_GPUS=4 in .env (or make train NUM_GPUS=4); the profile's default is for 8-GPU hosts"
    env["NUM_GPUS"] = "4"
    result = check_gpu_count(ctx)
    assert (result.status, result.detail) == (
        Status.PASS, "4 GPU(s) visible; configs/slime/formal.env trains on 4, configs/slime/smoke.env on 1")
    env["SMOKE_NUM_GPUS"] = "6"
    assert check_gpu_count(ctx).status is Status.FAIL
    names = [r.name for r in run_preflight(ctx)]
    assert "GPUs for the launch profiles" in names

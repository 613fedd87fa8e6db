"""Static checks: hadolint, shellcheck, compose.yaml against the compose-spec schema, pins, .env.example."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from ops_helpers import ROOT

from shopsimrl.ops import compose_schema, slime_flags
from shopsimrl.ops.preflight import read_versions

BIN = Path(sys.executable).parent
SHELL_FILES = sorted(str(p.relative_to(ROOT)) for pattern in ("scripts/*.sh", "docker/*.sh", "configs/slime/*.env",
                                                              "configs/slime/models/*.sh") for p in ROOT.glob(pattern))


def test_shellcheck_is_clean():
    assert {"scripts/container_entry.sh", "scripts/with_sglang.sh"} <= set(SHELL_FILES)
    result = subprocess.run([str(BIN / "shellcheck"), "-x", *SHELL_FILES], cwd=ROOT, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout


def test_hadolint_is_clean():
    dockerfiles = sorted(str(p) for p in (ROOT / "docker").glob("*.Dockerfile"))
    assert len(dockerfiles) == 3  # train, tools, cpu
    result = subprocess.run([str(BIN / "hadolint"), *dockerfiles], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_hadolint_does_catch_a_bad_dockerfile(tmp_path: Path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    result = subprocess.run([str(BIN / "hadolint"), "--no-color", str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "DL3006" in result.stdout and "DL3008" in result.stdout


def test_compose_file_is_valid_against_the_schema():
    assert compose_schema.schema_errors(compose_schema.read_compose(ROOT / "compose.yaml")) == []


def test_schema_rejects_an_unknown_service_key_and_a_bad_ulimit():
    compose = compose_schema.read_compose(ROOT / "compose.yaml")
    broken = copy.deepcopy(compose)
    broken["services"]["train"]["gpu"] = True
    broken["services"]["report"]["ulimits"] = {"memlock": {"soft": 1}}
    # The schema's unevaluatedProperties also reports the rest of an invalid service: that is its wording.
    assert compose_schema.schema_errors(broken) == [
        "services/report/ulimits/memlock: {'soft': 1} is not valid under any of the given schemas",
        "services/report: Unevaluated properties are not allowed ('command', 'env_file', 'environment', 'image', "
        "'ulimits', 'user', 'volumes', 'working_dir' were unexpected)",
        "services/train: Unevaluated properties are not allowed ('gpu' was unexpected)",
    ]


def test_services_and_what_slime_needs():
    compose = compose_schema.read_compose(ROOT / "compose.yaml")
    services = compose["services"]
    assert {"train", "train-smoke", "wandb-sync", "report", "preflight", "canary"} <= set(services)
    for name in ("train", "train-smoke", "preflight", "canary"):
        service = services[name]
        assert service["ipc"] == "host"
        assert service["shm_size"] == "16gb"
        assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
        assert service["deploy"]["resources"]["reservations"]["devices"] == [
            {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    for name, service in services.items():
        assert service["env_file"] == [{"path": ".env", "required": False}], name
        environment = service.get("environment", {})
        # No secret in the compose file's own environment: the key is passed through by name only
        # (no value: compose takes it from the host environment or .env), the netrc is mounted.
        assert {key: value for key, value in environment.items() if "KEY" in key or "TOKEN" in key} == {
            "WANDB_API_KEY": None}, name
        assert environment["NETRC"] == "/run/secrets/wandb.netrc", name
        netrc = [v for v in service["volumes"] if v["target"] == "/run/secrets/wandb.netrc"]
        assert netrc == [{"type": "bind", "source": "${WANDB_NETRC:-/dev/null}", "target": "/run/secrets/wandb.netrc",
                          "read_only": True}], name
        assert environment["WANDB_GROUP"] == "${WANDB_GROUP:-qwen35-4b-round-000}", name
        assert (environment["HOST_UID"], environment["HOST_GID"]) == ("${HOST_UID:-}", "${HOST_GID:-}"), name
    # Every train-image service runs through the ownership hand-back; the tools image runs as the host user.
    for name in ("train", "train-smoke", "convert", "preflight", "canary", "analyze", "gate", "eval"):
        assert services[name]["command"][:2] == ["bash", "/opt/shopsimrl/scripts/container_entry.sh"], name
        assert "user" not in services[name], name
        assert {"type": "bind", "source": "./runs/ray", "target": "/tmp/ray", "bind": {"create_host_path": True}} in \
            services[name]["volumes"], name
    for name in ("wandb-sync", "report"):
        assert services[name]["user"] == "${HOST_UID:-1000}:${HOST_GID:-1000}", name


def test_conversion_writes_to_a_writable_persistent_volume():
    services = compose_schema.read_compose(ROOT / "compose.yaml")["services"]
    convert = services["convert"]
    assert convert["command"][2:] == ["bash", "/opt/shopsimrl/scripts/convert_hf_to_torch_dist.sh"]
    mounts = {v["target"]: v for v in convert["volumes"]}
    assert mounts["/models"]["read_only"] is True
    assert "read_only" not in mounts["/workspace/checkpoints"]
    common = (ROOT / "configs/slime/common.env").read_text()
    assert 'REF_LOAD="${REF_LOAD:-checkpoints/base/Qwen3.5-4B_torch_dist}"' in common


def test_persistent_volumes_are_host_bind_mounts():
    compose = compose_schema.read_compose(ROOT / "compose.yaml")
    assert compose_schema.persistent_mount_problems(compose) == []


def test_persistent_volume_rule_reports_each_problem():
    compose = compose_schema.read_compose(ROOT / "compose.yaml")
    broken = copy.deepcopy(compose)
    broken["services"]["train"]["volumes"] = ["ckpt:/workspace/checkpoints", "./runs:/workspace/runs"]
    broken["services"]["report"]["environment"] = {**broken["services"]["report"]["environment"],
                                                   "WANDB_DATA_DIR": "/root/.local/share/wandb"}
    del broken["services"]["wandb-sync"]
    assert compose_schema.persistent_mount_problems(broken) == [
        "services.train: /workspace/checkpoints is not a bind mount of a host directory",
        "services.train: /workspace/wandb is not a bind mount of a host directory",
        "services.wandb-sync: not defined",
        "services.report: WANDB_DATA_DIR=/root/.local/share/wandb is not inside /workspace/wandb",
    ]


def test_one_versions_file_and_dockerfile_defaults_agree():
    versions = read_versions(ROOT / "docker/versions.env")
    assert versions["SLIME_IMAGE"] == "slimerl/slime"
    assert versions["SLIME_COMMIT"] == slime_flags.SLIME_COMMIT
    assert re.fullmatch(r"(sha256:[0-9a-f]{64})?", versions["SLIME_IMAGE_DIGEST"])
    assert re.fullmatch(r"(sha256:[0-9a-f]{64})?", versions["PYTHON_IMAGE_DIGEST"])
    train = (ROOT / "docker/train.Dockerfile").read_text()
    tools = (ROOT / "docker/tools.Dockerfile").read_text()
    assert f"ARG SLIME_IMAGE_TAG={versions['SLIME_IMAGE_TAG']}\n" in train
    assert f"ARG SLIME_COMMIT={versions['SLIME_COMMIT']}\n" in train
    assert "FROM ${SLIME_IMAGE}:${SLIME_IMAGE_TAG}@${SLIME_IMAGE_DIGEST}\n" in train
    assert "git -C /root/slime rev-parse HEAD > /opt/shopsimrl/SLIME_COMMIT" in train
    assert f"ARG PYTHON_IMAGE_TAG={versions['PYTHON_IMAGE_TAG']}\n" in tools
    assert "FROM ${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}@${PYTHON_IMAGE_DIGEST}\n" in tools
    compose = (ROOT / "compose.yaml").read_text()
    assert f"SLIME_IMAGE_TAG: ${{SLIME_IMAGE_TAG:-{versions['SLIME_IMAGE_TAG']}}}" in compose


def test_train_image_keeps_the_image_torch_and_tools_lock_is_exact():
    train = (ROOT / "docker/train.Dockerfile").read_text()
    assert "-c /tmp/image-constraints.txt" in train and "diff /tmp/torch-before.txt -" in train
    requirements = [line for line in (ROOT / "docker/requirements-train.txt").read_text().splitlines()
                    if line and not line.startswith("#")]
    assert requirements and not any("torch" in line for line in requirements)  # the image keeps its torch
    lock = [line for line in (ROOT / "docker/requirements-tools.lock").read_text().splitlines()
            if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[a-z0-9_.-]+==[0-9][0-9a-z.+]*", line) for line in lock), lock
    assert any(line.startswith("wandb==0.31.") for line in lock) and not any(line.startswith("torch==") for line in lock)


def test_pin_images_fails_clearly_without_docker(tmp_path: Path):
    versions = tmp_path / "versions.env"
    versions.write_text((ROOT / "docker/versions.env").read_text())
    env = {**os.environ, "DOCKER": str(tmp_path / "no-docker")}
    result = subprocess.run(["bash", "docker/pin_images.sh", str(versions)], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stderr == (f"pin_images.sh: error: '{tmp_path / 'no-docker'}' not found: pin the images on a host "
                             f"with Docker and registry access, then commit {versions}\n")
    assert versions.read_text() == (ROOT / "docker/versions.env").read_text()


def test_env_example_documents_every_variable():
    text = (ROOT / ".env.example").read_text()
    for name in ("USE_WANDB", "WANDB_PROJECT", "WANDB_GROUP", "WANDB_ENTITY", "WANDB_MODE", "WANDB_DIR",
                 "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "RUNNER", "MODELS_DIR", "PROMPT_DATA", "NUM_GPUS", "DRY_RUN"):
        assert re.search(rf"^{name}=", text, re.M), name
    assert re.search(r"^# WANDB_API_KEY=$", text, re.M)
    assert not re.search(r"^WANDB_API_KEY=", text, re.M)
    # Every active line is preceded by a comment somewhere in its block.
    assert text.count("\n#") > 20


def _project_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_no_key_flag_anywhere_but_here():
    key_flag = "--wandb" + "-key"
    this_file = Path(__file__).resolve()
    offenders = []
    for path in _project_files():
        if path.resolve() == this_file:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if key_flag in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_plugin_option_files_validate():
    from shopsimrl.config import load_options_file

    paths = sorted(ROOT.glob("configs/shopsim.*.yaml"))
    assert [p.name for p in paths] == ["shopsim.formal.yaml", "shopsim.smoke.yaml"]
    for path in paths:
        options = load_options_file(path)
        # Relative, with the group filled in by the launcher (shopsimrl.ops.launch).
        assert options.run_dir == "runs/{group}/train"
        assert set(yaml.safe_load(path.read_text())) == {"shopsim"}


def test_the_model_directory_and_the_run_outputs_are_never_committed():
    """docs/operations.md downloads the model to ./models (MODELS_DIR): gigabytes no `git add` may pick up."""
    for path in ("models/Qwen3.5-4B/model-00001-of-00002.safetensors", "runs/g/train/metrics.jsonl",
                 "checkpoints/g/iter_0000199/common.pt", "wandb/offline-run-x/run-x.wandb", ".env"):
        result = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False)
        assert result.returncode == 0, f"{path} is not ignored by .gitignore"
    for path in ("shopsimrl/models/slime_saves.py", "tests/models/test_slime_saves.py"):  # the code's own models/
        result = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False)
        assert result.returncode == 1, f"{path} is ignored by .gitignore"


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories decides."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern.lstrip("!").rstrip("/")
        regex = re.escape(body).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


def test_the_build_context_holds_what_the_dockerfiles_copy_and_none_of_the_big_directories():
    """Without BuildKit (the classic builder, podman) the whole context is sent: .venv/, runs/, checkpoints/,
    wandb/ and models/ can be hundreds of GB."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]  # fmt: skip
    copied = []
    for dockerfile in (ROOT / "docker").glob("*.Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from" not in line:
                copied += line.split()[1:-1]
    assert copied and all(not _dockerignored(source.rstrip("/"), patterns) for source in copied), copied
    assert not _dockerignored("shopsimrl/cli.py", patterns)
    for big in (".venv/lib/x.py", ".engine/data", "runs/g/x", "checkpoints/g/x", "wandb/x", "models/Qwen3.5-4B/x",
                "artifacts/x", ".git/HEAD", "shopsimrl/__pycache__/cli.cpython-312.pyc"):
        assert _dockerignored(big, patterns), big

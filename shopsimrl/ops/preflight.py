"""Checks before a long run: W&B, scripts, configs, Docker, images, GPUs, persistent volumes, disk.

`run_preflight(PreflightContext(...))` returns one `CheckResult` per check, each PASS, WARN, FAIL or
SKIP with what was found and, for WARN/FAIL, the fix. Nothing here raises for a failed check.

Runner semantics (docs/operations.md):
- `docker` (the GPU targets' default): Docker, the pinned images, the compose file and the checks
  inside the train container (GPUs, bind mounts, slime's source) are required; a failure is FAIL.
- `local`: Docker and GPUs are not used, so their checks are SKIP and an unpinned digest is a WARN.
- inside the container (`--inside-container`, run by the docker runner's preflight): GPUs visible,
  runs/, checkpoints/ and wandb/ are bind mounts (from /proc/self/mountinfo), slime's commit and flags.
"""

from __future__ import annotations

import json
import netrc
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlparse

from shopsimrl.ops import compose_schema, slime_flags
from shopsimrl.ops.preflight_context import (  # re-exported: the preflight API callers name
    VERSIONS_FILE,
    CheckResult,
    PreflightContext,
    Runner,
    Status,
    read_versions,
)
from shopsimrl.ops.preflight_launch import (
    check_chat_template,
    check_disk_for_profile,
    check_gpu_count,
    check_launch_inputs,
)

SCHEMA_VERSION = 1
COMPOSE_FILE = "compose.yaml"
LAUNCHER = "scripts/run_shopsimrl_slime.sh"
SCRIPT_GLOBS: tuple[str, ...] = (
    "scripts/*.sh",
    "docker/*.sh",
    "configs/slime/*.env",
    "configs/slime/models/*.sh",
)
PLUGIN_CONFIG_GLOB = "configs/shopsim.*.yaml"
LAUNCH_CONFIGS: tuple[str, ...] = (
    "configs/slime/smoke.env",
    "configs/slime/smoke-2gpu.env",
    "configs/slime/formal.env",
)
_TIMEOUT_S = 60


def _run(
    argv: Sequence[str], ctx: PreflightContext, timeout: float = _TIMEOUT_S
) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv), cwd=ctx.root, env=ctx.env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _tool(ctx: PreflightContext, name: str) -> str | None:
    return shutil.which(name, path=ctx.env.get("PATH"))


# ---------------------------------------------------------------------------------------------- W&B


def check_wandb_import(ctx: PreflightContext) -> CheckResult:
    probe = _run([sys.executable, "-c", "import wandb; print(wandb.__version__)"], ctx)
    if probe.returncode != 0:
        return CheckResult(
            "wandb importable",
            Status.FAIL,
            probe.stderr.strip().splitlines()[-1:][0] if probe.stderr else "import failed",
            "install the pinned dependencies: make setup (or rebuild the image: make images)",
        )
    return CheckResult("wandb importable", Status.PASS, f"wandb {probe.stdout.strip()} ({sys.executable})")


def _netrc_path(ctx: PreflightContext) -> Path:
    return Path(ctx.env.get("NETRC") or Path(ctx.env.get("HOME", "~")).expanduser() / ".netrc")


def _netrc_hosts(ctx: PreflightContext) -> list[str]:
    path = _netrc_path(ctx)
    if not path.is_file():  # /dev/null (compose's stand-in when the host has no netrc) is no file
        return []
    try:
        return sorted(netrc.netrc(str(path)).hosts)
    except (netrc.NetrcParseError, OSError):
        return []


def check_wandb_status(ctx: PreflightContext) -> CheckResult:
    name = "wandb credentials"
    use_wandb = ctx.env.get("USE_WANDB", "0")
    if use_wandb not in ("0", "1"):
        return CheckResult(name, Status.FAIL, f"USE_WANDB={use_wandb!r}", "set USE_WANDB to exactly 0 or 1")
    wandb_bin = _tool(ctx, "wandb") or str(Path(sys.executable).with_name("wandb"))
    if not Path(wandb_bin).is_file():
        return CheckResult(
            name, Status.FAIL, "no `wandb` executable", "make setup (the wandb CLI comes with the package)"
        )
    try:
        status = _run([wandb_bin, "status"], ctx)
    except subprocess.TimeoutExpired:
        return CheckResult(name, Status.FAIL, "`wandb status` timed out", "check the wandb installation")
    if status.returncode != 0:
        return CheckResult(
            name, Status.FAIL, f"`wandb status` exited {status.returncode}", "reinstall wandb: make setup"
        )
    text = status.stdout
    base_url = ""
    if "{" in text:
        try:
            base_url = json.loads(text[text.index("{") :]).get("base_url") or ""
        except json.JSONDecodeError:
            base_url = ""
    host = urlparse(base_url).hostname or "api.wandb.ai"
    mode = ctx.env.get("WANDB_MODE", "offline")
    if ctx.env.get("WANDB_API_KEY"):
        return CheckResult(name, Status.PASS, f"WANDB_API_KEY is set in the environment (server {host})")
    if host in _netrc_hosts(ctx):
        if ctx.runner is Runner.CONTAINER:
            return CheckResult(name, Status.PASS, f"credentials for {host} in netrc {_netrc_path(ctx)} (mounted)")
        return CheckResult(name, Status.PASS, f"credentials for {host} in netrc (wandb login)")
    if use_wandb == "0":
        return CheckResult(name, Status.SKIP, "USE_WANDB=0: W&B is not used (local files only)")
    if mode in ("offline", "disabled"):
        return CheckResult(
            name, Status.PASS, f"WANDB_MODE={mode}: no credentials needed until `make wandb-sync`"
        )
    if ctx.runner is Runner.CONTAINER:
        return CheckResult(
            name,
            Status.FAIL,
            f"WANDB_MODE={mode} and no credentials for {host} inside the container "
            f"(no WANDB_API_KEY, netrc {_netrc_path(ctx)} has none)",
            "export WANDB_API_KEY on the host (compose passes it by name) or `wandb login` on the host "
            "(make mounts ~/.netrc at /run/secrets/wandb.netrc), then make preflight",
        )
    return CheckResult(
        name,
        Status.FAIL,
        f"WANDB_MODE={mode} and no credentials for {host}",
        "run `wandb login --verify` as the training user, or inject WANDB_API_KEY from a secret manager",
    )


# ------------------------------------------------------------------------------- scripts and configs


def check_scripts_syntax(ctx: PreflightContext) -> CheckResult:
    scripts = sorted(p for pattern in SCRIPT_GLOBS for p in ctx.root.glob(pattern))
    if not scripts:
        return CheckResult(
            "bash -n scripts", Status.FAIL, "no scripts found", f"run from the repository root ({ctx.root})"
        )
    bad = []
    for script in scripts:
        result = _run(["bash", "-n", str(script)], ctx)
        if result.returncode != 0:
            bad.append(f"{script.relative_to(ctx.root)}: {result.stderr.strip()}")
    if bad:
        return CheckResult(
            "bash -n scripts", Status.FAIL, "; ".join(bad), "fix the shell syntax errors above"
        )
    return CheckResult("bash -n scripts", Status.PASS, f"{len(scripts)} scripts parse")


def check_plugin_configs(ctx: PreflightContext) -> CheckResult:
    from shopsimrl.config import load_options_file
    from shopsimrl.errors import ConfigError

    paths = sorted(ctx.root.glob(PLUGIN_CONFIG_GLOB))
    if not paths:
        return CheckResult(
            "plugin configs", Status.FAIL, f"no {PLUGIN_CONFIG_GLOB}", "restore configs/ from git"
        )
    problems = []
    for path in paths:
        try:
            load_options_file(path)
        except (ConfigError, OSError) as exc:
            problems.append(str(exc))
    if problems:
        return CheckResult("plugin configs", Status.FAIL, " | ".join(problems), "fix the listed keys")
    return CheckResult("plugin configs", Status.PASS, ", ".join(str(p.relative_to(ctx.root)) for p in paths))


def check_compose_file(ctx: PreflightContext) -> CheckResult:
    path = ctx.root / COMPOSE_FILE
    try:
        compose = compose_schema.read_compose(path)
    except (OSError, compose_schema.ComposeFileError) as exc:
        return CheckResult("compose.yaml", Status.FAIL, str(exc), "restore compose.yaml from git")
    try:
        problems = compose_schema.schema_errors(compose)
    except ModuleNotFoundError:
        return CheckResult(
            "compose.yaml",
            Status.WARN,
            "parsed; schema not checked (check-jsonschema not installed)",
            "install the dev extra: make setup",
        )
    if problems:
        return CheckResult(
            "compose.yaml", Status.FAIL, "; ".join(problems), "fix compose.yaml (compose-spec schema)"
        )
    return CheckResult("compose.yaml", Status.PASS, "valid against the compose-spec schema")


def check_launcher(ctx: PreflightContext) -> CheckResult:
    """The launcher's dry run for each launch config uses only declared slime flags."""
    name = "slime launcher dry run"
    env = {**ctx.env, "DRY_RUN": "1", "PYTHON": sys.executable}
    details = []
    for config in LAUNCH_CONFIGS:
        result = subprocess.run(
            ["bash", LAUNCHER, config],
            cwd=ctx.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            return CheckResult(
                name, Status.FAIL, f"{config}: {result.stderr.strip()}", "fix the launch settings above"
            )
        submit = result.stdout.strip().splitlines()[-1]
        import shlex

        argv = shlex.split(submit)
        unknown = slime_flags.unlisted_flags(argv)
        if unknown:
            return CheckResult(
                name,
                Status.FAIL,
                f"{config}: undeclared flags {unknown}",
                "declare them in shopsimrl/ops/slime_flags.py after checking slime's parser",
            )
        details.append(f"{config}: {len(slime_flags.flags_in_command(argv))} flags")
    return CheckResult(name, Status.PASS, "; ".join(details))


def check_no_api_key(ctx: PreflightContext) -> CheckResult:
    name = "no W&B key in tracked files"
    if _tool(ctx, "git") is None or _run(["git", "rev-parse", "--git-dir"], ctx).returncode != 0:
        return CheckResult(name, Status.SKIP, "not a git checkout")
    patterns = [
        r"WANDB_API_KEY[[:space:]]*[:=][[:space:]]*['\"]?[A-Za-z0-9_-]{20,}",
        r"wandb\.login\([^)]*key[[:space:]]*=[[:space:]]*['\"][A-Za-z0-9_-]{20,}",
    ]
    pattern_args = [arg for p in patterns for arg in ("-e", p)]
    found = _run(["git", "grep", "-nIE", *pattern_args, "--", ".", ":(exclude)tests/**"], ctx)
    flag = next(iter(slime_flags.FORBIDDEN_FLAGS))
    flag_hits = _run(["git", "grep", "-nIF", "-e", flag, "--", ".", ":(exclude)tests/**"], ctx)
    tracked_secrets = _run(["git", "ls-files", "--", ".env", "**/.env", ".netrc", "**/.netrc"], ctx)
    hits = [
        line
        for out in (found.stdout, flag_hits.stdout, tracked_secrets.stdout)
        for line in out.splitlines()
        if line
    ]
    if hits:
        return CheckResult(
            name,
            Status.FAIL,
            "; ".join(hits[:5]),
            "remove the key (and rotate it), untrack .env/.netrc, never pass a key flag to slime",
        )
    return CheckResult(name, Status.PASS, "no key assignment, key flag, .env or .netrc tracked")


# ---------------------------------------------------------------------------- W&B dirs, disk, mounts


def _persistent_root(ctx: PreflightContext) -> Path:
    return ctx.workspace if ctx.runner is Runner.CONTAINER else ctx.root


def check_wandb_dirs(ctx: PreflightContext) -> CheckResult:
    name = "W&B dirs on the volume"
    wandb_root = (_persistent_root(ctx) / "wandb").resolve()
    wandb_dir = Path(ctx.env.get("WANDB_DIR") or wandb_root)
    defaults = {
        "WANDB_DIR": wandb_dir,
        "WANDB_DATA_DIR": wandb_dir / "data",
        "WANDB_CACHE_DIR": wandb_dir / "cache",
    }
    problems, shown = [], []
    for variable, default in defaults.items():
        raw = ctx.env.get(variable)
        if raw is None and ctx.runner is Runner.CONTAINER:
            problems.append(
                f"{variable} unset (wandb would stage under ~/.local or ~/.cache, in the container layer)"
            )
            continue
        path = (
            (ctx.root / raw).resolve()
            if raw and not Path(raw).is_absolute()
            else Path(raw or default).resolve()
        )
        shown.append(f"{variable}={path}")
        if ctx.runner is Runner.CONTAINER and not path.is_relative_to(wandb_root):
            problems.append(f"{variable}={path} is outside {wandb_root}")
        elif (
            ctx.runner is not Runner.CONTAINER
            and variable != "WANDB_DIR"
            and not path.is_relative_to(
                (ctx.root / wandb_dir).resolve() if not wandb_dir.is_absolute() else wandb_dir.resolve()
            )
        ):
            problems.append(f"{variable}={path} is outside WANDB_DIR")
    if problems:
        return CheckResult(
            name,
            Status.FAIL,
            "; ".join(problems),
            "put WANDB_DATA_DIR and WANDB_CACHE_DIR inside WANDB_DIR on the persistent volume (.env.example)",
        )
    return CheckResult(name, Status.PASS, ", ".join(shown))


def check_free_disk(ctx: PreflightContext) -> CheckResult:
    """Free disk against what the formal profile will write (`--min-free-gib` is the margin on top)."""
    return check_disk_for_profile(ctx)


def mount_points(mountinfo: Path) -> set[str]:
    """Mount points listed in a /proc/<pid>/mountinfo file (field 5, octal escapes decoded)."""
    points = set()
    for line in mountinfo.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.add(fields[4].encode().decode("unicode_escape"))
    return points


def check_persistent_mounts(ctx: PreflightContext) -> CheckResult:
    name = "persistent volumes"
    if ctx.runner is Runner.CONTAINER:
        if not ctx.mountinfo.is_file():
            return CheckResult(
                name, Status.FAIL, f"{ctx.mountinfo} not readable", "run inside the compose service"
            )
        points = mount_points(ctx.mountinfo)
        missing = [
            f"{ctx.workspace}/{d}"
            for d in compose_schema.PERSISTENT_DIRS
            if f"{ctx.workspace}/{d}" not in points
        ]
        if missing:
            return CheckResult(
                name,
                Status.FAIL,
                f"not mounted (container layer): {', '.join(missing)}",
                "start the service through compose.yaml (make ...), which bind-mounts them",
            )
        return CheckResult(name, Status.PASS, "runs/, checkpoints/, wandb/ are bind mounts")
    try:
        compose = compose_schema.read_compose(ctx.root / COMPOSE_FILE)
    except (OSError, compose_schema.ComposeFileError) as exc:
        return CheckResult(name, Status.FAIL, str(exc), "restore compose.yaml from git")
    problems = compose_schema.persistent_mount_problems(compose)
    if problems:
        return CheckResult(
            name,
            Status.FAIL,
            "; ".join(problems),
            "bind-mount ./runs, ./checkpoints and ./wandb in compose.yaml",
        )
    return CheckResult(
        name,
        Status.PASS,
        "compose.yaml bind-mounts runs/, checkpoints/, wandb/ for "
        + ", ".join(compose_schema.PERSISTENT_SERVICES),
    )


# ----------------------------------------------------------------------------------- Docker and GPU


def check_docker_engine(ctx: PreflightContext) -> CheckResult:
    name = "Docker engine"
    if ctx.runner is Runner.LOCAL:
        return CheckResult(name, Status.SKIP, "RUNNER=local does not use Docker")
    if _tool(ctx, ctx.docker) is None:
        return CheckResult(
            name, Status.FAIL, f"`{ctx.docker}` not found", "install Docker, or use RUNNER=local"
        )
    info = _run([ctx.docker, "info", "--format", "{{.ServerVersion}}"], ctx)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        return CheckResult(
            name, Status.FAIL, f"not reachable: {reason}", "start the Docker daemon (or use RUNNER=local)"
        )
    return CheckResult(name, Status.PASS, f"server {info.stdout.strip()}")


def check_image_pins(ctx: PreflightContext) -> CheckResult:
    name = "image digests pinned"
    versions = read_versions(ctx.root / VERSIONS_FILE)
    unpinned = [
        k
        for k in ("SLIME_IMAGE_DIGEST", "PYTHON_IMAGE_DIGEST")
        if not versions.get(k, "").startswith("sha256:")
    ]
    if unpinned:
        status = Status.WARN if ctx.runner is Runner.LOCAL else Status.FAIL
        return CheckResult(
            name,
            status,
            f"unpinned in {VERSIONS_FILE}: {', '.join(unpinned)}",
            "run `make pin-images` on a host with registry access and commit docker/versions.env",
        )
    return CheckResult(
        name,
        Status.PASS,
        f"slime {versions['SLIME_IMAGE_DIGEST'][:19]}…, python {versions['PYTHON_IMAGE_DIGEST'][:19]}…",
    )


def check_local_images(ctx: PreflightContext, engine: CheckResult) -> CheckResult:
    name = "local images match pins"
    if ctx.runner is Runner.LOCAL:
        return CheckResult(name, Status.SKIP, "RUNNER=local does not use the images")
    if engine.status is not Status.PASS:
        return CheckResult(name, Status.SKIP, "Docker engine not reachable")
    versions = read_versions(ctx.root / VERSIONS_FILE)
    problems = []
    for image_key, digest_key in (
        ("SHOPSIMRL_TRAIN_IMAGE", "SLIME_IMAGE_DIGEST"),
        ("SHOPSIMRL_TOOLS_IMAGE", "PYTHON_IMAGE_DIGEST"),
    ):
        image = versions.get(image_key, "")
        inspect = _run([ctx.docker, "image", "inspect", "--format", "{{json .Config.Labels}}", image], ctx)
        if inspect.returncode != 0:
            problems.append(f"{image} not built")
            continue
        labels = json.loads(inspect.stdout or "{}") or {}
        built_from = labels.get("org.shopsimrl.base.digest", "")
        if built_from != versions.get(digest_key):
            problems.append(
                f"{image} built from {built_from or 'an unknown base'}, pinned {versions.get(digest_key) or 'nothing'}"
            )
    if problems:
        return CheckResult(name, Status.FAIL, "; ".join(problems), "rebuild: make images")
    return CheckResult(name, Status.PASS, "train and tools images built from the pinned digests")


def check_gpu(ctx: PreflightContext) -> CheckResult:
    name = "GPU visible" + (" in container" if ctx.runner is Runner.CONTAINER else " on host")
    if ctx.runner is Runner.LOCAL:
        return CheckResult(name, Status.SKIP, "RUNNER=local trains on CPU")
    if _tool(ctx, "nvidia-smi") is None:
        status = Status.FAIL if ctx.runner is Runner.CONTAINER else Status.WARN
        return CheckResult(
            name,
            status,
            "nvidia-smi not found",
            "install the NVIDIA driver and NVIDIA Container Toolkit; compose reserves all GPUs",
        )
    listing = _run(["nvidia-smi", "-L"], ctx)
    gpus = [line for line in listing.stdout.splitlines() if line.startswith("GPU ")]
    if listing.returncode != 0 or not gpus:
        return CheckResult(
            name, Status.FAIL, listing.stderr.strip() or "no GPU listed", "check the driver: nvidia-smi"
        )
    return CheckResult(name, Status.PASS, f"{len(gpus)} GPU(s): {gpus[0]}")


def check_slime_source(ctx: PreflightContext) -> CheckResult:
    """Inside the train image: slime's commit is the pinned one and defines every flag we pass."""
    name = "slime source in image"
    arguments = ctx.slime_dir / slime_flags.SLIME_ARGUMENTS_PATH
    if not arguments.is_file():
        return CheckResult(
            name, Status.FAIL, f"{arguments} not found", "rebuild the train image: make images"
        )
    expected = (
        read_versions(ctx.root / VERSIONS_FILE).get("SLIME_COMMIT", slime_flags.SLIME_COMMIT)
        if (ctx.root / VERSIONS_FILE).is_file()
        else slime_flags.SLIME_COMMIT
    )
    actual = ctx.slime_commit_file.read_text().strip() if ctx.slime_commit_file.is_file() else "unknown"
    missing = slime_flags.missing_from_parser_source(arguments.read_text(encoding="utf-8"))
    if missing:
        return CheckResult(
            name,
            Status.FAIL,
            f"slime {actual[:12]} lacks flags {missing}",
            "rebuild with the pinned SLIME_COMMIT",
        )
    if actual != expected:
        return CheckResult(
            name, Status.WARN, f"slime {actual[:12]}, pinned {expected[:12]}", "rebuild: make images"
        )
    return CheckResult(
        name, Status.PASS, f"slime {actual[:12]} defines all {len(slime_flags.FLAGS)} flags' slime part"
    )


def _default_compose(ctx: PreflightContext) -> list[str]:
    command = [ctx.docker, "compose", "--env-file", VERSIONS_FILE]
    if (ctx.root / ".env").is_file():
        command += ["--env-file", ".env"]
    return command


def container_checks(ctx: PreflightContext, engine: CheckResult, images: CheckResult) -> list[CheckResult]:
    """Run `shopsimrl preflight --inside-container` in the compose `preflight` service and fold it in."""
    if ctx.runner is Runner.LOCAL:
        return [CheckResult("container checks", Status.SKIP, "RUNNER=local")]
    if engine.status is not Status.PASS or images.status is not Status.PASS:
        return [
            CheckResult(
                "container checks",
                Status.SKIP,
                "not run: "
                + ("Docker engine not reachable" if engine.status is not Status.PASS else "images not ready"),
            )
        ]
    command = [*(ctx.compose_command or _default_compose(ctx)), "run", "--rm", "preflight"]
    try:
        result = _run(command, ctx, timeout=600)
    except subprocess.TimeoutExpired:
        return [
            CheckResult(
                "container checks", Status.FAIL, "timed out after 600 s", "docker compose logs preflight"
            )
        ]
    try:
        rows = json.loads(result.stdout)["checks"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [
            CheckResult(
                "container checks",
                Status.FAIL,
                (result.stderr.strip() or result.stdout.strip())[-400:],
                "run `docker compose run --rm preflight` to see the error",
            )
        ]
    return [
        CheckResult(f"container: {row['name']}", Status(row["status"]), row["detail"], row.get("fix", ""))
        for row in rows
    ]


# ------------------------------------------------------------------------------------------- driver


def run_preflight(ctx: PreflightContext) -> list[CheckResult]:
    """Every check for the runner, in a fixed order."""
    if ctx.runner is Runner.CONTAINER:
        from shopsimrl.ops.preflight_image import check_image_base, check_sglang, image_kind

        checks: list[Callable[[PreflightContext], CheckResult]] = [
            check_wandb_import,
            check_wandb_status,
            check_image_base,
            check_persistent_mounts,
            check_wandb_dirs,
        ]
        if image_kind(ctx) == "train":  # the tools image only syncs and exports: no GPU, model or slime
            checks += [
                check_gpu,
                check_gpu_count,
                check_sglang,
                check_free_disk,
                check_slime_source,
                check_launch_inputs,
                check_chat_template,
            ]
        return [check(ctx) for check in checks]
    results = [
        check(ctx)
        for check in (
            check_wandb_import,
            check_wandb_status,
            check_scripts_syntax,
            check_plugin_configs,
            check_compose_file,
            check_launcher,
            check_persistent_mounts,
            check_wandb_dirs,
            check_free_disk,
            check_no_api_key,
            check_image_pins,
            check_chat_template,
        )
    ]
    engine = check_docker_engine(ctx)
    images = check_local_images(ctx, engine)
    results += [engine, images, check_gpu(ctx), *container_checks(ctx, engine, images)]
    return results


def failed(results: Sequence[CheckResult]) -> bool:
    return any(r.status is Status.FAIL for r in results)


def report_dict(results: Sequence[CheckResult], runner: Runner) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "runner": runner.value,
        "checks": [{**asdict(r), "status": r.status.value} for r in results],
    }


def render_table(results: Sequence[CheckResult]) -> str:
    """A fixed-width table: status, check, detail, and an indented `fix:` line under each WARN/FAIL."""
    width = max(len(r.name) for r in results)
    lines = [f"{'STATUS':<6}  {'CHECK':<{width}}  DETAIL"]
    for r in results:
        lines.append(f"{r.status.value:<6}  {r.name:<{width}}  {r.detail}")
        if r.fix and r.status in (Status.WARN, Status.FAIL):
            lines.append(f"{'':<6}  {'':<{width}}  fix: {r.fix}")
    counts = {s: sum(r.status is s for r in results) for s in Status}
    lines.append("  ".join(f"{s.value}={n}" for s, n in counts.items()))
    return "\n".join(lines)

"""In-container preflight rows about the image itself: what it was built from, and SGLang.

Each image records at build time what it is and what it was built FROM (`/opt/shopsimrl/IMAGE.json`:
`{"image": "train"|"tools", "base": "NAME:TAG", "digest": "sha256:..."}`; docker/*.Dockerfile) and
carries the production pins (`/opt/shopsimrl/docker/versions.env`). An image built on a STAND-IN
base (`make engine`, no image registry) or on an unpinned base fails here with what to do.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from shopsimrl.ops.preflight_context import (
    VERSIONS_FILE,
    CheckResult,
    PreflightContext,
    Status,
    read_versions,
)

IMAGE_FILE = Path("/opt/shopsimrl/IMAGE.json")
_DIGEST_KEY = {"train": "SLIME_IMAGE_DIGEST", "tools": "PYTHON_IMAGE_DIGEST"}


def read_image_record(path: Path) -> dict[str, str] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("image") in _DIGEST_KEY else None


def image_kind(ctx: PreflightContext) -> str:
    """train or tools; an image without a record is taken for the train image (built before records)."""
    record = read_image_record(ctx.image_file)
    return record["image"] if record else "train"


def check_image_base(ctx: PreflightContext) -> CheckResult:
    name = "image base pinned"
    record = read_image_record(ctx.image_file)
    if record is None:
        return CheckResult(name, Status.FAIL, f"{ctx.image_file} missing or unreadable", "rebuild: make images")
    pins = read_versions(ctx.root / VERSIONS_FILE) if (ctx.root / VERSIONS_FILE).is_file() else {}
    pinned = pins.get(_DIGEST_KEY[record["image"]], "")
    built = f"{record.get('base', '?')}@{record.get('digest', '?')[:19]}…"
    if not pinned.startswith("sha256:"):
        return CheckResult(
            name,
            Status.FAIL,
            f"{record['image']} image built from {built}; {VERSIONS_FILE} pins no {_DIGEST_KEY[record['image']]}"
            + (" (a STAND-IN base: no CUDA, Megatron or SGLang)" if "standin" in record.get("base", "") else ""),
            "on a training host: make pin-images && make images",
        )
    if record.get("digest") != pinned:
        return CheckResult(
            name, Status.FAIL, f"built from {built}, pinned {pinned[:19]}…", "rebuild from the pins: make images"
        )
    return CheckResult(name, Status.PASS, f"{record['image']} image built from the pinned {built}")


def check_sglang(ctx: PreflightContext) -> CheckResult:
    """analyze, gate and eval serve the round's checkpoint with SGLang inside the train image."""
    name = "SGLang in image"
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return CheckResult(
            name,
            Status.FAIL,
            "sglang is not installed in this image: analyze, gate and eval cannot serve the round's checkpoint",
            "build the train image FROM the pinned slime image: make pin-images && make images",
        )
    return CheckResult(name, Status.PASS, f"sglang {version}")

"""Content hashes of what a planned episode depends on: task sets and JSON documents (files: `storage.file_sha256`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shopsimrl.shop import Task


def task_set_sha256(tasks: list[Task], catalog_seed: int, num_products: int) -> str:
    """Hash of the tasks as the agent sees them (ids and instructions) and their catalog."""
    payload = {
        "catalog": {"seed": catalog_seed, "num_products": num_products},
        "tasks": [[task.task_id, task.instruction] for task in tasks],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def json_sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

"""Models of the local backend: a tiny in-process model for tests and the SmolLM2 demo default.

The torch-backed names load on first use (PEP 562), so torch-free submodules (`files`,
`slime_saves`) import on a host without torch: the launcher's dry run and the compose services'
checks import them through this package.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["IM_END", "IM_START", "tiny_model", "tiny_tokenizer"]

_LAZY = {"IM_END": "shopsimrl.models.tiny", "IM_START": "shopsimrl.models.tiny",
         "tiny_model": "shopsimrl.models.tiny", "tiny_tokenizer": "shopsimrl.models.tiny"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'shopsimrl.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value

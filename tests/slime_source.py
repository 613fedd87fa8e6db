"""Where slime's own code comes from in the test session (imported first by conftest.py).

slime is the reference for every type and call site our hooks meet. In order: an installed slime,
`SLIME_SRC`, the vendored v0.3.1 subset at ../shared/vendor/slime-v0.3.1. It goes on `sys.path`
(and PYTHONPATH, for subprocesses) before any test imports `shopsimrl`, so `shopsimrl.contract`
hands every test slime's own classes. Tests that need slime's code use `requires_slime`, which skips
with the reason when none is found (a user's clone has no ../shared).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

VENDORED_SLIME = Path(__file__).resolve().parents[1].parent / "shared" / "vendor" / "slime-v0.3.1"


def _slime_source() -> tuple[Path | None, str]:
    """Where slime's code comes from for this session, and why (the skip reason when absent)."""
    if importlib.util.find_spec("slime") is not None:
        try:
            spec = importlib.util.find_spec("slime.rollout.filter_hub.base_types")
        except ModuleNotFoundError:
            spec = None
        if spec is not None and spec.origin:
            return Path(spec.origin).parents[3], "installed slime"
    for candidate, label in ((os.environ.get("SLIME_SRC"), "SLIME_SRC"), (str(VENDORED_SLIME), "vendored")):
        if candidate and (Path(candidate) / "slime" / "rollout" / "filter_hub" / "base_types.py").is_file():
            return Path(candidate), label
    return None, (
        f"slime's source is absent: no installed slime, no SLIME_SRC, no {VENDORED_SLIME} "
        "(the vendored subset lives in the team's shared/ folder beside the repo)"
    )


SLIME_SRC, SLIME_SOURCE_NOTE = _slime_source()
if SLIME_SRC is not None and str(SLIME_SRC) not in sys.path:
    sys.path.insert(0, str(SLIME_SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SLIME_SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    )

requires_slime = pytest.mark.skipif(SLIME_SRC is None, reason=SLIME_SOURCE_NOTE)

"""Which class crosses a slime hook boundary: slime's own whenever slime is importable.

slime's call sites test types by identity — `call_dynamic_filter` wraps anything that is not *its*
`DynamicFilterOutput` as `DynamicFilterOutput(keep=value)`, and a dataclass object is always truthy,
so a look-alike class silently turns every drop into a keep. This module is the one place that
chooses: slime's `Sample`, `DynamicFilterOutput`, `call_dynamic_filter` and
`should_drop_dynamic_filter_output` when `slime` imports (the training container, or tests with
slime's source on the path: tests/slime_source.py), the replicas in `_replica` otherwise (a CPU laptop).

Importing slime's types imports torch (slime's `types.py` does); without slime nothing heavy is
imported.
"""

from __future__ import annotations

import importlib.util
from typing import Any


def _slime_importable() -> bool:
    # find_spec("slime") alone would accept PyPI's unrelated `slime` package; ask for the module we use.
    try:
        return importlib.util.find_spec("slime.rollout.filter_hub.base_types") is not None
    except ModuleNotFoundError:
        return False


SLIME_AVAILABLE = _slime_importable()

if SLIME_AVAILABLE:
    from slime.rollout.filter_hub.base_types import (
        DynamicFilterOutput,
        call_dynamic_filter,
        should_drop_dynamic_filter_output,
    )
    from slime.utils.types import Sample
else:
    from shopsimrl.contract._replica import (  # type: ignore[assignment]
        DynamicFilterOutput,
        Sample,
        call_dynamic_filter,
        should_drop_dynamic_filter_output,
    )


def status_value(sample: Any) -> str:
    """The status as its string value (slime's `Sample.Status` is an Enum of strings)."""
    return sample.status.value


__all__ = [
    "SLIME_AVAILABLE",
    "DynamicFilterOutput",
    "Sample",
    "call_dynamic_filter",
    "should_drop_dynamic_filter_output",
    "status_value",
]

"""The bottom of the package: what crosses a slime hook boundary.

- `slime_types`: `Sample`, `DynamicFilterOutput` and slime's filter call rules — slime's own classes
  whenever slime is importable, replicas only where it is absent;
- `metadata`: `sample.metadata["shopsim"]`, the only place our hooks look (`ShopSimMeta`).

Every other package imports these from here; this package imports no other part of shopsimrl.
"""

from shopsimrl.contract.metadata import (
    METADATA_KEY,
    Arm,
    Outcome,
    RetryInfo,
    SegmentInfo,
    ShopSimMeta,
    TechnicalErrorInfo,
    get_meta,
    set_meta,
    trajectory_key,
)
from shopsimrl.contract.slime_types import (
    SLIME_AVAILABLE,
    DynamicFilterOutput,
    Sample,
    call_dynamic_filter,
    should_drop_dynamic_filter_output,
    status_value,
)

__all__ = [
    "METADATA_KEY",
    "SLIME_AVAILABLE",
    "Arm",
    "DynamicFilterOutput",
    "Outcome",
    "RetryInfo",
    "Sample",
    "SegmentInfo",
    "ShopSimMeta",
    "TechnicalErrorInfo",
    "call_dynamic_filter",
    "get_meta",
    "set_meta",
    "should_drop_dynamic_filter_output",
    "status_value",
    "trajectory_key",
]

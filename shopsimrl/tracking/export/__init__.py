"""W&B history export (`shopsimrl wandb export`): frozen numeric histories, CSVs per axis, summary, plots, report.

It reads runs through `tracking.offline_reader` or the W&B API; nothing below `tracking` imports it.
"""

from shopsimrl.tracking.export.export import DEFAULT_OUT, ExportResult, export_history
from shopsimrl.tracking.export.frozen import iter_frozen
from shopsimrl.tracking.export.history_source import (
    ExportError,
    HistorySource,
    OfflineHistorySource,
    OnlineHistorySource,
    RunRef,
)
from shopsimrl.tracking.export.tables import update_position

__all__ = [
    "DEFAULT_OUT",
    "ExportError",
    "ExportResult",
    "HistorySource",
    "OfflineHistorySource",
    "OnlineHistorySource",
    "RunRef",
    "export_history",
    "iter_frozen",
    "update_position",
]

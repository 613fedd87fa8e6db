"""W&B history export (second seed): frozen numeric histories, CSVs per axis, summary, plots, report."""

from shopsimrl.diagnostics.export import DEFAULT_OUT, ExportResult, export_history
from shopsimrl.diagnostics.frozen import iter_frozen
from shopsimrl.diagnostics.history_source import (
    ExportError,
    HistorySource,
    OfflineHistorySource,
    OnlineHistorySource,
    RunRef,
)
from shopsimrl.diagnostics.tables import update_position

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

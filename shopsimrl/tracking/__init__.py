"""W&B tracking: settings from the environment, the offline-first StageLogger, the offline-run reader,
sync and verify. Importing this package does not import wandb.

Also what a run leaves for people to read: failure records (`tracking.failure_record`) and the
history export behind `shopsimrl wandb export` (`tracking.export`).
"""

from shopsimrl.tracking.axes import (
    EVAL_STEP,
    ROLLOUT_STEP,
    SLIME_STEP_AXES,
    TRAIN_STEP,
    axis_for,
    merged_axes,
)
from shopsimrl.tracking.logger import (
    METRICS_FILE,
    STATUS_FILE,
    LoggerState,
    StageLogger,
    WandbFailureWarning,
    prepare_wandb_dirs,
)
from shopsimrl.tracking.offline_reader import (
    HistoryStream,
    OfflineRun,
    OfflineRunFormatError,
    TornTail,
    iter_history,
    read_offline_run,
)
from shopsimrl.tracking.secrets import REDACTED, is_secret_name, looks_like_wandb_key, scrub_secrets
from shopsimrl.tracking.settings import WandbMode, WandbSettings
from shopsimrl.tracking.sync import SyncResult, SyncStatus, find_offline_runs, sync_runs
from shopsimrl.tracking.verify import VerifyReport, verify_stage

__all__ = [
    "EVAL_STEP",
    "METRICS_FILE",
    "REDACTED",
    "ROLLOUT_STEP",
    "SLIME_STEP_AXES",
    "STATUS_FILE",
    "TRAIN_STEP",
    "HistoryStream",
    "LoggerState",
    "OfflineRun",
    "OfflineRunFormatError",
    "StageLogger",
    "SyncResult",
    "SyncStatus",
    "TornTail",
    "VerifyReport",
    "WandbFailureWarning",
    "WandbMode",
    "WandbSettings",
    "axis_for",
    "find_offline_runs",
    "iter_history",
    "is_secret_name",
    "looks_like_wandb_key",
    "merged_axes",
    "prepare_wandb_dirs",
    "read_offline_run",
    "scrub_secrets",
    "sync_runs",
    "verify_stage",
]

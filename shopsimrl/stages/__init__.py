"""The stage kit: what every stage (eval, gate, Analyst, training) does around its own work.

    with directory_lock(gate_dir / LOCK_FILE, busy=lambda pid: GateLocked(...)):   # one writer at a time
        register_inputs(gate_dir / MANIFEST_FILE, fresh, records=..., compare=check_resume)
        with stage_session("gate", gate_dir, settings=..., config=..., where=coverage) as log:
            ...   # a signal becomes StageInterrupted("gate", signum, coverage())

The file names the stages write are declared in `shopsimrl/storage/layout.py`; the command lines map
the errors raised here to messages in `shopsimrl/cli_errors.py`.
"""

from shopsimrl.stages.lock import directory_lock
from shopsimrl.stages.registration import register_inputs
from shopsimrl.stages.session import signal_of, stage_session

__all__ = ["directory_lock", "register_inputs", "signal_of", "stage_session"]

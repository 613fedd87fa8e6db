"""Writes log lines as slime v0.3.1 writes them: run as a script with slime's source on PYTHONPATH.

argv[1] is a JSON list of [path, lineno, logger name, message]; each becomes one INFO record, made at
that call site and formatted by the handler slime's own `configure_logger` installs (stderr). A
subprocess, because `configure_logger` replaces the root logger's handlers (basicConfig force=True).
"""

from __future__ import annotations

import json
import logging
import sys

from slime.utils.logging_utils import configure_logger

configure_logger()
for path, lineno, name, message in json.loads(open(sys.argv[1], encoding="utf-8").read()):
    logger = logging.getLogger(name)
    logger.handle(logger.makeRecord(name, logging.INFO, path, lineno, message, None, None))

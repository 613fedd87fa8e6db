#!/usr/bin/env python3
"""Thin shim to the click CLI, for hosts that call scripts by path (inside the containers too).

Example: python scripts/run_shopsimrl.py shop expert --tasks 10
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shopsimrl.cli import main  # noqa: E402

if __name__ == "__main__":
    main()

"""Config loading (one strict base, one loader: `base.py`) and the plugin options of the hooks.

    config = load_config("configs/local/gate.yaml", GateConfig, {"design.tasks": 8})
"""

from shopsimrl.config.base import StrictModel, load_config, read_config, validate_config
from shopsimrl.config.options import (
    CatalogOptions,
    QSchedule,
    ShopSimOptions,
    load_options_file,
    options_from_args,
    validate_options,
)

__all__ = [
    "CatalogOptions",
    "QSchedule",
    "ShopSimOptions",
    "StrictModel",
    "load_config",
    "load_options_file",
    "options_from_args",
    "read_config",
    "validate_config",
    "validate_options",
]

"""Plugin options of the hooks (one typed source of defaults, validated once)."""

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
    "load_options_file",
    "options_from_args",
    "validate_options",
]

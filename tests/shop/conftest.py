"""Fixtures of the ShopSim tests: one small catalog per session (generation is deterministic)."""

from __future__ import annotations

import pytest

from shopsimrl.shop import generate_catalog


@pytest.fixture(scope="session")
def catalog():
    return generate_catalog(seed=0, num_products=2000)

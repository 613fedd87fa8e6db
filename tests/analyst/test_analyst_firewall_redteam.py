"""The firewall's adversarial set (shopsimrl.analyst.redteam): every kind of leak, written the ways
models write it, from real gold of generated tasks; and generic lessons that must pass.

Acceptance: >= 95% of the variants of each kind rejected, >= 95% of benign lessons
accepted. `python bench/firewall_redteam.py` prints the same rates (docs/analyst.md).
"""

from __future__ import annotations

import re

import pytest

from shopsimrl.analyst.firewall import LeakKind
from shopsimrl.analyst.redteam import BENIGN, BENIGN_LESSONS, cases, measure
from shopsimrl.shop import generate_catalog

CAT = generate_catalog(seed=0, num_products=200)
RATES = measure(CAT)
KINDS = sorted(k for k in RATES if k != BENIGN)


def test_every_kind_of_leak_is_in_the_set():
    assert KINDS == sorted([
        "product id", "gold product type", "gold attribute value", "gold option value", "price ceiling",
        "price of a purchased product", "title of a purchased product", "held-out text", "held-out task",
        "banned term",
    ])  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_at_least_95_percent_of_each_kinds_variants_are_rejected(kind):
    rate = RATES[kind]
    assert rate.total >= 5
    assert rate.fraction >= 0.95, rate.failures


def test_at_least_95_percent_of_benign_lessons_are_accepted_as_lessons_of_each_card():
    assert len(BENIGN_LESSONS) >= 50
    rate = RATES[BENIGN]
    assert rate.fraction >= 0.95, rate.failures


def test_every_reason_is_a_kind_a_source_and_a_hash_nothing_else():
    wall, found = cases(CAT)
    kinds = "|".join(re.escape(k.value) for k in LeakKind)
    sources = "|".join(re.escape(s) for s in [*wall.evidence, "validation", "test", "any product", "the config"])
    shape = re.compile(rf"^(?:{kinds}) of (?:{sources}) \[sha256:[0-9a-f]{{12}}\]$")
    reasons = [r for case in found for r in wall.check(case.text, case.evidence).reasons]
    assert len(reasons) > 200
    assert [r for r in reasons if not shape.match(r)] == []

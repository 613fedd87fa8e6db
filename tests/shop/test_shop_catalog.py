"""Catalog generation, distractors and search, checked against slow obvious references."""

from __future__ import annotations

import numpy as np
import pytest

from shopsimrl.shop import CATEGORIES, category_names, generate_catalog, load_split, parse_product_id
from shopsimrl.shop.search_index import tokenize
from shopsimrl.shop.tools import CategoryName


def test_same_seed_same_catalog_and_different_seed_differs():
    a, b, c = generate_catalog(3, 400), generate_catalog(3, 400), generate_catalog(4, 400)
    assert [a.title(i) for i in range(400)] == [b.title(i) for i in range(400)]
    assert np.array_equal(a.price_cents, b.price_cents)
    assert not np.array_equal(a.price_cents, c.price_cents)


def test_vocabulary_has_at_least_8_categories_with_typed_attributes_and_options():
    assert len(CATEGORIES) >= 8
    for spec in CATEGORIES:
        assert spec.attributes and spec.options
        assert all(len(values) >= 3 for _, values in spec.attributes)
    # the Literal in the search tool's signature (and so its schema enum) lists every category
    assert list(CategoryName.__args__) == list(category_names())


def test_product_view_fields(catalog):
    p = catalog.product(0)
    spec = next(s for s in CATEGORIES if s.name == p.category)
    assert p.product_id == "P000000"
    assert set(p.attributes) == set(spec.attribute_names)
    assert set(p.options) == set(spec.option_names)
    assert all(len(v) >= 1 for v in p.options.values())
    assert p.title.lower().endswith(p.product_type)
    assert 2.5 <= p.rating <= 5.0


def test_public_type_count_and_title_ids_match_the_products():
    """What the search index reads from the catalog (no private fields): every type id names a
    type, and two products share a title id exactly when they share a title."""
    catalog = generate_catalog(5, 600)
    assert catalog.num_types == sum(len(spec.product_types) for spec in CATEGORIES)
    assert int(catalog.type_id.max()) < catalog.num_types
    ids = catalog.title_ids
    assert ids.shape == (600,) and ids.dtype == np.int32
    first_title: dict[int, str] = {}
    first_id: dict[str, int] = {}
    for index in range(600):
        title, title_id = catalog.title(index), int(ids[index])
        assert first_title.setdefault(title_id, title) == title
        assert first_id.setdefault(title, title_id) == title_id
    with pytest.raises(ValueError, match="read-only"):
        ids[0] = 1


def test_parse_product_id():
    assert parse_product_id("P000123", 2000) == 123
    assert parse_product_id("P001999", 2000) == 1999
    assert parse_product_id("P002000", 2000) is None
    assert parse_product_id("p000123", 2000) is None
    assert parse_product_id("P12", 2000) is None


def test_every_task_gold_has_three_near_miss_distractors(catalog):
    """Each near miss differs from the base in exactly the way its role says."""
    for split in ("train", "validation", "test"):
        for task in load_split(catalog, split, limit=60):
            gold, fam = task.gold, task.gold.family_product_ids
            assert set(fam) == {"base", "attribute_swap", "option_missing", "over_budget"}
            base = catalog.product(parse_product_id(fam["base"], catalog.num_products))
            swap = catalog.product(parse_product_id(fam["attribute_swap"], catalog.num_products))
            miss = catalog.product(parse_product_id(fam["option_missing"], catalog.num_products))
            over = catalog.product(parse_product_id(fam["over_budget"], catalog.num_products))
            assert base.product_id in gold.gold_product_ids
            for distractor in (swap, miss, over):
                assert distractor.product_id not in gold.gold_product_ids
                assert distractor.product_type == base.product_type
            assert sum(swap.attributes[k] != v for k, v in gold.attributes.items()) == 1
            assert miss.attributes == gold.attributes
            assert any(gold.options[k] not in miss.options[k] for k in gold.options)
            assert miss.price <= gold.price_ceiling
            assert over.attributes == gold.attributes and over.price > gold.price_ceiling
            assert all(gold.options[k] in base.options[k] for k in gold.options)


def test_searching_alone_does_not_solve(catalog):
    """Searching with the instruction's words returns the gold's near misses with the very same title
    and score, so only opening product pages (options, price) tells them apart."""
    for task in load_split(catalog, "validation", limit=40):
        fam = task.gold.family_product_ids
        base = parse_product_id(fam["base"], catalog.num_products)
        words = " ".join([*task.gold.attributes.values(), task.gold.product_type])
        found = catalog.search(words)
        pages = [found.product_indices] + [
            catalog.search(words, page=p).product_indices for p in range(2, found.pages + 1)
        ]
        ranked = [i for page in pages for i in page]
        same_title = {f"P{i:06d}" for i in ranked if catalog.title(i) == catalog.title(base)}
        assert {fam["base"], fam["option_missing"], fam["over_budget"]} <= same_title
        assert fam["attribute_swap"] in {f"P{i:06d}" for i in ranked}  # shares all but one word


def _reference_search(catalog, keywords, category=None, max_price=None, min_rating=None):
    """Slow, obvious: score every product by the query tokens in its title + category."""
    query = tokenize(keywords)
    rows = []
    for i in range(catalog.num_products):
        p = catalog.product(i)
        tokens = set(tokenize(p.title + " " + p.category))
        score = sum(t in tokens for t in query)
        if score == 0:
            continue
        if category is not None and p.category != category:
            continue
        if max_price is not None and p.price > max_price:
            continue
        if min_rating is not None and p.rating < min_rating:
            continue
        rows.append((-score, -p.rating, i))
    return [i for _, _, i in sorted(rows)]


@pytest.mark.parametrize(
    ("keywords", "filters"),
    [
        ("leather waterproof hiking boots", {}),
        ("leather waterproof hiking boots", {"max_price": 80.0}),
        ("cotton slim fit t-shirt", {"category": "tops"}),
        ("waterproof", {"min_rating": 4.0}),
        ("black white grey", {}),  # colours are options, not title words: no match
        ("oak modern side table chair", {"max_price": 300.0, "min_rating": 3.0}),
    ],
)
def test_search_matches_reference_on_every_page(keywords, filters):
    catalog = generate_catalog(seed=7, num_products=600)
    expected = _reference_search(catalog, keywords, **filters)
    got = []
    page = 1
    while True:
        result = catalog.search(keywords, page=page, **filters)
        assert result.total == len(expected)
        assert result.pages == -(-len(expected) // 10)
        if not result.product_indices:
            break
        got.extend(result.product_indices)
        page += 1
    assert got == expected


def test_search_cache_returns_the_same_pages_as_a_cold_search(catalog):
    first = catalog.search("mesh running shoes", page=2)
    again = catalog.search("mesh running shoes", page=2)
    catalog.index.clear_cache()
    cold = catalog.search("mesh running shoes", page=2)
    assert first == again == cold


def test_large_catalog_scales_and_keeps_family_structure():
    big = generate_catalog(seed=1, num_products=100_000)
    assert big.num_products == 100_000
    assert big.num_families == 25_000
    assert big.nbytes() < 16 * 2**20  # columns + mirrors + titles + index (measured ~8 MiB)
    task = load_split(big, "test", limit=1)[0]
    assert len(task.gold.family_product_ids) == 4


def test_catalog_size_not_a_multiple_of_four_drops_tail_family_from_tasks():
    odd = generate_catalog(seed=2, num_products=402)
    assert odd.num_products == 402
    ids = {
        t.gold.family_product_ids["base"] for s in ("train", "validation", "test") for t in load_split(odd, s)
    }
    assert len(ids) == 100  # 100 complete families; the 101st has only 2 of its 4 products


def test_too_small_catalog_is_rejected():
    with pytest.raises(ValueError, match="num_products must be at least 4, got 3"):
        generate_catalog(0, 3)

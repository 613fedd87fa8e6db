"""The search index's ranking paths against a slow, obvious reference, on many random queries.

The index switches between a Python and a numpy expansion of a score level by its number of title
groups (`_PYTHON_GROUP_LIMIT`); each test runs with the switch forced both ways, and once with
every product its own group (no title grouping), so each path is compared on its own.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from shopsimrl.shop import generate_catalog
from shopsimrl.shop import search_index as search_index_module
from shopsimrl.shop.search_index import SearchIndex, tokenize


@pytest.fixture(scope="module")
def small_catalog():
    return generate_catalog(seed=11, num_products=1500)


def _reference(catalog, tokens, category_id, max_price_cents, min_rating_tenths):
    """Every product scored by the query tokens in its title + category name, then filtered and
    sorted by (score desc, rating desc, index asc)."""
    rows = []
    for i in range(catalog.num_products):
        words = set(tokenize(catalog.title(i) + " " + catalog.category_of(i).name))
        score = sum(t in words for t in tokens)
        if score == 0:
            continue
        if category_id is not None and int(catalog.category_id[i]) != category_id:
            continue
        if max_price_cents is not None and int(catalog.price_cents[i]) > max_price_cents:
            continue
        if min_rating_tenths is not None and int(catalog.rating_tenths[i]) < min_rating_tenths:
            continue
        rows.append((-score, -int(catalog.rating_tenths[i]), i))
    return [i for _, _, i in sorted(rows)]


def _random_queries(catalog, count, seed):
    rng = random.Random(seed)
    vocabulary = sorted(catalog.index.vocabulary)
    queries = []
    for _ in range(count):
        tokens = rng.sample(vocabulary, rng.randint(1, 8))
        if rng.random() < 0.2:
            tokens.append("zzzunknown")  # not in the vocabulary: contributes nothing
        title = catalog.title(rng.randrange(catalog.num_products))
        if rng.random() < 0.5:  # the common case: most of a real title's words
            tokens = tokenize(title)[: rng.randint(2, 6)] + tokens[:2]
        tokens = list(dict.fromkeys(tokens))
        queries.append(
            (
                tokens,
                rng.choice([None, None, rng.randrange(len(catalog.categories))]),
                rng.choice([None, rng.randint(500, 40_000), rng.randint(-5, 10**10)]),
                rng.choice([None, None, rng.randint(10, 50), rng.choice([-3, 0, 51, 300])]),
            )
        )
    return queries


def _index_without_groups(catalog):
    built = catalog.index
    return SearchIndex(
        built._postings,
        built._rank_to_index,
        built._ranked_price,
        built._ranked_rating,
        built._ranked_category,
    )


@pytest.mark.parametrize("group_limit", [0, 10**9], ids=["numpy-expansion", "python-expansion"])
@pytest.mark.parametrize("grouped", [True, False], ids=["title-groups", "one-product-groups"])
def test_every_page_and_total_match_the_reference(small_catalog, monkeypatch, group_limit, grouped):
    monkeypatch.setattr(search_index_module, "_PYTHON_GROUP_LIMIT", group_limit)
    index = small_catalog.index if grouped else _index_without_groups(small_catalog)
    for tokens, category_id, max_price, min_rating in _random_queries(
        small_catalog, 60, seed=group_limit % 97
    ):
        expected = _reference(small_catalog, tokens, category_id, max_price, min_rating)
        index.clear_cache()
        pages = -(-len(expected) // 10)
        got = []
        for page in range(1, min(pages, 12) + 1):  # past CACHED_RESULTS too
            found = index.search(
                tokens,
                category_id=category_id,
                max_price_cents=max_price,
                min_rating_tenths=min_rating,
                page=page,
            )
            assert (found.total, found.pages, found.page) == (len(expected), pages, page)
            got.extend(found.product_indices)
        assert got == expected[: len(got)]
        assert len(got) == min(len(expected), 120)


def test_a_deep_page_first_then_page_one_agree_with_the_reference(small_catalog):
    index = small_catalog.index
    tokens = ["leather", "cotton", "oak", "steel"]
    expected = _reference(small_catalog, tokens, None, None, None)
    index.clear_cache()
    assert index.search(tokens, page=15).product_indices == expected[140:150]
    assert index.search(tokens, page=1).product_indices == expected[:10]
    assert index.search(tokens, page=3, page_size=7).product_indices == expected[14:21]


def test_a_small_page_size_gives_its_rows_and_the_exact_total(small_catalog):
    tokens = ["leather"]
    expected = _reference(small_catalog, tokens, None, None, None)
    found = small_catalog.index.search(tokens, page=1, page_size=3)
    assert found.product_indices == expected[:3] and found.total == len(expected)


def test_titles_are_the_groups_and_each_group_shares_its_token_set(small_catalog):
    index = small_catalog.index
    title_of_rank = np.frombuffer(small_catalog._a_title, dtype=np.int32)[index._rank_to_index]
    assert index._num_groups == len(set(title_of_rank.tolist())) == len(small_catalog._titles)

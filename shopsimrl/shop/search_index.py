"""The inverted index behind the `search` tool.

Relevance is the number of distinct query tokens a product's title (plus its category name)
contains; ties go to the higher rating, then the lower product id. Postings hold *rank positions*
(products pre-sorted by rating desc, id asc), so a candidate set read off in position order is
already in tie-break order and ranking needs no sort over the catalog.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shopsimrl.shop.catalog import Catalog

_TOKEN = re.compile(r"[a-z0-9]+")
CACHED_RESULTS = 100  # results kept per cached query: the first 10 pages
CACHE_ENTRIES = 4096  # LRU size: about 4096 * 100 * 28 bytes at most


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens, de-duplicated, in first-seen order."""
    return list(dict.fromkeys(_TOKEN.findall(text.lower())))


@dataclass(frozen=True)
class SearchPage:
    product_indices: list[int]
    total: int  # products matching at least one query token (after filters)
    page: int
    pages: int


class SearchIndex:
    def __init__(
        self,
        postings: dict[str, np.ndarray],
        rank_to_index: np.ndarray,
        ranked_price: np.ndarray,
        ranked_rating: np.ndarray,
        ranked_category: np.ndarray,
    ):
        self._postings = postings
        self._rank_to_index = rank_to_index
        self._ranked_price = ranked_price
        self._ranked_rating = ranked_rating
        self._ranked_category = ranked_category
        # (tokens, filters) -> (first CACHED_RESULTS indices, total). The catalog is immutable, so
        # a cached ranking is always current; siblings of a GRPO group repeat each other's searches.
        self._cache: OrderedDict[tuple, tuple[list[int], int]] = OrderedDict()

    @classmethod
    def build(cls, catalog: Catalog) -> SearchIndex:
        n = catalog.num_products
        # rank order: rating desc, then index asc
        rank_to_index = np.lexsort((np.arange(n), -catalog.rating_tenths.astype(np.int16))).astype(np.int32)
        index_to_rank = np.empty(n, dtype=np.int32)
        index_to_rank[rank_to_index] = np.arange(n, dtype=np.int32)

        # Token sets come from a few hundred component values (brand, attribute value, type,
        # category), so postings are built with one vectorised mask per component.
        pieces: dict[str, list[np.ndarray]] = {}

        def add(text: str, mask: np.ndarray) -> None:
            ranks = index_to_rank[np.flatnonzero(mask)]
            for token in tokenize(text):
                pieces.setdefault(token, []).append(ranks)

        for c, spec in enumerate(catalog.categories):
            in_cat = catalog.category_id == c
            add(spec.name, in_cat)
            for b, brand in enumerate(spec.brands):
                add(brand, in_cat & (catalog.brand == b))
            for d, (_, values) in enumerate(spec.attributes):
                for v, value in enumerate(values):
                    add(value, in_cat & (catalog.attrs[:, d] == v))
        for t in range(len(catalog._types)):
            add(catalog.type_name(t), catalog.type_id == t)

        postings = {
            token: np.unique(np.concatenate(parts)).astype(np.int32) for token, parts in pieces.items()
        }
        return cls(
            postings,
            rank_to_index,
            catalog.price_cents[rank_to_index],
            catalog.rating_tenths[rank_to_index],
            catalog.category_id[rank_to_index],
        )

    def nbytes(self) -> int:
        arrays = [self._rank_to_index, self._ranked_price, self._ranked_rating, self._ranked_category]
        return sum(int(p.nbytes) for p in self._postings.values()) + sum(int(a.nbytes) for a in arrays)

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def vocabulary(self) -> frozenset[str]:
        return frozenset(self._postings)

    def search(
        self,
        tokens: list[str],
        *,
        category_id: int | None = None,
        max_price_cents: int | None = None,
        min_rating_tenths: int | None = None,
        page: int = 1,
        page_size: int = 10,
    ) -> SearchPage:
        start, stop = (page - 1) * page_size, page * page_size
        key = (tuple(tokens), category_id, max_price_cents, min_rating_tenths)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            head, total = cached
        else:
            head, total = self._rank(tokens, category_id, max_price_cents, min_rating_tenths, CACHED_RESULTS)
            self._cache[key] = (head, total)
            if len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        if stop > len(head) and total > len(head):
            head, total = self._rank(tokens, category_id, max_price_cents, min_rating_tenths, stop)
        pages = -(-total // page_size)
        return SearchPage(head[start:stop], total, page, pages)

    def _rank(
        self,
        tokens: list[str],
        category_id: int | None,
        max_price_cents: int | None,
        min_rating_tenths: int | None,
        need: int,
    ) -> tuple[list[int], int]:
        """The first `need` matching catalog indices in result order, and the number of matches."""
        postings = self._postings
        lists = [postings[t] for t in tokens if t in postings]
        if not lists:
            return [], 0
        if len(lists) == 1:
            candidates = lists[0]
            scores = None
        else:
            # Merge the postings by sorting their concatenation (cost grows with the postings, not
            # the catalog); a run of equal rank positions is one candidate, its length the score.
            # Few numpy calls on purpose: each costs ~1 us whatever the size here.
            merged = np.concatenate(lists)
            merged.sort()
            m = merged.shape[0]
            bounds = np.empty(m + 1, dtype=bool)
            bounds[0] = bounds[m] = True
            np.not_equal(merged[1:], merged[:-1], out=bounds[1:m])
            edges = np.flatnonzero(bounds)  # run starts, then the end
            candidates = merged[edges[:-1]]
            scores = edges[1:] - edges[:-1]
        keep = None
        if category_id is not None:
            keep = self._ranked_category[candidates] == category_id
        if max_price_cents is not None:
            k = self._ranked_price[candidates] <= max_price_cents
            keep = k if keep is None else keep & k
        if min_rating_tenths is not None:
            k = self._ranked_rating[candidates] >= min_rating_tenths
            keep = k if keep is None else keep & k
        if keep is not None:
            candidates = candidates[keep]
            if scores is not None:
                scores = scores[keep]
        total = int(candidates.shape[0])
        if total == 0:
            return [], 0
        if scores is None:
            chosen = candidates[:need]
        else:
            # Walk score levels from the top; within a level candidates are already in rank order.
            taken: list[np.ndarray] = []
            count = 0
            for level in range(len(lists), 0, -1):
                at_level = candidates[scores == level]
                if at_level.shape[0]:
                    taken.append(at_level)
                    count += at_level.shape[0]
                    if count >= need:
                        break
            chosen = taken[0][:need] if len(taken) == 1 else np.concatenate(taken)[:need]
        return self._rank_to_index[chosen].tolist(), total

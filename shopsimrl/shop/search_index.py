"""The inverted index behind the `search` tool.

Relevance is the number of distinct query tokens a product's title (plus its category name)
contains; ties go to the higher rating, then the lower product id ("rank order"; a product's rank
position is its place in that order).

Ranking a new query is on every fresh search's path, so it is built from a few cheap operations:

- Products with the same title have the same token set and so the same score: a 10k catalog has
  ~2,200 distinct titles ("groups"), a 100k one ~2,700. Scores are computed per group on Python
  integers used as bitsets (one bit per group and token): a bit-sliced counter over the query's
  token bitsets gives the set of groups at each score level in ~20 integer operations.
- The total (products matching at least one token, after filters) is a popcount: each token also
  has a bitset over products in *price order*, so `max_price` is a prefix mask, and `min_rating`
  (41 values) and `category` (8) are precomputed masks.
- Only the groups of the top score levels are expanded into products (their members are stored in
  rank order); small levels in Python, large ones (one-word queries on big catalogs) with numpy.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shopsimrl.shop.catalog import Catalog

_TOKEN = re.compile(r"[a-z0-9]+")
CACHED_RESULTS = 100  # results kept at most per cached query: the first 10 pages
CACHE_ENTRIES = 4096  # LRU size: about 4096 * 100 * 28 bytes at most
# Switches between a Python and a numpy step, by size (both give the same result; see
# tests/shop/test_shop_search_paths.py). Python costs ~0.2 us per group bit and ~60 ns per product,
# numpy ~10-15 us per call sequence plus a small linear part.
_PYTHON_GROUP_LIMIT = 64  # groups of one score level expanded in Python, at most


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens, de-duplicated, in first-seen order."""
    return list(dict.fromkeys(_TOKEN.findall(text.lower())))


@dataclass(frozen=True)
class SearchPage:
    product_indices: list[int]
    total: int  # products matching at least one query token (after filters)
    page: int
    pages: int


def _bitset(positions: np.ndarray, size: int) -> int:
    """A Python int with bit p set for each p in `positions` (all < size)."""
    bits = np.zeros(size, dtype=bool)
    bits[positions] = True
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")


def _bit_positions(bits: int, size: int) -> np.ndarray:
    """The set bits of `bits` (< 2**size), ascending."""
    raw = np.frombuffer(bits.to_bytes((size + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little"))


class SearchIndex:
    def __init__(
        self,
        postings: dict[str, np.ndarray],
        rank_to_index: np.ndarray,
        ranked_price: np.ndarray,
        ranked_rating: np.ndarray,
        ranked_category: np.ndarray,
        *,
        group_of_rank: np.ndarray | None = None,
    ):
        """`postings` map a token to the ascending rank positions of the products that contain it.
        `group_of_rank[r]` is the title group of the product at rank position r; products of one
        group must have the same token set (None: every product is its own group, always correct
        but slower)."""
        self._postings = postings
        self._rank_to_index = rank_to_index
        self._ranked_price = ranked_price
        self._ranked_rating = ranked_rating
        self._ranked_category = ranked_category
        self._n = n = int(rank_to_index.shape[0])
        self._build_groups(np.arange(n) if group_of_rank is None else group_of_rank)
        self._build_product_bitsets()
        # (tokens, filters) -> (first results, total). The catalog is immutable, so a cached ranking
        # is always current; siblings of a GRPO group repeat each other's searches.
        self._cache: OrderedDict[tuple, tuple[list[int], int]] = OrderedDict()

    def _build_groups(self, group_of_rank: np.ndarray) -> None:
        # Group ids 0..G-1 numbered down from each group's best (lowest) rank position, so that
        # reading a bitset of groups from its high bits (the cheapest way in Python) visits them in
        # order of their best product.
        _, first, dense = np.unique(group_of_rank, return_index=True, return_inverse=True)
        renumber = np.empty(first.shape[0], dtype=np.int64)
        renumber[np.argsort(first)] = np.arange(first.shape[0] - 1, -1, -1)
        dense = renumber[dense.reshape(-1)]
        size = np.bincount(dense)
        bounds = np.zeros(size.shape[0] + 1, dtype=np.int64)
        np.cumsum(size, out=bounds[1:])
        self._num_groups = g = int(size.shape[0])
        self._group_size = size
        self._group_start = bounds[:-1]
        # ranks grouped by group, ascending within each group (a stable sort keeps rank order)
        self._group_members = np.argsort(dense, kind="stable").astype(np.int32)
        self._group_bits = {token: _bitset(dense[ranks], g) for token, ranks in self._postings.items()}
        group_category = np.zeros(g, dtype=np.int64)
        group_category[dense] = self._ranked_category
        categories = int(self._ranked_category.max(initial=0)) + 1
        self._group_category_bits = [
            _bitset(np.flatnonzero(group_category == c), g) for c in range(categories)
        ]
        # Python-side mirrors for the small expansions (array.array: compact, fast item reads).
        self._py_members = array("i", self._group_members.tobytes())
        self._py_bounds = bounds.tolist()
        self._py_price = array("q", self._ranked_price.astype(np.int64).tobytes())  # any int compares
        self._py_rating = array("h", self._ranked_rating.astype(np.int16).tobytes())
        self._py_index = array("i", self._rank_to_index.astype(np.int32).tobytes())

    def _build_product_bitsets(self) -> None:
        # Bit i of these is the i-th cheapest product: `price <= P` is then the low bits.
        n = self._n
        by_price = np.argsort(self._ranked_price, kind="stable")
        position = np.empty(n, dtype=np.int64)
        position[by_price] = np.arange(n)
        self._sorted_prices = array("q", self._ranked_price[by_price].astype(np.int64).tobytes())
        self._price_order_bits = {
            token: _bitset(position[ranks], n) for token, ranks in self._postings.items()
        }
        rating_at = self._ranked_rating[by_price]
        # masks for min_rating 0..highest rating; above it no product passes
        top = int(self._ranked_rating.max(initial=0))
        self._min_rating_bits = [_bitset(np.flatnonzero(rating_at >= r), n) for r in range(top + 1)]
        category_at = self._ranked_category[by_price]
        categories = int(self._ranked_category.max(initial=0)) + 1
        self._category_bits = [_bitset(np.flatnonzero(category_at == c), n) for c in range(categories)]

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
        for t in range(catalog.num_types):
            add(catalog.type_name(t), catalog.type_id == t)

        postings = {
            token: np.unique(np.concatenate(parts)).astype(np.int32) for token, parts in pieces.items()
        }
        # The token set above is a function of (type, brand, attributes) -- the category follows
        # from the type -- which is exactly what the catalog interns titles by.
        title_ids = catalog.title_ids
        return cls(
            postings,
            rank_to_index,
            catalog.price_cents[rank_to_index],
            catalog.rating_tenths[rank_to_index],
            catalog.category_id[rank_to_index],
            group_of_rank=title_ids[rank_to_index],
        )

    def nbytes(self) -> int:
        arrays = [
            self._rank_to_index, self._ranked_price, self._ranked_rating, self._ranked_category,
            self._group_size, self._group_start, self._group_members,
        ]  # fmt: skip
        mirrors = [self._py_members, self._py_price, self._py_rating, self._py_index, self._sorted_prices]
        bitsets = [
            *self._group_bits.values(), *self._group_category_bits, *self._price_order_bits.values(),
            *self._min_rating_bits, *self._category_bits,
        ]  # fmt: skip
        return (
            sum(int(p.nbytes) for p in self._postings.values())
            + sum(int(a.nbytes) for a in arrays)
            + sum(a.itemsize * len(a) for a in mirrors)
            + sum((b.bit_length() + 7) // 8 for b in bitsets)
            + 8 * (len(self._py_bounds))
        )

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
        if cached is None or (stop > len(head) and total > len(head)):
            # Rank only as deep as this page needs (a deeper page later ranks again, deeper).
            head, total = self._rank(tokens, category_id, max_price_cents, min_rating_tenths, stop)
            if stop <= CACHED_RESULTS:
                self._cache[key] = (head, total)
                if len(self._cache) > CACHE_ENTRIES:
                    self._cache.popitem(last=False)
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
        group_bits = self._group_bits
        known = [t for t in tokens if t in group_bits]
        if not known:
            return [], 0
        total = self._count(known, category_id, max_price_cents, min_rating_tenths)
        if total == 0:
            return [], 0
        # Bit-sliced counter: at_least[j] = groups containing at least j + 1 of the tokens so far.
        at_least: list[int] = []
        for token in known:
            bits = group_bits[token]
            if at_least:
                at_least.append(at_least[-1] & bits)
                for j in range(len(at_least) - 2, 0, -1):
                    at_least[j] |= at_least[j - 1] & bits
                at_least[0] |= bits
            else:
                at_least.append(bits)
        if category_id is not None:
            in_category = self._group_category_bits[category_id]
            at_least = [bits & in_category for bits in at_least]
        at_least.append(0)
        chosen: list[int] = []  # rank positions, in result order
        for level in range(len(known), 0, -1):
            if len(chosen) >= need:
                break
            groups = at_least[level - 1] ^ at_least[level]  # exactly `level` tokens
            if groups:
                chosen += self._expand(groups, max_price_cents, min_rating_tenths, need - len(chosen))
        index = self._py_index
        return [index[r] for r in chosen[:need]], total

    def _count(
        self,
        tokens: list[str],
        category_id: int | None,
        max_price_cents: int | None,
        min_rating_tenths: int | None,
    ) -> int:
        """Products containing at least one of `tokens` (all in the vocabulary), after filters."""
        bits = 0
        for token in tokens:
            bits |= self._price_order_bits[token]
        if max_price_cents is not None:
            bits &= (1 << bisect_right(self._sorted_prices, max_price_cents)) - 1
        if min_rating_tenths is not None:
            if min_rating_tenths >= len(self._min_rating_bits):
                return 0
            bits &= self._min_rating_bits[max(min_rating_tenths, 0)]
        if category_id is not None:
            if not 0 <= category_id < len(self._category_bits):
                return 0
            bits &= self._category_bits[category_id]
        return bits.bit_count()

    def _expand(
        self, groups: int, max_price_cents: int | None, min_rating_tenths: int | None, need: int
    ) -> list[int]:
        """The first `need` rank positions, ascending, of the products of the groups in the bitset
        `groups` that pass the filters."""
        if groups.bit_count() > _PYTHON_GROUP_LIMIT:
            ids = _bit_positions(groups, self._num_groups)
            return self._expand_numpy(ids, max_price_cents, min_rating_tenths, need)
        members, bounds = self._py_members, self._py_bounds
        price, rating = self._py_price, self._py_rating
        high, low = max_price_cents, min_rating_tenths
        out: list[int] = []
        bound = -1  # once `need` products are found: a rank that the need-th result cannot exceed
        while groups:
            g = groups.bit_length() - 1
            groups ^= 1 << g
            start = bounds[g]
            if 0 <= bound < members[start]:
                break  # this group and every later one start after the need-th result
            run = members[start : bounds[g + 1]]
            if high is None and low is None:
                out += run[:need]  # a group's members are in rank order: its first `need` suffice
            elif low is None:
                out += [r for r in run if price[r] <= high]
            elif high is None:
                out += [r for r in run if rating[r] >= low]
            else:
                out += [r for r in run if price[r] <= high and rating[r] >= low]
            if bound < 0 and len(out) >= need:
                out.sort()
                bound = out[need - 1]
        out.sort()
        return out[:need]

    def _expand_numpy(
        self, groups: np.ndarray, max_price_cents: int | None, min_rating_tenths: int | None, need: int
    ) -> list[int]:
        """`_expand` for many products, on an array of group ids."""
        sizes = self._group_size[groups]
        ends = np.cumsum(sizes)
        # position k of the concatenated runs reads members[start of its group + k - run offset]
        offsets = np.repeat(self._group_start[groups] - (ends - sizes), sizes)
        offsets += np.arange(int(ends[-1]))
        ranks = self._group_members[offsets]
        if max_price_cents is not None:
            ranks = ranks[self._ranked_price[ranks] <= max_price_cents]
        if min_rating_tenths is not None:
            ranks = ranks[self._ranked_rating[ranks] >= min_rating_tenths]
        if ranks.shape[0] > need:
            ranks = np.partition(ranks, need - 1)[:need]
        ranks.sort()
        return ranks.tolist()

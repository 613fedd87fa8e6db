"""The seeded product catalog: columnar, compact, with near-miss distractors by construction.

Products are generated in *families* of four: a base product (the future gold of a task) and three
near misses that share its title words — one attribute wrong, one lacking the target option value,
one over the task's price ceiling — so that searching alone does not solve a task. Product ids are
a seeded permutation of the generation order, so an id says nothing about a product's role.
A difficulty level (levels.py) may keep fewer near misses per family and have the task state fewer
constraints; the production level `full` is the generator described here, unchanged.

Storage is columnar numpy (about 20 bytes per product plus the search index), which is what lets a
100k-product catalog fit in a few MiB; `Product` views are built on demand.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, get_args

import numpy as np

from shopsimrl.shop.categories import CATEGORIES, CategorySpec
from shopsimrl.shop.levels import DISTRACTOR_ROLES, FULL, Level, get_level
from shopsimrl.shop.observations import encode_json_string
from shopsimrl.shop.search_index import SearchIndex, SearchPage, tokenize

FAMILY_SIZE = 4  # of the production level; `Catalog.family_size` is the catalog's own
NO_VALUE = 255  # attribute/option slot unused by a category, or an option the task does not name
NO_CEILING = -1  # family_ceiling_cents of a level whose tasks state no price ceiling
PAGE_CACHE_ENTRIES = 20_000  # serialised product pages kept (about 300 bytes each)
ROW_CACHE_ENTRIES = 50_000  # serialised search rows kept (about 150 bytes each)
# Which tools the shop lists to the agent (ShopEnv): `dynamic`, the production profile, lists the tools
# usable in the current state, so the prompt's tool list (and the rollout's segment) changes as the
# episode goes; `all` lists every tool from the first turn (a call the state does not allow yet is
# still refused with `tool_not_offered`), so an episode is one token-contiguous segment.
ToolOffer = Literal["dynamic", "all"]
TOOL_OFFERS: tuple[str, ...] = get_args(ToolOffer)


class FamilyRole:
    """Role of a product inside its family (stored as uint8)."""

    BASE = 0
    ATTRIBUTE_SWAP = 1
    OPTION_MISSING = 2
    OVER_BUDGET = 3
    NAMES = ("base", "attribute_swap", "option_missing", "over_budget")


@dataclass(frozen=True)
class Product:
    """A product as the tools show it (built on demand from the columns)."""

    index: int
    product_id: str
    title: str
    category: str
    product_type: str
    brand: str
    attributes: dict[str, str]
    options: dict[str, list[str]]
    price: float
    rating: float

    def page(self) -> dict:
        """What `view_product` shows (selected options are added by the tool)."""
        return {
            "product_id": self.product_id,
            "title": self.title,
            "category": self.category,
            "price": self.price,
            "rating": self.rating,
            "attributes": self.attributes,
            "options": self.options,
        }


def product_id(index: int) -> str:
    return f"P{index:06d}"


def parse_product_id(text: str, num_products: int) -> int | None:
    """`P000123` -> 123, or None when the text is not the id of a product of this catalog."""
    if len(text) != 7 or text[0] != "P" or not text[1:].isdigit():
        return None
    index = int(text[1:])
    return index if index < num_products else None


class Catalog:
    """A generated catalog. Build it with `generate_catalog`; treat it as immutable."""

    def __init__(self, *, seed: int, columns: dict[str, np.ndarray], families: dict[str, np.ndarray],
                 level: Level = FULL, tool_offer: ToolOffer = "dynamic"):  # fmt: skip
        if tool_offer not in TOOL_OFFERS:
            raise ValueError(f"unknown tool offer {tool_offer!r}; expected one of: {', '.join(TOOL_OFFERS)}")
        self.seed = seed
        self.level = level
        self.tool_offer = tool_offer
        self.family_size = level.family_size
        self.num_products = int(columns["type_id"].shape[0])
        self.categories: tuple[CategorySpec, ...] = CATEGORIES
        self._types: list[tuple[int, str]] = [
            (c, t) for c, spec in enumerate(CATEGORIES) for t in spec.product_types
        ]
        self.type_id = columns["type_id"]  # uint16: global product type
        self.category_id = columns["category_id"]  # uint8
        self.brand = columns["brand"]  # uint8: index into the category's brands
        self.attrs = columns["attrs"]  # uint8 [N, A]: value index per attribute dimension
        self.option_masks = columns["option_masks"]  # uint16 [N, O]: bit v set = value v offered
        self.price_cents = columns["price_cents"]  # int32
        self.rating_tenths = columns["rating_tenths"]  # uint8, 10..50
        self.role = columns["role"]  # uint8, FamilyRole
        self.family = columns["family"]  # int32
        self.family_base = families["base"]  # int32 [F]: index of the base product
        self.family_ceiling_cents = families["ceiling_cents"]  # int32 [F]; NO_CEILING: none stated
        self.family_target_options = families["target_options"]  # uint8 [F, O]; NO_VALUE: not named
        self.family_named_attributes = families["named_attributes"]  # bool [F, A]: the task names it
        self._index: SearchIndex | None = None
        # Per-item reads from numpy cost ~100 ns each plus an int() conversion; tools read a few
        # fields per call, so the hot columns are mirrored as array.array (same bytes, fast
        # indexing), and titles are interned per distinct (type, brand, attributes) combination.
        self._a_category = array("B", self.category_id.tobytes())
        self._a_type = array("H", self.type_id.tobytes())
        self._a_price = array("i", self.price_cents.tobytes())
        self._a_rating = array("B", self.rating_tenths.tobytes())
        self._a_attrs = array("B", self.attrs.tobytes())  # row-major [N, A]
        self._a_masks = array("H", self.option_masks.tobytes())  # row-major [N, O]
        self._n_attr_slots = int(self.attrs.shape[1])
        self._n_option_slots = int(self.option_masks.shape[1])
        self._titles, title_ids = self._intern_titles()
        self._a_title = array("i", title_ids.astype(np.int32).tobytes())
        # Serialised fragments for the tools' observations (the catalog is immutable, so they never
        # go stale): each title JSON-encoded once, and a bounded cache of product-page heads. Each
        # fragment equals what json.dumps writes for the same values (test_shop_perf_paths.py).
        self._title_json: dict[int, str] = {}
        self._page_json_head: dict[int, str] = {}
        self._row_json: dict[int, str] = {}
        # (category, slot, value index or option mask) -> encoded page member; bounded by the categories
        self._page_members: dict[tuple[int, int, int], str] = {}

    def _intern_titles(self) -> tuple[list[str], np.ndarray]:
        key = self.type_id.astype(np.int64) * 256 + self.brand
        for d in range(self.attrs.shape[1]):
            key = key * 256 + self.attrs[:, d]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return [self._compose_title(int(i)) for i in first], inverse.reshape(-1)

    def _compose_title(self, index: int) -> str:
        spec = CATEGORIES[int(self.category_id[index])]
        words = [spec.brands[int(self.brand[index])]]
        for d, (_, values) in enumerate(spec.attributes):
            words.append(values[int(self.attrs[index, d])])
        words.append(self.type_name(int(self.type_id[index])))
        return " ".join(words).title()

    # -- vocabulary -------------------------------------------------------------------------
    def type_name(self, type_id: int) -> str:
        return self._types[type_id][1]

    def type_category(self, type_id: int) -> int:
        return self._types[type_id][0]

    @property
    def num_types(self) -> int:
        """Product types over all categories; type ids are 0 .. num_types - 1."""
        return len(self._types)

    @property
    def title_ids(self) -> np.ndarray:
        """The interned title of each product (int32, a read-only view): one id per distinct
        (type, brand, attributes), so products with the same title share it."""
        view = np.frombuffer(self._a_title, dtype=np.int32)
        view.flags.writeable = False
        return view

    @property
    def num_families(self) -> int:
        return int(self.family_base.shape[0])

    # -- products ---------------------------------------------------------------------------
    def title(self, index: int) -> str:
        return self._titles[self._a_title[index]]

    def category_of(self, index: int) -> CategorySpec:
        return CATEGORIES[self._a_category[index]]

    def type_of(self, index: int) -> str:
        return self._types[self._a_type[index]][1]

    def attributes_of(self, index: int) -> dict[str, str]:
        spec = CATEGORIES[self._a_category[index]]
        row = index * self._n_attr_slots
        return {name: values[self._a_attrs[row + d]] for d, (name, values) in enumerate(spec.attributes)}

    def options_of(self, index: int) -> dict[str, list[str]]:
        spec = CATEGORIES[self._a_category[index]]
        row = index * self._n_option_slots
        out: dict[str, list[str]] = {}
        for d, (name, values) in enumerate(spec.options):
            mask = self._a_masks[row + d]
            out[name] = [v for i, v in enumerate(values) if mask >> i & 1]
        return out

    def option_names(self, index: int) -> list[str]:
        """The keys of `options_of(index)`, in order, without building the value lists."""
        return [name for name, _ in CATEGORIES[self._a_category[index]].options]

    def offers_option_value(self, index: int, option: str, value: str) -> bool:
        """`value in options_of(index).get(option, [])`, read off the option bit masks."""
        spec = CATEGORIES[self._a_category[index]]
        for d, (name, values) in enumerate(spec.options):
            if name == option:
                if value not in values:
                    return False
                return bool(self._a_masks[index * self._n_option_slots + d] >> values.index(value) & 1)
        return False

    def price(self, index: int) -> float:
        return self._a_price[index] / 100.0

    def rating(self, index: int) -> float:
        return self._a_rating[index] / 10.0

    def product(self, index: int) -> Product:
        spec = self.category_of(index)
        return Product(
            index=index,
            product_id=product_id(index),
            title=self.title(index),
            category=spec.name,
            product_type=self.type_of(index),
            brand=spec.brands[int(self.brand[index])],
            attributes=self.attributes_of(index),
            options=self.options_of(index),
            price=self.price(index),
            rating=self.rating(index),
        )

    def search_row(self, index: int) -> dict:
        """One search result line: what a results page shows (title, price, rating; no options)."""
        return {
            "product_id": f"P{index:06d}",
            "title": self._titles[self._a_title[index]],
            "price": self._a_price[index] / 100.0,
            "rating": self._a_rating[index] / 10.0,
        }

    def _encoded_title(self, index: int) -> str:
        title_id = self._a_title[index]
        text = self._title_json.get(title_id)
        if text is None:
            text = self._title_json[title_id] = encode_json_string(self._titles[title_id])
        return text

    def search_row_json(self, index: int) -> str:
        """`json.dumps(self.search_row(index))`, formatted directly (ids are ASCII; floats use the
        same repr as json); cached, at most ROW_CACHE_ENTRIES rows."""
        text = self._row_json.get(index)
        if text is None:
            if len(self._row_json) >= ROW_CACHE_ENTRIES:
                self._row_json.clear()  # bounded memory on huge catalogs; refills on demand
            text = self._row_json[index] = (
                f'{{"product_id": "P{index:06d}", "title": {self._encoded_title(index)}, '
                f'"price": {self._a_price[index] / 100.0!r}, "rating": {self._a_rating[index] / 10.0!r}}}'
            )
        return text

    def search_rows_json(self, indices: Sequence[int]) -> str:
        """`", ".join(self.search_row_json(i) for i in indices)`: a results page's rows, with the
        cache lookup and the first-time formatting inlined (one call per page, not per row)."""
        rows = self._row_json
        get = rows.get
        encoded_titles, title_ids = self._title_json, self._a_title
        price, rating = self._a_price, self._a_rating
        out = []
        for index in indices:
            text = get(index)
            if text is None:
                if len(rows) >= ROW_CACHE_ENTRIES:
                    rows.clear()  # as in search_row_json
                title = encoded_titles.get(title_ids[index])
                if title is None:
                    title = self._encoded_title(index)
                text = rows[index] = (
                    f'{{"product_id": "P{index:06d}", "title": {title}, '
                    f'"price": {price[index] / 100.0!r}, "rating": {rating[index] / 10.0!r}}}'
                )
            out.append(text)
        return ", ".join(out)

    def line_fields_json(self, index: int) -> str:
        """The `"product_id": ..., "title": ..., "price": ...` members of a cart line, as json.dumps
        writes them."""
        return f'"product_id": "P{index:06d}", "title": {self._encoded_title(index)}, "price": {self._a_price[index] / 100.0!r}'

    def _page_json(self, index: int) -> str:
        # json.dumps(self.product(index).page()), formatted without building the Product. The
        # attribute and option members repeat across products (a category's attribute value, an
        # option's set of offered values), so each distinct member is encoded once per catalog.
        cat = self._a_category[index]
        spec = CATEGORIES[cat]
        members = self._page_members
        row = index * self._n_attr_slots
        a_attrs = self._a_attrs
        parts = []
        for d in range(len(spec.attributes)):
            key = (cat, d, a_attrs[row + d])
            text = members.get(key)
            if text is None:
                name, values = spec.attributes[d]
                text = members[key] = f"{encode_json_string(name)}: {encode_json_string(values[key[2]])}"
            parts.append(text)
        attributes = ", ".join(parts)
        row = index * self._n_option_slots
        a_masks = self._a_masks
        parts = []
        for d in range(len(spec.options)):
            key = (cat, -1 - d, a_masks[row + d])  # negative slot: options, apart from attributes
            text = members.get(key)
            if text is None:
                name, values = spec.options[d]
                mask = key[2]
                offered = ", ".join([encode_json_string(v) for i, v in enumerate(values) if mask >> i & 1])
                text = members[key] = f"{encode_json_string(name)}: [{offered}]"
            parts.append(text)
        options = ", ".join(parts)
        return (
            f'{{"product_id": "P{index:06d}", "title": {self._encoded_title(index)}, "category": {encode_json_string(spec.name)}, '
            f'"price": {self._a_price[index] / 100.0!r}, "rating": {self._a_rating[index] / 10.0!r}, '
            f'"attributes": {{{attributes}}}, "options": {{{options}}}}}'
        )

    def page_json_head(self, index: int) -> str:
        """`json.dumps(self.product(index).page())` without its closing brace (view_product appends
        the episode's selections); cached, at most PAGE_CACHE_ENTRIES pages."""
        text = self._page_json_head.get(index)
        if text is None:
            if len(self._page_json_head) >= PAGE_CACHE_ENTRIES:
                self._page_json_head.clear()  # bounded memory on huge catalogs; refills on demand
            text = self._page_json_head[index] = self._page_json(index)[:-1]
        return text

    # -- search -----------------------------------------------------------------------------
    @property
    def index(self) -> SearchIndex:
        """The inverted index, built on first use (generation stays cheap for callers that never search)."""
        if self._index is None:
            self._index = SearchIndex.build(self)
        return self._index

    def search(
        self,
        keywords: str,
        *,
        category: str | None = None,
        max_price: float | None = None,
        min_rating: float | None = None,
        page: int = 1,
        page_size: int = 10,
    ) -> SearchPage:
        category_id = None if category is None else self.category_names.index(category)
        return self.index.search(
            tokenize(keywords),
            category_id=category_id,
            max_price_cents=None if max_price is None else int(round(max_price * 100)),
            min_rating_tenths=None if min_rating is None else int(round(min_rating * 10)),
            page=page,
            page_size=page_size,
        )

    @cached_property
    def category_names(self) -> list[str]:
        return [spec.name for spec in CATEGORIES]

    def nbytes(self) -> int:
        """Bytes held by the columns and, once built, the search index."""
        arrays = [
            self.type_id, self.category_id, self.brand, self.attrs, self.option_masks, self.price_cents,
            self.rating_tenths, self.role, self.family, self.family_base, self.family_ceiling_cents,
            self.family_target_options, self.family_named_attributes,
        ]  # fmt: skip
        mirrors = [self._a_category, self._a_type, self._a_price, self._a_rating, self._a_attrs, self._a_masks,
                   self._a_title]  # fmt: skip
        total = sum(int(a.nbytes) for a in arrays) + sum(a.itemsize * len(a) for a in mirrors)
        total += sum(len(t) + 49 for t in self._titles)  # compact ASCII str objects
        return total + (self._index.nbytes() if self._index is not None else 0)


def _cents_range(spec: CategorySpec) -> tuple[int, int]:
    return int(spec.price_range[0] * 100), int(spec.price_range[1] * 100)


def _named_dims(rng: np.random.Generator | None, n_dims: np.ndarray, width: int, wanted: int | None
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per family, its dimensions in a seeded order and how many of them (the first ones) the task
    names. Without a limit (`wanted` None) the order is the identity and no draw is made, which is
    what keeps the production level's draws exactly as they were."""
    F = n_dims.shape[0]
    if wanted is None:
        return np.broadcast_to(np.arange(width), (F, width)), n_dims
    keys = rng.random((F, width))
    keys[np.arange(width)[None, :] >= n_dims[:, None]] = np.inf  # the category's dimensions first
    return np.argsort(keys, axis=1, kind="stable"), np.minimum(n_dims, wanted)


def _to_mask(order: np.ndarray, count: np.ndarray) -> np.ndarray:
    """[F, D] bool: dimension d is among the first `count` of the family's `order`."""
    mask = np.zeros(order.shape, dtype=bool)
    rows = np.repeat(np.arange(order.shape[0]), order.shape[1])
    mask[rows, order.reshape(-1)] = (np.arange(order.shape[1])[None, :] < count[:, None]).reshape(-1)
    return mask


def generate_catalog(
    seed: int = 0, num_products: int | None = None, level: str | Level = FULL, tools: ToolOffer = "dynamic"
) -> Catalog:
    """Generate a catalog of `num_products` products (at least one family) from `seed` at a
    difficulty `level` (levels.py; default `full`, the production profile). `num_products` defaults
    to the level's catalog size (2,000 for `full`). `tools` is how the shop lists its tools
    (`ToolOffer`); it draws nothing, so products and tasks do not depend on it.

    Deterministic: the same (seed, num_products, level) gives the same catalog on every machine,
    because every draw comes from one `numpy.random.Generator(PCG64(seed))` in a fixed order (and,
    for a level that names fewer dimensions, a second generator seeded from (seed, level)).
    """
    level = get_level(level)
    if num_products is None:
        num_products = level.num_products
    family_size = level.family_size
    if num_products < family_size:
        raise ValueError(f"num_products must be at least {family_size}, got {num_products}")
    rng = np.random.Generator(np.random.PCG64(seed))
    # Production draws nothing from this stream; other levels choose their named dimensions here.
    level_rng = None if level.is_production else np.random.Generator(np.random.PCG64([seed, level.stream]))
    num_families = -(-num_products // family_size)
    n_cat = len(CATEGORIES)
    a_max = max(len(s.attributes) for s in CATEGORIES)
    o_max = max(len(s.options) for s in CATEGORIES)

    # Per-category lookup tables, so every draw below is one vectorised call.
    type_offset = np.cumsum([0] + [len(s.product_types) for s in CATEGORIES])[:-1]
    n_types = np.array([len(s.product_types) for s in CATEGORIES])
    n_brands = np.array([len(s.brands) for s in CATEGORIES])
    n_attr_values = np.zeros((n_cat, a_max), dtype=np.int64)
    n_option_values = np.zeros((n_cat, o_max), dtype=np.int64)
    for c, spec in enumerate(CATEGORIES):
        for d, (_, values) in enumerate(spec.attributes):
            n_attr_values[c, d] = len(values)
        for d, (_, values) in enumerate(spec.options):
            n_option_values[c, d] = len(values)
    price_lo = np.array([_cents_range(s)[0] for s in CATEGORIES])
    price_hi = np.array([_cents_range(s)[1] for s in CATEGORIES])

    F = num_families
    cat = rng.integers(0, n_cat, F)
    type_id = type_offset[cat] + (rng.random(F) * n_types[cat]).astype(np.int64)
    brand = (rng.random(F) * n_brands[cat]).astype(np.int64)
    attr_n = n_attr_values[cat]  # [F, A]
    attrs = np.where(attr_n > 0, (rng.random((F, a_max)) * np.maximum(attr_n, 1)).astype(np.int64), NO_VALUE)

    # Offered option values: a random subset of at least 2 (or all, when fewer) values per dimension;
    # the task's target value is one random offered value.
    opt_n = n_option_values[cat]  # [F, O]
    masks = np.zeros((F, o_max), dtype=np.int64)
    targets = np.full((F, o_max), NO_VALUE, dtype=np.int64)
    width = 16
    for d in range(o_max):
        keys = rng.random((F, width))
        keys[np.arange(width)[None, :] >= opt_n[:, d : d + 1]] = np.inf
        ranks = np.argsort(np.argsort(keys, axis=1), axis=1)
        low = np.minimum(2, opt_n[:, d])
        k = low + (rng.random(F) * (opt_n[:, d] - low + 1)).astype(np.int64)
        offered = ranks < k[:, None]
        masks[:, d] = (offered * (1 << np.arange(width))[None, :]).sum(axis=1)
        has = opt_n[:, d] > 0
        targets[has, d] = np.argmin(ranks[has], axis=1)

    base_price = price_lo[cat] + (rng.random(F) * (price_hi[cat] - price_lo[cat])).astype(np.int64)
    # Ceiling: 5-35 % above the base price, rounded up to whole dollars (how people state budgets).
    ceiling = (np.ceil(base_price * (1.05 + 0.30 * rng.random(F)) / 100.0) * 100).astype(np.int64)

    # Which dimensions the task names: all of them at the production level.
    attr_order, attr_named = _named_dims(level_rng, (attr_n > 0).sum(axis=1), a_max, level.attributes)
    opt_order, opt_named = _named_dims(level_rng, (opt_n > 0).sum(axis=1), o_max, level.options)

    # Near miss 1: one named attribute dimension changed to another value.
    swap_dim = attr_order[np.arange(F), (rng.random(F) * attr_named).astype(np.int64)]
    swap_n = attr_n[np.arange(F), swap_dim]
    swap_shift = 1 + (rng.random(F) * (swap_n - 1)).astype(np.int64)
    attrs_swap = attrs.copy()
    attrs_swap[np.arange(F), swap_dim] = (attrs[np.arange(F), swap_dim] + swap_shift) % swap_n
    price_swap = (base_price * (0.85 + 0.15 * rng.random(F))).astype(np.int64)

    # Near miss 2: the target value of one named option dimension is not offered.
    miss_dim = opt_order[np.arange(F), (rng.random(F) * np.maximum(opt_named, 1)).astype(np.int64)]
    masks_miss = masks.copy()
    has_opt = opt_named > 0
    rows = np.arange(F)[has_opt]
    masks_miss[rows, miss_dim[has_opt]] &= ~(1 << targets[rows, miss_dim[has_opt]])
    price_miss = np.minimum((base_price * (0.85 + 0.20 * rng.random(F))).astype(np.int64), ceiling)

    # Near miss 3: identical but over the ceiling.
    price_over = (ceiling * (1.08 + 0.42 * rng.random(F))).astype(np.int64) + 1

    ratings = 25 + (rng.random((FAMILY_SIZE, F)) * 26).astype(np.int64)  # 2.5 .. 5.0 stars

    # The roles this level keeps: base first, then its near misses (all four at production).
    roles = [FamilyRole.BASE] + [1 + DISTRACTOR_ROLES.index(r) for r in level.distractors]

    def stack(*per_role: np.ndarray) -> np.ndarray:
        # generation order: family-major (f*family_size + role slot); trimmed to num_products below
        kept = [per_role[r] for r in roles]
        return np.stack(kept, axis=1).reshape((F * family_size,) + per_role[0].shape[1:])

    gen = {
        "type_id": stack(type_id, type_id, type_id, type_id),
        "category_id": stack(cat, cat, cat, cat),
        "brand": stack(brand, brand, brand, brand),
        "attrs": stack(attrs, attrs_swap, attrs, attrs),
        "option_masks": stack(masks, masks, masks_miss, masks),
        "price_cents": stack(base_price, price_swap, price_miss, price_over),
        "rating_tenths": stack(*ratings),
        "role": stack(*(np.full(F, r) for r in range(FAMILY_SIZE))),
        "family": stack(*(np.arange(F) for _ in range(FAMILY_SIZE))),
    }
    dtypes = {
        "type_id": np.uint16, "category_id": np.uint8, "brand": np.uint8, "attrs": np.uint8,
        "option_masks": np.uint16, "price_cents": np.int32, "rating_tenths": np.uint8, "role": np.uint8,
        "family": np.int32,
    }  # fmt: skip
    order = rng.permutation(F * family_size)
    order = order[order < num_products]  # drop the tail of the last family when N % family_size != 0
    # order[new_id] = generation position; the catalog stores products by new id.
    columns = {k: np.ascontiguousarray(v[order]).astype(dtypes[k]) for k, v in gen.items()}
    position_to_id = np.empty(F * family_size, dtype=np.int64)
    position_to_id[order] = np.arange(num_products)
    # What each family's task states: unnamed options and a missing ceiling are marked, not drawn
    # differently, so every level shares the production level's stream of draws.
    task_targets = np.where(_to_mask(opt_order, opt_named), targets, NO_VALUE)
    families = {
        "base": position_to_id[np.arange(F) * family_size].astype(np.int32),
        "ceiling_cents": (ceiling if level.price_ceiling else np.full(F, NO_CEILING)).astype(np.int32),
        "target_options": task_targets.astype(np.uint8),
        "named_attributes": _to_mask(attr_order, attr_named),
    }
    return Catalog(seed=seed, columns=columns, families=families, level=level, tool_offer=tools)

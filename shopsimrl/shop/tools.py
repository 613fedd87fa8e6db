"""The shop's tools: typed methods whose signatures and docstrings are the schema the model sees.

Which tools are offered depends on the state (the dynamic tool schema):
search always; view_product after a search; select_option and add_to_cart once a product has been
viewed; view_cart, remove_from_cart and checkout while the cart is not empty.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from shopsimrl.shop.catalog import Catalog, parse_product_id
from shopsimrl.shop.observations import JsonText, PolicyFailureKind, encode_json_string, json_str_dict
from shopsimrl.shop.state import CartLine, EpisodeState, Finish, SearchRecord
from shopsimrl.shop.toolkit import ToolError, ToolSpec, collect_specs, tool

# Must equal categories.category_names() (a test checks it); a Literal so the schema carries an enum.
CategoryName = Literal[
    "footwear", "tops", "outerwear", "bags", "audio", "lighting", "kitchen", "furniture", "watches", "fitness"
]
PAGE_SIZE = 10


def _after_search(state: EpisodeState) -> bool:
    return state.searched


def _after_view(state: EpisodeState) -> bool:
    return bool(state.viewed)


def _cart_not_empty(state: EpisodeState) -> bool:
    return bool(state.cart)


class ShopTools:
    """Tool methods bound to one catalog and one episode state."""

    def __init__(self, catalog: Catalog, state: EpisodeState):
        self.catalog = catalog
        self.state = state

    # -- helpers (not tools) -----------------------------------------------------------------
    def _product(self, text: str) -> int:
        index = parse_product_id(text, self.catalog.num_products)
        if index is None:
            raise ToolError(f"unknown product id {text!r}; product ids look like P000123")
        return index

    def _viewed(self, text: str) -> int:
        index = self._product(text)
        if index not in self.state.selections:
            raise ToolError(f"product {text} has not been viewed; call view_product first")
        return index

    # Observations are assembled from the catalog's cached JSON fragments (JsonText); each is
    # byte-identical to json.dumps of the dict named in the comment (tests/shop/test_shop_perf_paths.py).
    def _line(self, number: int, line: CartLine) -> str:
        # {"line": n, "product_id": ..., "title": ..., "price": ..., "options": {...}}
        fields = self.catalog.line_fields_json(line.product)
        return f'{{"line": {number}, {fields}, "options": {json_str_dict(line.options_dict())}}}'

    def _cart(self) -> str:
        # the members of {"lines": [line, ...], "total": sum of prices rounded to cents}
        cart = self.state.cart
        lines = ", ".join([self._line(i + 1, line) for i, line in enumerate(cart)])
        total = round(sum([self.catalog.price(line.product) for line in cart]), 2)
        return f'"lines": [{lines}], "total": {total!r}'

    # -- tools -------------------------------------------------------------------------------
    @tool()
    def search(
        self,
        keywords: str,
        category: CategoryName | None = None,
        max_price: float | None = None,
        min_rating: float | None = None,
        page: int = 1,
    ) -> JsonText:
        """Search the catalog by keywords; results are ranked by how many keywords a title contains.

        Args:
            keywords: Words to look for in product titles, e.g. "waterproof leather hiking boots".
            category: Only return products of this category.
            max_price: Only return products costing at most this many dollars.
            min_rating: Only return products rated at least this many stars (1 to 5).
            page: Results page to return, starting at 1; each page holds 10 products.
        """
        if page < 1:
            raise ToolError(f"page must be at least 1, got {page}", PolicyFailureKind.BAD_ARGUMENTS)
        if max_price is not None and max_price <= 0:
            raise ToolError(f"max_price must be positive, got {max_price}", PolicyFailureKind.BAD_ARGUMENTS)
        found = self.catalog.search(
            keywords,
            category=category,
            max_price=max_price,
            min_rating=min_rating,
            page=page,
            page_size=PAGE_SIZE,
        )
        self.state.searched = True
        self.state.last_search = SearchRecord(
            keywords, category, max_price, min_rating, page, found.pages, tuple(found.product_indices)
        )
        # {"page": ..., "pages": ..., "total_results": ..., "results": [catalog.search_row(i), ...]}
        rows = self.catalog.search_rows_json(found.product_indices)
        return JsonText(
            f'{{"page": {page}, "pages": {found.pages}, "total_results": {found.total}, "results": [{rows}]}}'
        )

    @tool(offered_when=_after_search)
    def view_product(self, product_id: str) -> JsonText:
        """Open a product page: price, rating, attributes and the option values on offer.

        Args:
            product_id: The product id from a search result, e.g. "P000123".
        """
        index = self._product(product_id)
        state = self.state
        if index not in state.selections:
            state.viewed.append(index)
            state.selections[index] = {}
        state.current = index
        # {**catalog.product(index).page(), "selected": the selections so far}
        selected = json_str_dict(state.selections[index])
        return JsonText(f'{self.catalog.page_json_head(index)}, "selected": {selected}}}')

    @tool(offered_when=_after_view)
    def select_option(self, product_id: str, option: str, value: str) -> JsonText:
        """Choose an option value (such as a size or colour) for a product you have viewed.

        Args:
            product_id: A product you have viewed, e.g. "P000123".
            option: The option name as shown on the product page, e.g. "size".
            value: One of the values the product page lists for that option, e.g. "9".
        """
        index = self._viewed(product_id)
        if not self.catalog.offers_option_value(index, option, value):
            offered = self.catalog.options_of(index)  # built only for the error message
            if option not in offered:
                names = ", ".join(offered) or "none"
                raise ToolError(f"product {product_id} has no option {option!r}; its options: {names}")
            raise ToolError(
                f"{option} {value!r} is not offered for {product_id}; offered: {', '.join(offered[option])}"
            )
        selected = self.state.selections[index]
        selected[option] = value
        # {"product_id": product_id, "selected": selections}
        return JsonText(
            f'{{"product_id": {encode_json_string(product_id)}, "selected": {json_str_dict(selected)}}}'
        )

    @tool(offered_when=_after_view)
    def add_to_cart(self, product_id: str) -> JsonText:
        """Add a product you have viewed to the cart, with the options selected for it so far.

        Args:
            product_id: A product you have viewed, e.g. "P000123".
        """
        index = self._viewed(product_id)
        selected = self.state.selections[index]
        order = self.catalog.option_names(index)
        line = CartLine(index, tuple((name, selected[name]) for name in order if name in selected))
        self.state.cart.append(line)
        # {"added": line, "cart_lines": n[, "note": ...]}
        n = len(self.state.cart)
        result = f'{{"added": {self._line(n, line)}, "cart_lines": {n}'
        unselected = [name for name in order if name not in selected]
        if unselected:
            note = encode_json_string(f"no value selected for: {', '.join(unselected)}")
            result += f', "note": {note}'
        return JsonText(result + "}")

    @tool(offered_when=_cart_not_empty)
    def remove_from_cart(self, product_id: str) -> JsonText:
        """Remove a product from the cart (its most recently added line).

        Args:
            product_id: The id of a product in the cart, e.g. "P000123".
        """
        index = self._product(product_id)
        for i in range(len(self.state.cart) - 1, -1, -1):
            if self.state.cart[i].product == index:
                del self.state.cart[i]
                return JsonText(f'{{"removed": {encode_json_string(product_id)}, {self._cart()}}}')
        raise ToolError(f"product {product_id} is not in the cart")

    @tool(offered_when=_cart_not_empty)
    def view_cart(self) -> JsonText:
        """Show the cart: each line's product, selected options and price, and the total."""
        return JsonText(f"{{{self._cart()}}}")

    @tool(offered_when=_cart_not_empty)
    def checkout(self) -> JsonText:
        """Buy everything in the cart and end the episode. The task asks for exactly one product."""
        self.state.finish = Finish.CHECKOUT
        return JsonText(f'{{"order_placed": true, {self._cart()}}}')


@cache
def tool_specs() -> dict[str, ToolSpec]:
    """The specs of every shop tool (generated once from the ShopTools methods)."""
    return collect_specs(ShopTools)

"""A scripted expert that solves every task by construction (it reads the privileged gold).

It acts from the current state, not from a fixed script, so after a noisy action it recovers:
remove wrong cart lines, re-select options, search again. Its searches use only words of the
instruction, so its trajectories look like ones a policy could produce (demos and warm starts).
With `noise > 0` each action is, with that probability, a random wrong one instead.
"""

from __future__ import annotations

import random

from shopsimrl.shop.catalog import product_id
from shopsimrl.shop.environment import ShopEnv
from shopsimrl.shop.tool_calls import ToolCall


class ExpertPolicy:
    def __init__(self, noise: float = 0.0, seed: int = 0):
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        self.noise = noise
        self._rng = random.Random(seed)

    def next_action(self, env: ShopEnv) -> ToolCall:
        if self.noise > 0.0 and self._rng.random() < self.noise:
            return self._noisy_action(env)
        return self._expert_action(env)

    @staticmethod
    def query(env: ShopEnv) -> str:
        gold = env.task.gold
        return " ".join([*gold.attributes.values(), gold.product_type])

    def _expert_action(self, env: ShopEnv) -> ToolCall:
        task, state = env.task, env.state
        gold = task.gold
        gold_ids = set(gold.gold_product_ids)
        wanted_options = tuple(gold.options.items())

        def correct(line) -> bool:
            return product_id(line.product) in gold_ids and line.options == wanted_options

        for line in state.cart:
            if not correct(line):
                return ToolCall("remove_from_cart", {"product_id": product_id(line.product)})
        if len(state.cart) > 1:
            return ToolCall("remove_from_cart", {"product_id": product_id(state.cart[-1].product)})
        if len(state.cart) == 1:
            return ToolCall("checkout", {})

        viewed_gold = [i for i in state.viewed if product_id(i) in gold_ids]
        if viewed_gold:
            target = viewed_gold[0]
            pid = product_id(target)
            selected = state.selections[target]
            for name, value in gold.options.items():
                if selected.get(name) != value:
                    return ToolCall("select_option", {"product_id": pid, "option": name, "value": value})
            return ToolCall("add_to_cart", {"product_id": pid})

        query = self.query(env)
        ceiling = gold.price_ceiling
        # A task without a ceiling (an easier difficulty level) is searched without max_price.
        search = {"keywords": query} if ceiling is None else {"keywords": query, "max_price": ceiling}
        last = state.last_search
        if (
            last is not None
            and last.keywords == query
            and last.max_price == ceiling
            and last.category is None
        ):
            for index in last.results:
                if product_id(index) in gold_ids:
                    return ToolCall("view_product", {"product_id": product_id(index)})
            if last.page < last.pages:
                return ToolCall("search", {**search, "page": last.page + 1})
            # Defensive: by construction the base product matches every query word and the
            # ceiling, so it is on some page; fall back to opening it directly.
            return ToolCall("view_product", {"product_id": gold.family_product_ids["base"]})
        return ToolCall("search", search)

    def _noisy_action(self, env: ShopEnv) -> ToolCall:
        rng = self._rng
        state, catalog = env.state, env.catalog
        family = env.task.gold.family_product_ids
        near_misses = sorted(v for k, v in family.items() if k != "base")
        # Every production family has near misses; a level may keep none (or trim the last family).
        distractor = rng.choice(near_misses) if near_misses else family["base"]
        choice = rng.randrange(7)
        if choice == 0:
            return ToolCall("browse_aisles", {})  # unknown tool
        if choice == 1:
            return ToolCall("view_product", {})  # missing argument
        if choice == 2:
            return ToolCall("view_product", {"product_id": distractor})  # a near miss
        if choice == 3 and state.viewed:
            viewed = rng.choice(state.viewed)
            options = catalog.options_of(viewed)
            if options:
                name = rng.choice(sorted(options))
                return ToolCall("select_option", {"product_id": product_id(viewed), "option": name,
                                                  "value": rng.choice(options[name])})  # fmt: skip
        if choice == 4 and state.viewed:
            return ToolCall("add_to_cart", {"product_id": product_id(rng.choice(state.viewed))})
        if choice == 5:
            return ToolCall("checkout", {})  # often not offered yet
        return ToolCall("search", {"keywords": rng.choice(["gift", "cheap", "blue", "best seller"])})

"""The fast paths of the dispatch loop give exactly what the general paths give.

Observations are assembled from cached JSON fragments, tool calls of the common shape skip the
general block scanner, and arguments go through a per-tool compiled check before the general
validator: each is compared here with the straightforward computation it replaces.
"""

from __future__ import annotations

import json
import random

import pytest

from shopsimrl.shop import ExpertPolicy, ShopEnv, ToolCall, format_tool_call, generate_catalog, load_split
from shopsimrl.shop import catalog as catalog_module
from shopsimrl.shop.observations import JsonText, json_str_dict, render_observation
from shopsimrl.shop.tool_calls import parse_tool_call, parse_tool_calls
from shopsimrl.shop.toolkit import validate_arguments
from shopsimrl.shop.tools import tool_specs


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(seed=5, num_products=2000)


def test_every_product_fragment_equals_json_dumps(catalog):
    for i in range(catalog.num_products):
        assert catalog.search_row_json(i) == json.dumps(catalog.search_row(i))
        assert catalog.page_json_head(i) + "}" == json.dumps(catalog.product(i).page())
        line = {
            "product_id": catalog.product(i).product_id,
            "title": catalog.title(i),
            "price": catalog.price(i),
        }
        assert "{" + catalog.line_fields_json(i) + "}" == json.dumps(line)


def test_json_text_renders_as_a_plain_identical_string():
    rendered = render_observation(JsonText('{"a": 1}'))
    assert rendered == '{"a": 1}'
    assert type(rendered) is str
    assert render_observation({"a": [1.5, True, None]}) == '{"a": [1.5, true, null]}'


@pytest.mark.parametrize(
    "values", [{}, {"size": "9"}, {"colour": "navy blue", "size": "XL"}, {'q"u\\o': "caf\u00e9\n"}]
)
def test_json_str_dict_equals_json_dumps(values):
    assert json_str_dict(values) == json.dumps(values)


def test_fragment_caches_are_bounded_and_fragments_stay_exact(monkeypatch):
    monkeypatch.setattr(catalog_module, "PAGE_CACHE_ENTRIES", 8)
    monkeypatch.setattr(catalog_module, "ROW_CACHE_ENTRIES", 5)
    small = generate_catalog(seed=2, num_products=40)
    for i in list(range(40)) * 2:
        assert small.page_json_head(i) + "}" == json.dumps(small.product(i).page())
        assert small.search_row_json(i) == json.dumps(small.search_row(i))
        assert len(small._page_json_head) <= 8
        assert len(small._row_json) <= 5


def test_search_rows_json_equals_the_joined_rows_and_survives_cache_clears(monkeypatch):
    monkeypatch.setattr(catalog_module, "ROW_CACHE_ENTRIES", 5)
    small = generate_catalog(seed=3, num_products=60)
    rng = random.Random(0)
    for _ in range(40):  # pages of up to 10 rows against a 5-row cache: it clears mid-page
        page = rng.sample(range(60), rng.randint(0, 10))
        assert small.search_rows_json(page) == ", ".join(json.dumps(small.search_row(i)) for i in page)
        assert len(small._row_json) <= 5
    # Product pages stay exact once the per-entry fragment cache is warm (second pass over all pages).
    for i in list(range(60)) * 2:
        assert small.page_json_head(i) + "}" == json.dumps(small.product(i).page())


TEXTS = [
    '<tool_call>\n{"name": "search", "arguments": {"keywords": "mug"}}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"keywords": "mug"}}\n</tool_call>\n  ',
    '<tool_call>{"name": "view_cart", "arguments": {}}</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"keywords": "mug"}, "id": 3}\n</tool_call>',
    '<tool_call>\n{"name": "search"}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": "{\\"keywords\\": \\"mug\\"}"}\n</tool_call>',
    "<tool_call>\n{not json}\n</tool_call>",
    "<tool_call>\n\n</tool_call>",
    "<tool_call></tool_call>",
    "<tool_call>\n<function=search>\n<parameter=keywords>\nmug\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=search>\n<parameter=keywords>\nmug\n</function>\n</tool_call>",
    '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call><tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call><|im_end|>',
    '<think>\nok\n</think>\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "a", "arguments": {"x": "</tool_call>"}}\n</tool_call>',
]


@pytest.mark.parametrize("text", TEXTS)
def test_parse_fast_path_agrees_with_the_general_parser(text):
    general = parse_tool_calls(text)
    expected = general[0] if isinstance(general, list) and len(general) == 1 else None
    got = parse_tool_call(text)
    if expected is not None:
        assert got == expected
    elif isinstance(general, list):
        assert got.message == f"expected exactly one tool call per turn, found {len(general)}"
    else:
        assert got == general


ARGUMENTS = [
    {"keywords": "boots"},
    {"keywords": "boots", "page": 2, "max_price": 80, "min_rating": 4.5, "category": "footwear"},
    {"keywords": "boots", "category": "toys"},
    {"keywords": "boots", "page": True},
    {"keywords": "boots", "page": 2.0},
    {"keywords": "boots", "max_price": None},
    {"keywords": 3},
    {"page": 1},
    {"keywords": "boots", "colour": "red"},
    {"product_id": "P000001"},
    {"product_id": "P000001", "option": "size", "value": "9"},
    {"product_id": "P000001", "option": "size"},
    {"product_id": ["P000001"]},
    {},
]


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_compiled_validator_agrees_with_validate_arguments(arguments):
    for name, spec in tool_specs().items():
        general = validate_arguments(spec, ToolCall(name, arguments))
        fast = spec.fast_validator(arguments)
        if fast is not None:
            assert fast == general
        else:  # the fast path declines exactly the calls the general path rejects or normalises
            assert isinstance(general, str) or any(v is None for v in arguments.values())


def test_observations_are_canonical_json_and_schema_flags_match_offered_tools(catalog):
    """Over noisy episodes in both call formats: every observation is exactly json.dumps of its
    own parse, and tool_schema_changed/tool_schema_hash match offered tools recomputed each turn."""
    env = ShopEnv(catalog, max_turns=10)
    rng = random.Random(0)
    steps = 0
    for i, task in enumerate(load_split(catalog, "train", limit=40)):
        expert = ExpertPolicy(noise=0.4, seed=i)
        _, info = env.reset(task=task, seed=i)
        assert info["tool_schema_hash"] == env.tool_schema_hash()
        done = False
        while not done:
            before = [t["function"]["name"] for t in env.offered_tools()]
            text = format_tool_call(expert.next_action(env), rng.choice(["json", "xml"]))
            observation, _, terminated, truncated, info = env.step(text)
            assert json.dumps(json.loads(observation)) == observation
            after = [t["function"]["name"] for t in env.offered_tools()]
            assert info["tool_schema_changed"] == (before != after)
            assert info["tool_schema_hash"] == env.tool_schema_hash()
            done = terminated or truncated
            steps += 1
    assert steps > 150


@pytest.mark.parametrize(
    "body",
    ['\ufeff{"name": "a", "arguments": {}}', '{"name": "a", "arguments": {}} {}', '{"name": "a",', "nul"],
)
def test_json_body_errors_are_json_loads_own_messages(body):
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(body)
    e = caught.value
    got = parse_tool_call(f"<tool_call>\n{body}\n</tool_call>")
    assert got.message == f"tool call is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"


def test_option_checks_agree_with_options_of(catalog):
    for i in range(0, catalog.num_products, 7):
        offered = catalog.options_of(i)
        assert catalog.option_names(i) == list(offered)
        spec = catalog.category_of(i)
        for name, values in spec.options:
            for value in (*values, "nonexistent"):
                assert catalog.offers_option_value(i, name, value) == (value in offered[name])
        assert catalog.offers_option_value(i, "no-such-option", "9") is False

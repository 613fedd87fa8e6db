"""Tool schemas generated from signatures and docstrings; argument validation messages."""

from __future__ import annotations

import jsonschema
import pytest

from shopsimrl.shop import ToolCall, category_names, tool_specs
from shopsimrl.shop.toolkit import ToolError, build_spec, tool, validate_arguments


def test_view_product_schema_is_generated_from_signature_and_docstring():
    assert tool_specs()["view_product"].schema == {
        "type": "function",
        "function": {
            "name": "view_product",
            "description": "Open a product page: price, rating, attributes and the option values on offer.",
            "parameters": {
                "type": "object",
                "properties": {
                    "product_id": {
                        "type": "string",
                        "description": 'The product id from a search result, e.g. "P000123".',
                    }
                },
                "required": ["product_id"],
                "additionalProperties": False,
            },
        },
    }


def test_search_schema_types_optional_enum_and_default():
    params = tool_specs()["search"].schema["function"]["parameters"]
    assert params["required"] == ["keywords"]
    props = params["properties"]
    assert props["keywords"]["type"] == "string"
    assert props["category"] == {"type": "string", "description": "Only return products of this category.",
                                 "enum": list(category_names())}  # fmt: skip
    assert props["max_price"]["type"] == "number" and "default" not in props["max_price"]
    assert props["page"] == {"type": "integer", "default": 1,
                             "description": "Results page to return, starting at 1; each page holds 10 products."}  # fmt: skip


def test_every_schema_is_a_valid_json_schema_and_tools_cover_the_issue():
    assert list(tool_specs()) == ["search", "view_product", "select_option", "add_to_cart", "remove_from_cart",
                                  "view_cart", "checkout"]  # fmt: skip
    for spec in tool_specs().values():
        jsonschema.Draft202012Validator.check_schema(spec.schema["function"]["parameters"])


def test_schema_generation_refuses_undocumented_parameters():
    class Bad:
        @tool()
        def poke(self, target: str) -> dict:
            """Poke something."""
            return {}

    with pytest.raises(TypeError, match="tool poke: parameter target is not described under Args:"):
        build_spec(Bad.poke)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"keywords": "boots"}, {"keywords": "boots"}),
        ({"keywords": "boots", "max_price": 80}, {"keywords": "boots", "max_price": 80.0}),
        ({"keywords": "boots", "category": None}, {"keywords": "boots"}),
        ({}, "missing required argument(s) for search: keywords"),
        (
            {"keywords": "boots", "colour": "red"},
            "unexpected argument(s) for search: colour; allowed: keywords, category, max_price, min_rating, page",
        ),
        ({"keywords": 3}, "argument keywords of search must be a string, got integer"),
        ({"keywords": "x", "page": "2"}, "argument page of search must be an integer, got string"),
        ({"keywords": "x", "page": True}, "argument page of search must be an integer, got boolean"),
        (
            {"keywords": "x", "max_price": "cheap"},
            "argument max_price of search must be a number, got string",
        ),
        (
            {"keywords": "x", "category": "shoes"},
            "argument category of search must be one of: " + ", ".join(category_names()) + "; got 'shoes'",
        ),
    ],
)
def test_validate_arguments(arguments, expected):
    assert validate_arguments(tool_specs()["search"], ToolCall("search", arguments)) == expected


def test_xml_text_arguments_are_converted_to_declared_types():
    spec = tool_specs()["search"]
    call = ToolCall("search", {"keywords": "42", "page": " 2 ", "max_price": "80.5"}, text_arguments=True)
    assert validate_arguments(spec, call) == {"keywords": "42", "page": 2, "max_price": 80.5}
    bad = ToolCall("search", {"keywords": "x", "page": "two"}, text_arguments=True)
    assert validate_arguments(spec, bad) == "argument page of search must be an integer, got 'two'"


def test_tool_error_defaults_to_invalid_action():
    assert ToolError("x").kind.value == "invalid_action"


@pytest.mark.parametrize(
    ("arguments", "text", "expected"),
    [
        ({"page": 10**400}, False, "argument page of search is out of range: integers must lie in [-2**63, 2**63)"),
        ({"page": -(2**63) - 1}, False, "argument page of search is out of range: integers must lie in [-2**63, 2**63)"),
        ({"max_price": 10**400}, False, "argument max_price of search is out of range: numbers must be finite 64-bit floats"),
        ({"max_price": float("nan")}, False, "argument max_price of search must be a finite number, got nan"),
        ({"max_price": float("-inf")}, False, "argument max_price of search must be a finite number, got -inf"),
        ({"max_price": "1e999"}, True, "argument max_price of search must be a finite number, got inf"),
        ({"max_price": "NaN"}, True, "argument max_price of search must be a finite number, got nan"),
        ({"page": "9" * 400}, True, "argument page of search is out of range: integers must lie in [-2**63, 2**63)"),
        ({"page": "9" * 5000}, True, "argument page of search must be an integer, got a text of 5000 characters"),
    ],
)
def test_numbers_the_shop_cannot_hold_are_bad_arguments(arguments, text, expected):
    call = ToolCall("search", {"keywords": "mug", **arguments}, text_arguments=text)
    assert validate_arguments(tool_specs()["search"], call) == expected

"""The tool-call parser: both production syntaxes, and every malformed form with its exact message."""

from __future__ import annotations

import pytest

from shopsimrl.shop import ParseFailure, ToolCall, parse_tool_call, parse_tool_calls


def test_qwen3_json_form():
    text = '<tool_call>\n{"name": "search", "arguments": {"keywords": "mesh running shoes", "page": 2}}\n</tool_call>'
    assert parse_tool_call(text) == ToolCall("search", {"keywords": "mesh running shoes", "page": 2})


def test_qwen35_xml_form_keeps_values_as_text():
    text = (
        "<tool_call>\n<function=search>\n<parameter=keywords>\nmesh running shoes\n</parameter>\n"
        "<parameter=page>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    assert parse_tool_call(text) == ToolCall(
        "search", {"keywords": "mesh running shoes", "page": "2"}, text_arguments=True
    )


def test_xml_multiline_value_and_no_parameters():
    text = "<tool_call>\n<function=search>\n<parameter=keywords>\nline one\nline two\n</parameter>\n</function>\n</tool_call>"
    assert parse_tool_call(text).arguments == {"keywords": "line one\nline two"}
    assert parse_tool_call("<tool_call>\n<function=view_cart>\n</function>\n</tool_call>") == ToolCall(
        "view_cart", {}, text_arguments=True
    )


def test_reasoning_before_and_end_tokens_after_are_allowed():
    text = '<think>\nI should search.\n</think>\n\nLet me look.\n<tool_call>\n{"name": "view_cart", "arguments": {}}\n</tool_call><|im_end|>\n'
    assert parse_tool_call(text) == ToolCall("view_cart", {})


def test_double_encoded_arguments_string_is_accepted():
    text = '<tool_call>{"name": "view_product", "arguments": "{\\"product_id\\": \\"P000001\\"}"}</tool_call>'
    assert parse_tool_call(text) == ToolCall("view_product", {"product_id": "P000001"})


def test_several_calls_are_listed_but_one_is_required_per_turn():
    one = '<tool_call>\n{"name": "view_cart", "arguments": {}}\n</tool_call>'
    calls = parse_tool_calls(one + "\n" + one)
    assert calls == [ToolCall("view_cart", {}), ToolCall("view_cart", {})]
    assert parse_tool_call(one + "\n" + one) == ParseFailure(
        "expected exactly one tool call per turn, found 2"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "I would search for boots.",
            "no tool call found; reply with exactly one <tool_call>...</tool_call> block",
        ),
        ("", "no tool call found; reply with exactly one <tool_call>...</tool_call> block"),
        ('{"name": "x"}</tool_call>', "found </tool_call> without an opening <tool_call>"),
        (
            '<tool_call>{"name": "search", "arguments": {}}',
            "<tool_call> block number 1 is not closed with </tool_call>",
        ),
        ("<tool_call>\n\n</tool_call>", "<tool_call> block number 1 is empty"),
        (
            '<tool_call>{"name": "search", "arguments": {"keywords": "x"}</tool_call>',
            "tool call is not valid JSON: Expecting ',' delimiter at line 1 column 50",
        ),
        ('<tool_call>["search"]</tool_call>', "tool call JSON must be an object, got list"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'tool call JSON has no "name" key'),
        ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', '"name" must be a non-empty string, got 3'),
        (
            '<tool_call>{"name": "view_cart"}</tool_call>',
            'tool call "view_cart" has no "arguments" key; use "arguments": {} for no arguments',
        ),
        (
            '<tool_call>{"name": "search", "arguments": ["boots"]}</tool_call>',
            '"arguments" of "search" must be a JSON object, got list',
        ),
        (
            '<tool_call>{"name": "search", "arguments": null}</tool_call>',
            '"arguments" of "search" must be a JSON object, got null',
        ),
        (
            '<tool_call>{"name": "search", "arguments": "boots"}</tool_call>',
            '"arguments" of "search" must be a JSON object, got string',
        ),
        (
            '<tool_call>{"name": "search", "arguments": {}, "id": 1}</tool_call>',
            "tool call JSON has unexpected key(s): id",
        ),
        (
            '<tool_call>{"name": "view_cart", "arguments": {}}</tool_call> Done!',
            "text after </tool_call> is not allowed; end the turn right after the tool call",
        ),
        (
            '<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b", "arguments": {}}</tool_call>',
            "<tool_call> block number 1 is not closed before the next <tool_call>",
        ),
        ("<tool_call><function=search</tool_call>", "<function=NAME> tag is not closed with '>'"),
        (
            "<tool_call><function=>\n</function></tool_call>",
            "<function=NAME> has an empty or multi-line function name",
        ),
        (
            "<tool_call><function=search>\n<parameter=keywords>\nx\n</parameter>\n</tool_call>",
            "<function=search> is not closed with </function>",
        ),
        (
            "<tool_call><function=search>\nkeywords: boots\n</function></tool_call>",
            "unexpected text inside <function=search> outside <parameter=...> blocks",
        ),
        (
            "<tool_call><function=search>\n<parameter=keywords>\nx\n</function></tool_call>",
            "<parameter=keywords> in the call of search is not closed with </parameter>",
        ),
        (
            "<tool_call><function=search>\n<parameter=page>\n1\n</parameter>\n<parameter=page>\n2\n</parameter>\n</function></tool_call>",
            "parameter page is given twice in the call of search",
        ),
        (
            "<tool_call><function=search>\n<parameter=>\n1\n</parameter>\n</function></tool_call>",
            "a <parameter=...> tag in the call of search has an empty name",
        ),
        (
            "<tool_call><function=search>\n</function>\nthanks</tool_call>",
            "unexpected text after </function> in the call of search",
        ),
    ],
)
def test_malformed_output_gives_exact_parse_failure(text, message):
    assert parse_tool_call(text) == ParseFailure(message)


def test_parser_never_raises_on_arbitrary_text():
    import random

    rng = random.Random(0)
    alphabet = ['<tool_call>', '</tool_call>', '<function=', '</function>', '<parameter=', '</parameter>',
                '{', '}', '"name"', '"arguments"', ':', ',', '"x"', '>', '\n', ' ', '[', ']', 'null', '<|im_end|>']  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 25)))
        result = parse_tool_calls(text)
        assert isinstance(result, ParseFailure | list)


def _search(arguments: str) -> str:
    return '<tool_call>\n{"name": "search", "arguments": ' + arguments + "}\n</tool_call>"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"keywords": "mug", "max_price": NaN}', "tool call JSON holds NaN, which is not a JSON number"),
        ('{"keywords": "mug", "max_price": -Infinity}', "tool call JSON holds -Infinity, which is not a JSON number"),
        ('{"keywords": "mug", "max_price": Infinity}', "tool call JSON holds Infinity, which is not a JSON number"),
        ('{"keywords": "mug", "max_price": 1e999}', "tool call JSON holds the number 1e999, which is out of range"),
        ('{"keywords": "mug", "max_price": -2.5E+400}', "tool call JSON holds the number -2.5E+400, which is out of range"),
        ('{"keywords": "mug", "page": ' + "9" * 5000 + "}", "tool call JSON holds an integer of more than 4300 digits"),
        ('"{\\"keywords\\": \\"mug\\", \\"max_price\\": NaN}"', "tool call JSON holds NaN, which is not a JSON number"),
        ('{"keywords": ' + "[" * 100_000 + "]" * 100_000 + "}", "tool call JSON is nested deeper than 32 levels"),
        ('{"keywords": ' + "{" * 100_000, "tool call JSON is nested deeper than 32 levels"),
    ],
)
def test_numbers_the_shop_cannot_hold_and_deep_nesting_are_parse_failures(arguments, message):
    assert parse_tool_call(_search(arguments)) == ParseFailure(message)


def test_deep_nesting_of_the_whole_call_and_in_a_double_encoded_string():
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_tool_call(f"<tool_call>{deep}</tool_call>") == ParseFailure(
        "tool call JSON is nested deeper than 32 levels"
    )
    encoded = '"' + "[" * 100_000 + '"'
    assert parse_tool_call(_search(encoded)) == ParseFailure("tool call JSON is nested deeper than 32 levels")


def test_nesting_up_to_the_limit_and_brackets_inside_strings_are_fine():
    inner = "[" * 30 + "]" * 30  # 32 levels with the call object and the arguments object
    assert parse_tool_call(_search('{"keywords": ' + inner + "}")) == ToolCall("search", {"keywords": eval(inner)})
    brackets = "{[" * 100
    assert parse_tool_call(_search(f'{{"keywords": "{brackets}"}}')) == ToolCall("search", {"keywords": brackets})
    assert parse_tool_call(_search('{"keywords": "x", "max_price": 1e308}')).arguments["max_price"] == 1e308

"""ChatRenderer: the opening by the tokenizer's chat template, later turns appended token-exactly."""

from __future__ import annotations

import pytest
from chat_templates import QWEN3_STYLE, QWEN35_STYLE

from shopsimrl.models.tiny import tiny_tokenizer
from shopsimrl.rollout.prompting import ChatRenderer, initial_messages
from shopsimrl.shop import render_chat, tool_response_turn

TOOLS = [{"type": "function", "function": {"name": "view_cart", "description": "Show the cart.",
                                           "parameters": {"type": "object", "properties": {}}}}]
CALL = "<tool_call>\n<function=view_cart>\n</function>\n</tool_call>"


def _tokenizer(template: str | None = None):
    tokenizer = tiny_tokenizer()
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


@pytest.mark.parametrize(
    ("template", "fmt", "renders_tools", "header"),
    [
        (None, "json", False, "<|im_start|>assistant\n"),
        (None, "xml", False, "<|im_start|>assistant\n"),
        (QWEN3_STYLE, "json", True, "<|im_start|>assistant\n"),
        (QWEN35_STYLE, "xml", True, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ],
)
def test_tool_support_and_header_come_from_the_template(template, fmt, renders_tools, header):
    renderer = ChatRenderer(_tokenizer(template), fmt)
    assert (renderer.renders_tools, renderer.assistant_header) == (renders_tools, header)


@pytest.mark.parametrize("skills", [[], ["Check the size."]])
def test_a_chatml_template_without_tools_gives_the_demo_prompt_unchanged(skills):
    """The fallback puts our tool block into the system message: with the JSON format (the demo's)
    on a plain ChatML template (SmolLM2's, the tiny model's) that is exactly `render_chat`."""
    messages = initial_messages(skills, "Buy a mug.")
    later = [{"role": "assistant", "content": '<tool_call>\n{"name": "view_cart", "arguments": {}}\n</tool_call>'},
             {"role": "tool", "content": '{"lines": []}'}]
    renderer = ChatRenderer(_tokenizer(), "json")
    for conversation in (messages, messages + later):
        assert renderer.prompt_text(conversation, TOOLS) == render_chat(conversation, TOOLS, add_generation_prompt=True)


def test_a_template_that_renders_tools_writes_the_system_turn():
    tokenizer = _tokenizer(QWEN35_STYLE)
    renderer = ChatRenderer(tokenizer, "xml")
    messages = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "Buy a mug."}]
    later = [{"role": "assistant", "content": CALL}, {"role": "tool", "content": "OBS"}]
    opening = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False,
                                            enable_thinking=False)
    assert opening.startswith("<|im_start|>system\n# Functions\n\nThese functions are available:\n\n<tools>\n")
    assert opening.endswith("and stop.\n\nSYS<|im_end|>\n<|im_start|>user\nBuy a mug.<|im_end|>\n"
                            "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert renderer.prompt_text(messages, TOOLS) == opening
    # Later turns: the model's text verbatim, our ChatML pieces, the template's header.
    assert renderer.prompt_text(messages + later, TOOLS) == (
        opening + CALL + "<|im_end|>\n" + tool_response_turn("OBS") + renderer.assistant_header
    )


def test_continuation_text_with_and_without_the_models_end_of_turn():
    renderer = ChatRenderer(_tokenizer(QWEN35_STYLE), "xml")
    messages = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "U"}]
    tool = {"role": "tool", "content": "OBS"}
    after = "\n<|im_start|>user\n<tool_response>\nOBS\n</tool_response><|im_end|>\n" + renderer.assistant_header
    assert renderer.continuation_text(messages, CALL, [tool], model_closed_turn=True) == after
    assert renderer.continuation_text(messages, CALL, [tool], model_closed_turn=False) == "<|im_end|>" + after
    # Deeper in a segment: the same pieces after the earlier turns.
    deeper = [*messages, {"role": "assistant", "content": CALL}, tool]
    assert renderer.continuation_text(deeper, CALL, [tool], model_closed_turn=True) == after


def test_a_conversation_must_open_with_system_and_user():
    renderer = ChatRenderer(_tokenizer(), "json")
    with pytest.raises(ValueError, match=r"^a conversation opens with a system and a user message; got roles \['user'\]$"):
        renderer.prompt_text([{"role": "user", "content": "U"}], TOOLS)


def test_a_generation_prompt_that_does_not_extend_the_conversation_is_refused():
    template = "{% for m in messages %}{{ m.role }};{% endfor %}{% if not add_generation_prompt %}!{% endif %}"
    with pytest.raises(ValueError) as error:
        ChatRenderer(_tokenizer(template), "json")
    assert str(error.value) == (
        "the chat template's generation prompt is not an extension of the conversation: 'system;user;!' became 'system;user;'"
    )

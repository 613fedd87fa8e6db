"""Chat rendering: exact Qwen-style text, prefix stability, and the pieces the rollout appends."""

from __future__ import annotations

import pytest

from shopsimrl.shop import (
    BASE_SYSTEM_PROMPT,
    ExpertPolicy,
    ShopEnv,
    ToolCall,
    ToolCallFormat,
    assistant_header,
    continuation_after_assistant,
    format_tool_call,
    load_split,
    parse_tool_call,
    render_chat,
    system_prompt,
    tool_response_turn,
)


def test_format_tool_call_exact_text_both_formats():
    call = ToolCall("select_option", {"product_id": "P000001", "option": "size", "value": "9"})
    assert format_tool_call(call) == (
        '<tool_call>\n{"name": "select_option", "arguments": {"product_id": "P000001", "option": "size", "value": "9"}}\n</tool_call>'
    )
    assert format_tool_call(call, "xml") == (
        "<tool_call>\n<function=select_option>\n<parameter=product_id>\nP000001\n</parameter>\n"
        "<parameter=option>\nsize\n</parameter>\n<parameter=value>\n9\n</parameter>\n</function>\n</tool_call>"
    )


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_formatted_calls_parse_back_and_step_identically(catalog, fmt):
    task = load_split(catalog, "train", limit=1)[0]
    a, b = ShopEnv(catalog), ShopEnv(catalog)
    a.reset(task=task, seed=0)
    b.reset(task=task, seed=0)
    expert = ExpertPolicy()
    while True:
        call = expert.next_action(a)
        parsed = parse_tool_call(format_tool_call(call, fmt))
        assert parsed.name == call.name
        out_a = a.step(call)
        out_b = b.step(format_tool_call(call, fmt))  # XML text args are converted back to the schema types
        assert out_a == out_b and a.state_hash() == b.state_hash()
        if out_a[2]:
            break


def test_system_prompt_appends_skills_in_order():
    assert system_prompt([]) == BASE_SYSTEM_PROMPT
    assert system_prompt(["Check options.", "  ", "Mind the budget.\n"]) == (
        BASE_SYSTEM_PROMPT + "\n\n# Shopping skills\n\nCheck options.\n\nMind the budget."
    )


def test_render_chat_exact_json_form():
    tools = [{"type": "function", "function": {"name": "view_cart", "description": "d", "parameters": {}}}]
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Buy a mug."},
        {"role": "assistant", "content": '<tool_call>\n{"name": "view_cart", "arguments": {}}\n</tool_call>'},
        {"role": "tool", "content": '{"lines": []}'},
    ]
    text = render_chat(messages, tools, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nSYS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "view_cart", "description": "d", "parameters": {}}}\n</tools>\n\n'
        "For each function call, write a JSON object with the function name and its arguments inside "
        "<tool_call></tool_call> tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nBuy a mug.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "view_cart", "arguments": {}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"lines": []}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )


def test_xml_form_puts_tools_first_and_opens_turns_with_empty_think():
    tools = [{"type": "function", "function": {"name": "checkout", "description": "d", "parameters": {}}}]
    text = render_chat([{"role": "system", "content": "SYS"}, {"role": "user", "content": "U"}], tools, fmt="xml",
                       add_generation_prompt=True)  # fmt: skip
    assert text.startswith(
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    )
    assert "\n</tools>\n\n" in text and text.count("<function=") == 1
    assert text.endswith(
        "\n\nSYS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


@pytest.mark.parametrize("fmt", list(ToolCallFormat))
def test_rendering_is_prefix_stable_over_a_real_episode(catalog, fmt):
    task = load_split(catalog, "validation", limit=1)[0]
    env = ShopEnv(catalog)
    instruction, _ = env.reset(task=task, seed=0)
    tools = env.offered_tools()  # one segment: the schema of the first turn
    messages = [
        {"role": "system", "content": system_prompt(["Be careful."])},
        {"role": "user", "content": instruction},
    ]
    expert = ExpertPolicy()
    prompt = render_chat(messages, tools, fmt=fmt, add_generation_prompt=True)
    for _ in range(4):
        completion = format_tool_call(expert.next_action(env), fmt)
        observation, *_ = env.step(completion)
        # what the rollout builds: prompt + model text + continuation
        prompt = prompt + completion + continuation_after_assistant(observation, fmt)
        messages += [{"role": "assistant", "content": completion}, {"role": "tool", "content": observation}]
        assert prompt == render_chat(messages, tools, fmt=fmt, add_generation_prompt=True)
        for k in range(1, len(messages)):
            assert render_chat(messages, tools, fmt=fmt).startswith(render_chat(messages[:k], tools, fmt=fmt))
    assert continuation_after_assistant("OBS", fmt) == "<|im_end|>\n" + tool_response_turn(
        "OBS"
    ) + assistant_header(fmt)


def test_assistant_message_with_tool_calls_field_and_unknown_role():
    message = {"role": "assistant", "content": "", "tool_calls": [{"name": "checkout", "arguments": {}}]}
    assert render_chat([message]) == (
        '<|im_start|>assistant\n<tool_call>\n{"name": "checkout", "arguments": {}}\n</tool_call><|im_end|>\n'
    )
    with pytest.raises(
        ValueError, match="unknown message role 'robot'; expected system, user, assistant or tool"
    ):
        render_chat([{"role": "robot", "content": "x"}])

"""Our render_chat against a chat template, token by token (shopsimrl.ops.chat_template).

With the production checkpoint present (SHOPSIMRL_QWEN35_DIR, or $MODELS_DIR/Qwen3.5-4B) the real
template is compared; otherwise that test skips with the reason. The mechanism itself always runs,
against templates built here: one that writes the Qwen3 JSON tool format as we do (must agree) and
one that puts the tools before the system text (must be reported at the first differing token).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shopsimrl.models.tiny import tiny_tokenizer
from shopsimrl.ops.chat_template import compare_with_template, shop_cases

_TOOLS_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_CALL_INSTRUCTIONS = ("For each function call, write a JSON object with the function name and its arguments inside "
                      "<tool_call></tool_call> tags:\n<tool_call>\n"
                      '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _template(system_first: bool) -> str:
    system = "{{ messages[0].content + '\\n\\n' }}"
    tools = ("{{ '" + _TOOLS_INTRO.replace("\n", "\\n") + "' }}{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}"
             "{% endfor %}{{ '\\n</tools>\\n\\n' }}{{ '" + _CALL_INSTRUCTIONS.replace("\n", "\\n") + "' }}")
    header = "<|im_start|>system\n" + (system + tools if system_first else tools + "{{ '\\n\\n' + messages[0].content }}")
    return (header + "<|im_end|>\n"
            "{% for m in messages[1:] %}"
            "{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
            "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
            "{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
            "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
            "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
            "{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_cases_are_a_first_turn_and_a_turn_after_a_tool_response():
    first, after = shop_cases()
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert [m["role"] for m in after.messages] == ["system", "user", "assistant", "tool"]
    assert first.tools and after.tools


def test_a_template_that_renders_like_us_agrees():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = _template(system_first=True)
    assert compare_with_template(tokenizer, "json") == []


def test_a_different_template_is_reported_at_the_first_differing_token():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = _template(system_first=False)
    problems = compare_with_template(tokenizer, "json")
    assert [p.split(":")[0] for p in problems] == ["first_turn", "after_tool"]
    # Both start "<|im_start|>system\n" (2 + 7 byte tokens), then differ.
    assert problems[0].startswith("first_turn: first difference at token 8 of ")


def _production_checkpoint() -> Path | None:
    candidates = [os.environ.get("SHOPSIMRL_QWEN35_DIR"), os.path.join(os.environ.get("MODELS_DIR", "models"), "Qwen3.5-4B")]
    return next((Path(c) for c in candidates if c and (Path(c) / "tokenizer_config.json").is_file()), None)


def test_production_checkpoint_template_agrees_with_render_chat():
    model_dir = _production_checkpoint()
    if model_dir is None:
        pytest.skip("no Qwen3.5 checkpoint: set SHOPSIMRL_QWEN35_DIR (or MODELS_DIR holding Qwen3.5-4B) to compare "
                    "render_chat with its chat template; `make preflight` runs it on the host")
    from transformers import AutoTokenizer

    assert compare_with_template(AutoTokenizer.from_pretrained(str(model_dir)), "xml") == []

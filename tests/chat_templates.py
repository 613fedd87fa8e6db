"""Chat templates built for the tests, and SmolLM2's own tokenizer (read from the demo model's GGUF).

The Qwen-style templates follow the structure of Qwen's own (ChatML turns, tool calls under
`tool_calls`, tool results as `<tool_response>` user turns; Qwen3.5: tools before the system text,
XML calls, an empty think block when thinking is off), with tool-instruction wording of their own:
the rollout must agree with a template whatever its wording, because the template renders it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

_QWEN_TURNS = (
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content | trim + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if THINK_IN_HISTORY and loop.index0 > ns.last_query %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{{- m.content | trim }}"
    "{%- for c in m.tool_calls or [] %}{%- if not loop.first or m.content | trim %}{{- '\\n\\n' }}{%- endif %}"
    "CALL{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content | trim + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
)
_LAST_QUERY = (
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' and not m.content.startswith('<tool_response>') %}"
    "{%- set ns.last_query = loop.index0 %}{%- endif %}{%- endfor %}"
)
_TOOL_LIST = "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
_XML_CALL = (
    "{{- '<tool_call>\\n<function=' + c.function.name + '>\\n' }}"
    "{%- for key, value in c.function.arguments.items() %}{{- '<parameter=' + key + '>\\n' }}"
    "{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}"
    "{{- '\\n</parameter>\\n' }}{%- endfor %}{{- '</function>\\n</tool_call>' }}"
)
_JSON_CALL = (
    "{{- '<tool_call>\\n{\"name\": \"' + c.function.name + '\", \"arguments\": ' }}"
    "{{- c.function.arguments | tojson }}{{- '}\\n</tool_call>' }}"
)

# Qwen3.5's shape: tools first, the system text after them, XML calls, think blocks when thinking is off.
QWEN35_STYLE = (
    _LAST_QUERY
    + "{%- if tools %}{{- '<|im_start|>system\\n# Functions\\n\\nThese functions are available:\\n\\n<tools>' }}"
    + _TOOL_LIST
    + "{{- '\\n</tools>\\n\\nTo call one, answer with\\n<tool_call>\\n<function=NAME>\\n<parameter=ARG>\\nVALUE\\n"
    "</parameter>\\n</function>\\n</tool_call>\\nand stop.' }}"
    "{%- if messages[0].role == 'system' %}{{- '\\n\\n' + messages[0].content | trim }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content | trim + '<|im_end|>\\n' }}"
    "{%- endif %}"
    + _QWEN_TURNS.replace("THINK_IN_HISTORY", "true").replace("CALL", _XML_CALL)
    + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)

# Qwen3's shape: the system text first, then the tools, JSON calls, no think block.
QWEN3_STYLE = (
    _LAST_QUERY
    + "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Functions\\n\\nSignatures:\\n<tools>' }}"
    + _TOOL_LIST
    + "{{- '\\n</tools>\\n\\nCall one as <tool_call>\\n{\"name\": ..., \"arguments\": {...}}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    + _QWEN_TURNS.replace("THINK_IN_HISTORY", "false").replace("CALL", _JSON_CALL)
    + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Qwen3's shape, but tool results in a `tool` turn: not what the rollout appends.
TOOL_ROLE_TURNS = QWEN3_STYLE.replace(
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content | trim + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}",
    "{{- '<|im_start|>tool\\n' + m.content + '<|im_end|>\\n' }}",
)

# No tools, no ChatML: turns as markdown headings.
HEADINGS = (
    "{%- for m in messages %}{{- '### ' + m.role + '\\n' + m.content + '\\n\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '### assistant\\n' }}{%- endif %}"
)


@cache
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer with its own chat template, from the GGUF file (~8 s, once)."""
    from transformers import AutoTokenizer

    from shopsimrl.models.smollm2 import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)

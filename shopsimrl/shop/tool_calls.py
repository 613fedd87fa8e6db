"""Tool calls in the production chat format, and their parser.

Two syntaxes are accepted inside `<tool_call>...</tool_call>` (docs/environment.md has the
sources):
- JSON (Qwen3 / Hermes): `<tool_call>\n{"name": "search", "arguments": {"keywords": "mug"}}\n</tool_call>`
- XML (Qwen3.5's own template): `<tool_call>\n<function=search>\n<parameter=keywords>\nmug\n</parameter>\n</function>\n</tool_call>`

In the XML form every parameter value is text; the toolkit converts it to the type the tool's
schema declares (`ToolCall.text_arguments` marks such calls).

Malformed model output is a policy failure: the parser returns a `ParseFailure` whose message
says exactly what was wrong. It never raises on any input string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_TRAILING_ALLOWED = ("<|im_end|>", "<|endoftext|>")  # end-of-turn tokens a decoder may leave in the text


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    text_arguments: bool = False  # True when parsed from the XML form: values are still strings

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class ParseFailure:
    message: str


def _strip_end_tokens(text: str) -> str:
    text = text.rstrip()
    if not text.endswith("|>"):
        return text
    changed = True
    while changed:
        changed = False
        for token in _TRAILING_ALLOWED:
            if text.endswith(token):
                text = text[: -len(token)].rstrip()
                changed = True
    return text


_RAW_DECODE = json.JSONDecoder().raw_decode


def _parse_json_body(body: str) -> ToolCall | ParseFailure:
    # body is stripped, so a complete decode from 0 to the end is what json.loads accepts; any
    # other case goes through json.loads for its exact error message.
    try:
        obj, end = _RAW_DECODE(body)
    except json.JSONDecodeError:
        end = -1
    if end != len(body):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            return ParseFailure(f"tool call is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
    if not isinstance(obj, dict):
        return ParseFailure(f"tool call JSON must be an object, got {type(obj).__name__}")
    if "name" not in obj:
        return ParseFailure('tool call JSON has no "name" key')
    name = obj["name"]
    if not isinstance(name, str) or not name:
        return ParseFailure(f'"name" must be a non-empty string, got {json.dumps(name)}')
    if "arguments" not in obj:
        return ParseFailure(
            f'tool call "{name}" has no "arguments" key; use "arguments": {{}} for no arguments'
        )
    arguments = obj["arguments"]
    if isinstance(arguments, str):
        # Some serving stacks double-encode arguments; accept a string that holds a JSON object.
        try:
            decoded = json.loads(arguments)
        except json.JSONDecodeError:
            decoded = None
        if not isinstance(decoded, dict):
            return ParseFailure(f'"arguments" of "{name}" must be a JSON object, got string')
        arguments = decoded
    if not isinstance(arguments, dict):
        kind = "null" if arguments is None else type(arguments).__name__
        return ParseFailure(f'"arguments" of "{name}" must be a JSON object, got {kind}')
    extra = [] if len(obj) == 2 else sorted(set(obj) - {"name", "arguments"})  # both keys are present
    if extra:
        return ParseFailure(f"tool call JSON has unexpected key(s): {', '.join(extra)}")
    return ToolCall(name, arguments)


def _parse_xml_body(body: str) -> ToolCall | ParseFailure:
    # body starts with "<function="
    end_name = body.find(">")
    if end_name < 0:
        return ParseFailure("<function=NAME> tag is not closed with '>'")
    name = body[len("<function=") : end_name].strip()
    if not name or "\n" in name:
        return ParseFailure("<function=NAME> has an empty or multi-line function name")
    rest = body[end_name + 1 :]
    close = rest.rfind("</function>")
    if close < 0:
        return ParseFailure(f"<function={name}> is not closed with </function>")
    if rest[close + len("</function>") :].strip():
        return ParseFailure(f"unexpected text after </function> in the call of {name}")
    inner = rest[:close]
    arguments: dict[str, Any] = {}
    pos = 0
    while True:
        start = inner.find("<parameter=", pos)
        if start < 0:
            if inner[pos:].strip():
                return ParseFailure(
                    f"unexpected text inside <function={name}> outside <parameter=...> blocks"
                )
            break
        if inner[pos:start].strip():
            return ParseFailure(f"unexpected text inside <function={name}> outside <parameter=...> blocks")
        end_tag = inner.find(">", start)
        if end_tag < 0:
            return ParseFailure(f"<parameter=...> tag in the call of {name} is not closed with '>'")
        pname = inner[start + len("<parameter=") : end_tag].strip()
        if not pname or "\n" in pname:
            return ParseFailure(f"a <parameter=...> tag in the call of {name} has an empty name")
        end = inner.find("</parameter>", end_tag)
        if end < 0:
            return ParseFailure(f"<parameter={pname}> in the call of {name} is not closed with </parameter>")
        if pname in arguments:
            return ParseFailure(f"parameter {pname} is given twice in the call of {name}")
        value = inner[end_tag + 1 : end]
        # The template writes "\n" + value + "\n"; strip exactly that framing, keep inner newlines.
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        arguments[pname] = value
        pos = end + len("</parameter>")
    return ToolCall(name, arguments, text_arguments=True)


def parse_tool_calls(text: str) -> list[ToolCall] | ParseFailure:
    """Every `<tool_call>` block of an assistant turn, or a ParseFailure saying what is wrong.

    Text before the first block (reasoning, a `<think>` block) is allowed; text after the last
    block is not, apart from whitespace and end-of-turn tokens.
    """
    body_text = _strip_end_tokens(text)
    calls: list[ToolCall] = []
    pos = 0
    while True:
        start = body_text.find(OPEN, pos)
        if start < 0:
            break
        end = body_text.find(CLOSE, start + len(OPEN))
        if end < 0:
            return ParseFailure(f"<tool_call> block number {len(calls) + 1} is not closed with </tool_call>")
        nested = body_text.find(OPEN, start + len(OPEN), end)
        if nested >= 0:
            return ParseFailure(
                f"<tool_call> block number {len(calls) + 1} is not closed before the next <tool_call>"
            )
        body = body_text[start + len(OPEN) : end].strip()
        if not body:
            return ParseFailure(f"<tool_call> block number {len(calls) + 1} is empty")
        parsed = _parse_xml_body(body) if body.startswith("<function=") else _parse_json_body(body)
        if isinstance(parsed, ParseFailure):
            return parsed
        calls.append(parsed)
        pos = end + len(CLOSE)
        between = body_text[pos:]
        if between.strip() and not between.lstrip().startswith(OPEN):
            return ParseFailure(
                "text after </tool_call> is not allowed; end the turn right after the tool call"
            )
    if not calls:
        if CLOSE in body_text:
            return ParseFailure("found </tool_call> without an opening <tool_call>")
        return ParseFailure("no tool call found; reply with exactly one <tool_call>...</tool_call> block")
    return calls


def parse_tool_call(text: str) -> ToolCall | ParseFailure:
    """Exactly one tool call (the environment's rule: one action per turn)."""
    # Fast path for the common shape: one block that opens the text and closes it. It takes the
    # same branch the general loop below would take for such text, so results are identical.
    stripped = text.rstrip()
    if (
        stripped.startswith(OPEN)
        and stripped.endswith(CLOSE)
        and stripped.count(OPEN) == 1
        and stripped.count(CLOSE) == 1
    ):
        body = stripped[len(OPEN) : -len(CLOSE)].strip()
        if body:
            return _parse_xml_body(body) if body.startswith("<function=") else _parse_json_body(body)
    parsed = parse_tool_calls(text)
    if isinstance(parsed, ParseFailure):
        return parsed
    if len(parsed) != 1:
        return ParseFailure(f"expected exactly one tool call per turn, found {len(parsed)}")
    return parsed[0]

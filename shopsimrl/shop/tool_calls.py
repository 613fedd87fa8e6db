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


# Tool calls are flat: the call object, its arguments, maybe a list value. Deeper text is refused
# before decoding, which would otherwise recurse until Python's recursion limit (a RecursionError).
MAX_JSON_DEPTH = 32
_INT_DIGITS_LIMIT = 4300  # CPython's int() limit on decimal digits (sys.get_int_max_str_digits)


class _NotANumber(ValueError):
    """A number token of the model's JSON that the shop cannot hold; the message is the ParseFailure."""


def _reject_constant(token: str) -> Any:
    raise _NotANumber(f"tool call JSON holds {token}, which is not a JSON number")


def _finite_float(token: str) -> float:
    value = float(token)
    if value - value != 0.0:  # inf or nan: the literal overflowed the 64-bit float
        raise _NotANumber(f"tool call JSON holds the number {token[:40]}, which is out of range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_RAW_DECODE = _DECODER.raw_decode


def _too_deep(text: str) -> bool:
    """True when arrays/objects nest deeper than MAX_JSON_DEPTH (brackets inside strings ignored)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # the common case: too few brackets to be too deep, no scan needed
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _decode(text: str) -> Any:
    """`json.loads` that never raises: the value, or the ParseFailure that says what is wrong."""
    if _too_deep(text):
        return ParseFailure(f"tool call JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        obj, end = _RAW_DECODE(text)
    except json.JSONDecodeError:
        end = -1
    except _NotANumber as e:
        return ParseFailure(str(e))
    except ValueError:  # int() refused the digits: the only other ValueError the decoder raises
        return ParseFailure(f"tool call JSON holds an integer of more than {_INT_DIGITS_LIMIT} digits")
    if end == len(text):
        return obj
    # Not one complete value: json.loads gives the exact error message (text is stripped).
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return ParseFailure(f"tool call is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except ValueError:
        pass
    return ParseFailure("tool call is not valid JSON")


def _parse_json_body(body: str) -> ToolCall | ParseFailure:
    obj = _decode(body)
    if type(obj) is ParseFailure:
        return obj
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
        decoded = _decode(arguments.strip())
        if type(decoded) is ParseFailure and not decoded.message.startswith("tool call is not valid JSON"):
            return decoded  # a number it cannot hold or too deep: say so, not "got string"
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

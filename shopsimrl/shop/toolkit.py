"""Typed tool functions -> the JSON schema the model sees, argument validation and dispatch.

A tool is a method decorated with `@tool(offered_when=...)`. Its signature (type hints, defaults)
and its docstring (first paragraph = description, `Args:` = parameter descriptions) are the only
source of its schema, in the OpenAI function format. `Toolkit.dispatch` is the one place where a
tool's `ToolError` becomes an error observation; any other exception propagates (a bug of ours,
turned into a technical error by the environment).
"""

from __future__ import annotations

import inspect
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from shopsimrl.shop.observations import JsonText, PolicyFailureKind, error_observation, render_observation
from shopsimrl.shop.tool_calls import ToolCall

_TOOL_ATTR = "__shopsim_tool__"
_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


class ToolError(Exception):
    """Raised by a tool for a well-formed but impossible action; shown to the model, then scored."""

    def __init__(self, message: str, kind: PolicyFailureKind = PolicyFailureKind.INVALID_ACTION):
        super().__init__(message)
        self.message = message
        self.kind = kind


def tool(*, offered_when: Callable[[Any], bool] | None = None) -> Callable:
    """Mark a method as a tool; `offered_when(state)` decides whether it is offered now."""

    def mark(fn: Callable) -> Callable:
        setattr(fn, _TOOL_ATTR, offered_when)
        return fn

    return mark


@dataclass(frozen=True)
class Param:
    name: str
    json_type: str  # string | integer | number | boolean
    required: bool
    default: Any
    enum: tuple[Any, ...] | None
    description: str


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...]
    offered_when: Callable[[Any], bool] | None
    schema: dict  # {"type": "function", "function": {...}}

    @cached_property
    def param_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params)

    @cached_property
    def fast_validator(self) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
        """The compiled common-case argument check (see `_compile_validator`), built once per spec."""
        return _compile_validator(self)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    doc = inspect.cleandoc(doc or "")
    head, _, rest = doc.partition("\nArgs:\n")
    description = " ".join(head.split("\n\n")[0].split())
    params: dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        match = re.match(r"^\s{2,}(\w+):\s*(.*)$", line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current is not None and line.strip():
            params[current] += " " + line.strip()
        elif not line.strip():
            current = None
    return description, params


def _param_type(name: str, hint: Any) -> tuple[str, tuple[Any, ...] | None, bool]:
    """(json type, enum values, optional) of a parameter's type hint."""
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"tool parameter {name}: only `X | None` unions are supported, got {hint}")
        hint = args[0]
        origin = typing.get_origin(hint)
    if origin is Literal:
        values = typing.get_args(hint)
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or next(iter(kinds)) not in _JSON_TYPES:
            raise TypeError(f"tool parameter {name}: Literal values must share one JSON type, got {values}")
        return _JSON_TYPES[next(iter(kinds))], tuple(values), optional
    if hint not in _JSON_TYPES:
        raise TypeError(f"tool parameter {name}: unsupported type {hint}")
    return _JSON_TYPES[hint], None, optional


def build_spec(fn: Callable) -> ToolSpec:
    """The ToolSpec (and JSON schema) of one tool method, from its signature and docstring."""
    description, param_docs = _parse_docstring(fn.__doc__ or "")
    if not description:
        raise TypeError(f"tool {fn.__name__} needs a docstring: its first paragraph is the tool description")
    hints = typing.get_type_hints(fn)
    params = []
    for p in list(inspect.signature(fn).parameters.values())[1:]:  # skip self
        if p.name not in param_docs:
            raise TypeError(f"tool {fn.__name__}: parameter {p.name} is not described under Args:")
        json_type, enum, optional = _param_type(p.name, hints[p.name])
        required = p.default is inspect.Parameter.empty
        if optional and required:
            raise TypeError(f"tool {fn.__name__}: optional parameter {p.name} needs a default")
        params.append(
            Param(p.name, json_type, required, None if required else p.default, enum, param_docs[p.name])
        )
    extra_docs = sorted(set(param_docs) - {p.name for p in params})
    if extra_docs:
        raise TypeError(f"tool {fn.__name__}: Args: describes unknown parameter(s) {extra_docs}")
    properties: dict[str, dict] = {}
    for p in params:
        prop: dict[str, Any] = {"type": p.json_type, "description": p.description}
        if p.enum is not None:
            prop["enum"] = list(p.enum)
        if not p.required and p.default is not None:
            prop["default"] = p.default
        properties[p.name] = prop
    schema = {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [p.name for p in params if p.required],
                "additionalProperties": False,
            },
        },
    }
    return ToolSpec(fn.__name__, description, tuple(params), getattr(fn, _TOOL_ATTR), schema)


def collect_specs(cls: type) -> dict[str, ToolSpec]:
    """Every `@tool` method of a class, in definition order."""
    return {
        name: build_spec(member)
        for name, member in vars(cls).items()
        if callable(member) and hasattr(member, _TOOL_ATTR)
    }


_BOOL_TEXT = {"true": True, "false": False}


def _convert_text(param: Param, text: str) -> Any:
    """XML-form arguments are text; convert to the declared type (ValueError names the problem)."""
    if param.json_type == "string":
        return text
    stripped = text.strip()
    if param.json_type == "integer":
        return int(stripped)
    if param.json_type == "number":
        return float(stripped)
    if stripped.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[stripped.lower()]
    raise ValueError(stripped)


def _type_ok(json_type: str, value: Any) -> bool:
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, bool)


def _type_name(value: Any) -> str:
    return {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        dict: "object",
        list: "array",
    }.get(type(value), "null" if value is None else type(value).__name__)


# The numbers a tool argument may hold: what a JSON-schema "integer" is in every serving stack
# (int64), and finite 64-bit floats. Anything else is the policy's bad argument, never a crash.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_SHOWN_TEXT = 40  # longer text arguments are described by their length, not echoed


def _show_text(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN_TEXT else f"a text of {len(text)} characters"


def _range_problem(spec: ToolSpec, param: Param, value: Any) -> str | None:
    """Why a well-typed integer or number argument is outside what the shop can hold, or None."""
    where = f"argument {param.name} of {spec.name}"
    if param.json_type == "integer":
        if not _INT_MIN <= value <= _INT_MAX:
            return f"{where} is out of range: integers must lie in [-2**63, 2**63)"
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        return f"{where} is out of range: numbers must be finite 64-bit floats"
    if not math.isfinite(number):
        return f"{where} must be a finite number, got {number}"
    return None


def validate_arguments(spec: ToolSpec, call: ToolCall) -> dict[str, Any] | str:
    """Keyword arguments for the tool, or the message of what is wrong with them."""
    args = call.arguments
    names = spec.param_names
    unexpected = [k for k in args if k not in names]
    if unexpected:
        allowed = ", ".join(p.name for p in spec.params) or "none"
        return f"unexpected argument(s) for {spec.name}: {', '.join(unexpected)}; allowed: {allowed}"
    missing = [p.name for p in spec.params if p.required and p.name not in args]
    if missing:
        return f"missing required argument(s) for {spec.name}: {', '.join(missing)}"
    kwargs: dict[str, Any] = {}
    for p in spec.params:
        if p.name not in args:
            continue
        value = args[p.name]
        if value is None and not p.required:
            continue  # an explicit null for an optional argument means "not given"
        if call.text_arguments and isinstance(value, str):
            try:
                value = _convert_text(p, value)
            except ValueError:  # not a literal of the type, or more digits than int() reads
                return f"argument {p.name} of {spec.name} must be {_article(p.json_type)}, got {_show_text(value)}"
        if not _type_ok(p.json_type, value):
            return (
                f"argument {p.name} of {spec.name} must be {_article(p.json_type)}, got {_type_name(value)}"
            )
        if p.json_type in ("integer", "number"):
            problem = _range_problem(spec, p, value)
            if problem is not None:
                return problem
        if p.enum is not None and value not in p.enum:
            choices = ", ".join(str(v) for v in p.enum)
            return f"argument {p.name} of {spec.name} must be one of: {choices}; got {value!r}"
        kwargs[p.name] = float(value) if p.json_type == "number" else value
    return kwargs


# Exact types accepted per JSON type on the fast path; anything else (subclasses, text arguments,
# nulls, enum misses, numbers out of range) goes through `validate_arguments`, which gives the same
# answer or the message.
_FAST_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (float, int), "boolean": (bool,),
}  # fmt: skip


def _compile_validator(spec: ToolSpec) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """A per-tool check for the common case (JSON arguments, all known and well typed).

    Returns the keyword arguments `validate_arguments` would return, or None when the arguments
    need the general path (which then produces the exact error message)."""
    required = tuple(p.name for p in spec.params if p.required)
    checks = {
        p.name: (_FAST_TYPES[p.json_type], p.json_type == "number", p.json_type in ("integer", "number"), p.enum)
        for p in spec.params
    }

    def fast(args: dict[str, Any]) -> dict[str, Any] | None:
        for name in required:
            if name not in args:
                return None
        kwargs: dict[str, Any] = {}
        for name, value in args.items():
            check = checks.get(name)
            if check is None:
                return None
            types_, is_number, numeric, enum = check
            value_type = type(value)
            if value_type not in types_ or (enum is not None and value not in enum):
                return None
            if numeric and (
                value - value != 0 if value_type is float else not _INT_MIN <= value <= _INT_MAX
            ):  # inf/nan (inf - inf is nan), or an integer beyond int64
                return None
            kwargs[name] = float(value) if is_number else value
        return kwargs

    return fast


def _article(json_type: str) -> str:
    return "an integer" if json_type == "integer" else f"a {json_type}"


@dataclass(frozen=True)
class ToolResult:
    observation: str
    tool: str | None
    failure: PolicyFailureKind | None


class Toolkit:
    """Dispatches ToolCalls to the `@tool` methods of `tools`, whose state decides what is offered."""

    def __init__(self, tools: Any, specs: dict[str, ToolSpec]):
        self._tools = tools
        self.specs = specs
        self._bound = {name: getattr(tools, name) for name in specs}
        # Several tools share a predicate; evaluate each distinct one once per call and memoise
        # the offered names per combination of answers (a handful exist).
        self._predicates = list(dict.fromkeys(s.offered_when for s in specs.values() if s.offered_when))
        self._offered_cache: dict[tuple[bool, ...], tuple[str, ...]] = {}

    def offered_names(self, state: Any) -> tuple[str, ...]:
        answers = tuple([bool(p(state)) for p in self._predicates])
        names = self._offered_cache.get(answers)
        if names is None:
            truth = dict(zip(self._predicates, answers, strict=True))
            names = tuple(n for n, s in self.specs.items() if s.offered_when is None or truth[s.offered_when])
            self._offered_cache[answers] = names
        return names

    def dispatch(self, call: ToolCall, state: Any) -> ToolResult:
        return ToolResult(*self._dispatch(call, state))

    def _dispatch(self, call: ToolCall, state: Any) -> tuple[str, str | None, PolicyFailureKind | None]:
        # (observation, tool, failure) without building a ToolResult: ShopEnv.step calls this
        # once per step and unpacks it at once.
        name = call.name
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(self.specs)
            return (
                error_observation(PolicyFailureKind.UNKNOWN_TOOL, f"unknown tool {name!r}; tools: {known}"),
                name,
                PolicyFailureKind.UNKNOWN_TOOL,
            )
        if spec.offered_when is not None and not spec.offered_when(state):
            offered = ", ".join(self.offered_names(state))
            message = f"tool {name} is not offered now; offered tools: {offered}"
            return (
                error_observation(PolicyFailureKind.TOOL_NOT_OFFERED, message),
                name,
                PolicyFailureKind.TOOL_NOT_OFFERED,
            )
        kwargs = None if call.text_arguments else spec.fast_validator(call.arguments)
        if kwargs is None:
            kwargs = validate_arguments(spec, call)
            if isinstance(kwargs, str):
                return (
                    error_observation(PolicyFailureKind.BAD_ARGUMENTS, kwargs),
                    name,
                    PolicyFailureKind.BAD_ARGUMENTS,
                )
        try:
            payload = self._bound[name](**kwargs)
        except ToolError as e:
            return error_observation(e.kind, e.message), name, e.kind
        # render_observation, inlined for the common JsonText payload
        return (
            (str.__str__(payload) if type(payload) is JsonText else render_observation(payload)),
            name,
            None,
        )

"""ShopSim: a deterministic simulated shop for training and evaluating shopping agents.

See docs/environment.md (design, tools, tool-call format), docs/reward.md and
docs/error_taxonomy.md.
"""

from shopsimrl.shop.catalog import Catalog, Product, generate_catalog, parse_product_id, product_id
from shopsimrl.shop.categories import CATEGORIES, CategorySpec, category_names
from shopsimrl.shop.chat_format import (
    ASSISTANT_TURN_END,
    BASE_SYSTEM_PROMPT,
    ToolCallFormat,
    assistant_header,
    assistant_text,
    continuation_after_assistant,
    format_tool_call,
    render_chat,
    system_prompt,
    system_with_tools,
    tool_response_text,
    tool_response_turn,
    turn_text,
)
from shopsimrl.shop.environment import DEFAULT_MAX_TURNS, ShopEnv
from shopsimrl.shop.expert import ExpertPolicy
from shopsimrl.shop.levels import DEFAULT_LEVEL, LEVELS, Level, get_level
from shopsimrl.shop.observations import PolicyFailureKind
from shopsimrl.shop.reward import EpisodeOutcome, partial_credit
from shopsimrl.shop.state import Finish
from shopsimrl.shop.tasks import Gold, Split, Task, get_task, load_split
from shopsimrl.shop.tool_calls import ParseFailure, ToolCall, parse_tool_call, parse_tool_calls
from shopsimrl.shop.tools import tool_specs

__all__ = [
    "ASSISTANT_TURN_END",
    "BASE_SYSTEM_PROMPT",
    "CATEGORIES",
    "Catalog",
    "CategorySpec",
    "DEFAULT_LEVEL",
    "DEFAULT_MAX_TURNS",
    "EpisodeOutcome",
    "ExpertPolicy",
    "Finish",
    "Gold",
    "LEVELS",
    "Level",
    "ParseFailure",
    "PolicyFailureKind",
    "Product",
    "ShopEnv",
    "Split",
    "Task",
    "ToolCall",
    "ToolCallFormat",
    "assistant_header",
    "assistant_text",
    "category_names",
    "continuation_after_assistant",
    "format_tool_call",
    "generate_catalog",
    "get_level",
    "get_task",
    "load_split",
    "parse_product_id",
    "parse_tool_call",
    "parse_tool_calls",
    "partial_credit",
    "product_id",
    "render_chat",
    "system_prompt",
    "system_with_tools",
    "tool_response_text",
    "tool_response_turn",
    "tool_specs",
    "turn_text",
]

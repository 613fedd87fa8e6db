"""ShopEnv: one shopping episode in Gymnasium's spirit (reset / step), deterministic.

`step` takes a `ToolCall` or the raw assistant text. Everything the policy can get wrong is an
observation (docs/error_taxonomy.md); an exception inside the environment is a bug of ours and
surfaces as `TechnicalError(kind="environment")` (or kind="parser" if the parser itself crashed),
which makes the trajectory unscorable instead of scoring it 0.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shopsimrl.errors import TechnicalError, TechnicalErrorKind
from shopsimrl.shop.catalog import Catalog
from shopsimrl.shop.observations import PolicyFailureKind, error_observation
from shopsimrl.shop.reward import EpisodeOutcome, compute_outcome, gold_audit
from shopsimrl.shop.state import EpisodeState, Finish
from shopsimrl.shop.tasks import Task
from shopsimrl.shop.tool_calls import ParseFailure, ToolCall, parse_tool_call
from shopsimrl.shop.toolkit import Toolkit
from shopsimrl.shop.tools import ShopTools, tool_specs

DEFAULT_MAX_TURNS = 12


class ShopEnv:
    """Example:

    env = ShopEnv(generate_catalog(seed=0), max_turns=12)
    instruction, info = env.reset(task=load_split(env.catalog, "train")[0], seed=0)
    obs, reward, terminated, truncated, info = env.step('<tool_call>\\n{"name": "search", ...}\\n</tool_call>')
    """

    def __init__(self, catalog: Catalog, max_turns: int = DEFAULT_MAX_TURNS):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.catalog = catalog
        self.max_turns = max_turns
        self._specs = tool_specs()
        self._all_names = tuple(self._specs)
        self._task: Task | None = None
        self._state: EpisodeState | None = None
        self._toolkit: Toolkit | None = None
        self._tools: ShopTools | None = None  # one per environment, re-pointed at each episode's state
        # offered tool names -> (schemas, hash); a handful of distinct sets exist
        self._schema_cache: dict[tuple[str, ...], tuple[list[dict], str]] = {}
        self._hash_cache: dict[tuple[str, ...], str] = {}  # offered names -> hash only (step's lookup)
        # The offered tool names as of the end of the last reset/step. Only step() changes the
        # state (the privileged accessors are read-only by contract), so this is the offered set
        # at the start of the next step, and step() computes the set once instead of twice.
        self._offered: tuple[str, ...] = ()

    # -- privileged accessors (the expert and triage use them; prompts never do) -------------
    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError("no task: call reset(task=...) first")
        return self._task

    @property
    def state(self) -> EpisodeState:
        if self._state is None:
            raise RuntimeError("no episode: call reset(task=...) first")
        return self._state

    # -- Gymnasium-style API -----------------------------------------------------------------
    def reset(self, *, task: Task, seed: int = 0) -> tuple[str, dict[str, Any]]:
        """Start an episode. The environment has no randomness of its own; `seed` is recorded in
        the state (and its hash) so that (task, seed) names an episode, as the gate pairs them."""
        self._task = task
        self._state = EpisodeState(task_id=task.task_id, seed=seed)
        if self._tools is None:
            self._tools = ShopTools(self.catalog, self._state)
            self._toolkit = Toolkit(self._tools, self._specs)  # keeps its memoised offered sets
        else:
            self._tools.state = self._state
        self._offered = self._offered_names()
        return task.instruction, {
            "task_id": task.task_id,
            "split": task.split.value,
            "seed": seed,
            "max_turns": self.max_turns,
            "tool_schema_hash": self._schemas_for(self._offered)[1],
        }

    def step(self, action: ToolCall | str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        state = self._state
        if state is None:
            state = self.state  # raises the "no episode" error
        if state.done:
            raise TechnicalError(
                TechnicalErrorKind.ENVIRONMENT, "step() called after the episode ended; call reset()"
            )
        before = self._offered
        try:
            if type(action) is str:  # _parse's common case, inlined
                try:
                    call = parse_tool_call(action)
                except Exception as e:  # the parser must never raise on text; if it does, that is our bug
                    raise TechnicalError(TechnicalErrorKind.PARSER, f"{type(e).__name__}: {e}") from e
            else:
                call = self._parse(action)
            state.turn += 1
            if type(call) is ParseFailure:
                observation, tool, failure = (
                    error_observation(PolicyFailureKind.MALFORMED_TOOL_CALL, call.message),
                    None,
                    PolicyFailureKind.MALFORMED_TOOL_CALL,
                )
            else:
                observation, tool, failure = self._toolkit._dispatch(call, state)
            if failure is not None:
                state.policy_failures += 1
            reward = 0.0
            terminated = state.finish is Finish.CHECKOUT
            truncated = False
            if terminated:
                reward = compute_outcome(self.catalog, self._task, state).reward
            elif state.turn >= self.max_turns:
                state.finish = Finish.TURN_LIMIT
                truncated = True
            after = self._offered = self._offered_names()
            digest = self._hash_cache.get(after)
            if digest is None:
                digest = self._hash_cache[after] = self._schemas_for(after)[1]
            info = {
                "turn": state.turn,
                "tool": tool,
                "policy_failure": None if failure is None else failure._value_,
                "finish": state.finish._value_,  # the enum's value without the property lookup
                "tool_schema_changed": after != before,
                "tool_schema_hash": digest,
            }
            if truncated:
                info["truncation"] = PolicyFailureKind.TURN_LIMIT.value
            return observation, reward, terminated, truncated, info
        except TechnicalError:
            raise
        except Exception as e:  # a bug of ours, not the policy's: unscorable, never reward 0
            raise TechnicalError(
                TechnicalErrorKind.ENVIRONMENT,
                f"{type(e).__name__}: {e} (task {state.task_id}, turn {state.turn}, action {_describe(action)})",
            ) from e

    # -- schema ------------------------------------------------------------------------------
    def _offered_names(self) -> tuple[str, ...]:
        if self.catalog.tool_offer == "all":  # every tool listed; the state's preconditions still apply
            return self._all_names
        return self._toolkit.offered_names(self.state)

    def _schemas_for(self, names: tuple[str, ...]) -> tuple[list[dict], str]:
        cached = self._schema_cache.get(names)
        if cached is None:
            schemas = [self._specs[n].schema for n in names]
            digest = hashlib.blake2b(json.dumps(schemas, sort_keys=True).encode(), digest_size=16).hexdigest()
            cached = self._schema_cache[names] = (schemas, digest)
        return cached

    def offered_tools(self) -> list[dict]:
        """JSON schemas (OpenAI function format) of the tools offered now. Do not mutate them."""
        return list(self._schemas_for(self._offered_names())[0])

    def all_tools(self) -> list[dict]:
        return [spec.schema for spec in self._specs.values()]

    def tool_schema_hash(self) -> str:
        """Changes exactly when the set of offered tools changes."""
        return self._schemas_for(self._offered_names())[1]

    def state_hash(self) -> str:
        return self.state.state_hash()

    # -- scoring -----------------------------------------------------------------------------
    def outcome(self) -> EpisodeOutcome:
        return compute_outcome(self.catalog, self.task, self.state)

    def gold_audit(self) -> dict[str, Any]:
        """Privileged (gold-aware): for triage and failure cards only, never for prompts."""
        return gold_audit(self.catalog, self.task, self.state)

    @staticmethod
    def _parse(action: ToolCall | str) -> ToolCall | ParseFailure:
        if isinstance(action, ToolCall):
            return action
        if not isinstance(action, str):
            raise TypeError(f"action must be a ToolCall or the assistant text, got {type(action).__name__}")
        try:
            return parse_tool_call(action)
        except Exception as e:  # the parser must never raise on text; if it does, that is our bug
            raise TechnicalError(TechnicalErrorKind.PARSER, f"{type(e).__name__}: {e}") from e


def _describe(action: Any) -> str:
    if isinstance(action, ToolCall):
        return f"{action.name}({json.dumps(action.arguments, default=str)[:200]})"
    return repr(action)[:200]

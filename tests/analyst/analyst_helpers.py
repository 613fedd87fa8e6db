"""Real episodes and hand-built training records for the Analyst's tests (no model needed).

`play` drives the real ShopEnv with tool-call text, as a model would; `Scripts` builds the action
text that produces each failure mode; `write_group` writes a group trace and its triage record
through the records writers, exactly as the all-samples hook does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.records import (
    GroupTrace,
    OutcomeRecord,
    SegmentTrace,
    TrajectoryTrace,
    TriageReason,
    TriageRecord,
    append_triage,
    trace_path,
    write_group_trace,
)
from shopsimrl.shop import (
    Catalog,
    ShopEnv,
    Task,
    ToolCallFormat,
    format_tool_call,
    generate_catalog,
    load_split,
)
from shopsimrl.shop.catalog import parse_product_id

ROOT = Path(__file__).resolve().parents[2]
CATALOG_SEED = 0
NUM_PRODUCTS = 200
SKILLBANK = ROOT / "configs" / "skillbank.example.json"


def catalog() -> Catalog:
    return generate_catalog(seed=CATALOG_SEED, num_products=NUM_PRODUCTS)


def train_tasks(cat: Catalog) -> list[Task]:
    return load_split(cat, "train")


def call(name: str, **arguments: Any) -> str:
    return format_tool_call({"name": name, "arguments": arguments}, ToolCallFormat.XML)


def play(cat: Catalog, task: Task, actions: list[str], max_turns: int = 12) -> tuple[dict, list[dict]]:
    """Run the actions in a real ShopEnv; returns (gold audit, chat messages) as a trace holds them."""
    env = ShopEnv(cat, max_turns=max_turns)
    instruction, _ = env.reset(task=task, seed=0)
    messages: list[dict] = [{"role": "system", "content": "..."}, {"role": "user", "content": instruction}]
    for text in actions:
        observation, _, terminated, truncated, _ = env.step(text)
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": observation}]
        if terminated or truncated:
            break
    return env.gold_audit(), messages


class Scripts:
    """Action scripts for one task: each one ends in a known failure mode."""

    def __init__(self, cat: Catalog, task: Task) -> None:
        self.cat, self.task, self.gold = cat, task, task.gold
        self.base = self.gold.family_product_ids["base"]

    def _buy(self, pid: str, options: dict[str, str], extra: list[str] = ()) -> list[str]:
        steps = [call("search", keywords=self.gold.product_type), call("view_product", product_id=pid)]
        steps += [call("select_option", product_id=pid, option=k, value=v) for k, v in options.items()]
        return [*steps, call("add_to_cart", product_id=pid), *extra, call("checkout")]

    def success(self) -> list[str]:
        return self._buy(self.base, dict(self.gold.options))

    def wrong_product_type(self) -> list[str]:
        index = next(i for i in range(self.cat.num_products) if self.cat.type_of(i) != self.gold.product_type)
        return self._buy(f"P{index:06d}", {})

    def attribute_mismatch(self) -> list[str]:
        return self._buy(self.gold.family_product_ids["attribute_swap"], dict(self.gold.options))

    def over_budget(self) -> list[str]:
        return self._buy(self.gold.family_product_ids["over_budget"], dict(self.gold.options))

    def option_not_selected(self) -> list[str]:
        return self._buy(self.base, {})

    def wrong_option(self) -> list[str]:
        name, wanted = next(iter(self.gold.options.items()))
        offered = self.cat.options_of(parse_product_id(self.base, self.cat.num_products))[name]
        other = next(v for v in offered if v != wanted)
        return self._buy(self.base, {**self.gold.options, name: other})

    def multiple_items(self) -> list[str]:
        return self._buy(self.base, dict(self.gold.options), extra=[call("add_to_cart", product_id=self.base)])

    def never_checked_out(self) -> list[str]:
        steps = self._buy(self.base, dict(self.gold.options))[:-1]
        return steps + [call("view_cart")] * 12

    def turn_limit(self) -> list[str]:
        return [call("search", keywords=f"thing {n}") for n in range(12)]

    def malformed_tool_call(self) -> list[str]:
        return ["I think I should look around first."] * 12

    def invalid_tool_use(self) -> list[str]:
        return [call("browse", page=n) for n in range(12)]

    def truncated_turn(self) -> list[str]:
        return [call("search", keywords=self.gold.product_type)]  # the episode stops mid-way


def write_group(
    train_dir: Path,
    *,
    step: int,
    group_index: int,
    task: Task,
    episodes: list[tuple[dict, list[dict]]],
    arm: str = "assisted",
    mask: tuple[str, ...] = ("read-the-constraints",),
) -> TriageRecord:
    """Write one all-wrong group (trace, then triage) the way the all-samples hook does."""
    trajectories = []
    for rollout_id, (audit, messages) in enumerate(episodes):
        outcome = OutcomeRecord(reward=audit["reward"], strict_reward=audit["strict_reward"],
                                success=audit["success"], scorable=True)  # fmt: skip
        segment = SegmentTrace(segment_index=0, segment_count=1, sample_index=rollout_id, status="completed",
                               total_tokens=100, response_tokens=50, trained_tokens=40, messages=messages)  # fmt: skip
        trajectories.append(TrajectoryTrace(rollout_id=rollout_id, outcome=outcome, gold_audit=audit, segments=[segment]))
    group_key = f"{task.task_id}#g{group_index}"
    trace = GroupTrace(rollout_step=step, group_index=group_index, group_key=group_key, task_id=task.task_id,
                       split="train", arm=arm, mask=list(mask), q=0.0, rho={c: 0.5 for c in mask}, technical_error=False,
                       all_wrong=True, zero_std=True, trajectories=trajectories)  # fmt: skip
    path = write_group_trace(train_dir, trace)
    assert path == trace_path(train_dir, step, group_index)
    record = TriageRecord(triage_id=f"{step}-{group_index}", rollout_step=step, group_index=group_index,
                          group_key=group_key, task_id=task.task_id, split="train", arm=arm, mask=list(mask),
                          reasons=[TriageReason.ALL_WRONG], outcomes=[t.outcome for t in trajectories],
                          rollout_ids=[t.rollout_id for t in trajectories], technical_errors=[],
                          gold_audit=episodes[0][0], trace_path=str(path.relative_to(train_dir)))  # fmt: skip
    append_triage(train_dir, record)
    return record


def write_configs(root: Path, group: str = "round-000", **sections: Any) -> Path:
    """An analysis config (and the round's shopsim YAML) under `root`; returns the config path."""
    shopsim = root / "shopsim.yaml"
    shopsim.write_text(yaml.safe_dump({"shopsim": {
        "skillbank": str(SKILLBANK), "max_turns": 12, "max_new_tokens_per_turn": 8,
        "tool_call_format": "xml", "catalog": {"seed": CATALOG_SEED, "num_products": NUM_PRODUCTS}}}))  # fmt: skip
    config = {"schema_version": 1, "run": {"group": group, "runs_root": str(root / "runs")},
              "shopsim_config": str(shopsim), **sections}  # fmt: skip
    path = root / "analysis.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class ExpertPolicyGenerator:
    """A `Generator` that plays the scripted expert for whatever task the prompt holds.

    It reads the instruction from the prompt text, replays the expert's earlier turns of the episode
    (one per assistant turn in the prompt) on a shadow environment, and answers with the expert's
    next tool-call text followed by <|im_end|>, as a well-trained policy would. Stateless, so
    concurrent episodes may share it. For the tiny tokenizer.
    """

    def __init__(self, cat: Catalog, tasks: list[Task], tokenizer: Any) -> None:
        self.cat, self.tokenizer = cat, tokenizer
        self.by_instruction = {t.instruction: t for t in tasks}
        self.prompts: list[str] = []

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        from shopsimrl.rollout.generators import FinishReason, GenerationResult
        from shopsimrl.shop import ExpertPolicy

        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        self.prompts.append(text)
        task = next(t for instruction, t in self.by_instruction.items() if instruction in text)
        env = ShopEnv(self.cat, max_turns=12)
        env.reset(task=task, seed=0)
        expert = ExpertPolicy(noise=0.0, seed=0)
        for _ in range(text.count("<|im_start|>assistant") - 1):  # the turns the prompt already holds
            env.step(format_tool_call(expert.next_action(env), ToolCallFormat.XML))
        answer = format_tool_call(expert.next_action(env), ToolCallFormat.XML)
        ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return GenerationResult(ids, [-0.1] * len(ids), FinishReason.STOP, text=answer + "<|im_end|>")

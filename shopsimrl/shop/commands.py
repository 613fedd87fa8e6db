"""`shopsimrl shop ...`: play a task by hand, or run the scripted expert. A thin layer over the library."""

from __future__ import annotations

import json
import statistics
import sys

import click

from shopsimrl.errors import TechnicalError
from shopsimrl.shop.catalog import generate_catalog
from shopsimrl.shop.chat_format import (
    ToolCallFormat,
    render_chat,
    system_prompt,
    tool_response_turn,
)
from shopsimrl.shop.environment import DEFAULT_MAX_TURNS, ShopEnv
from shopsimrl.shop.expert import ExpertPolicy
from shopsimrl.shop.levels import DEFAULT_LEVEL, LEVELS
from shopsimrl.shop.tasks import Split, get_task, load_split
from shopsimrl.shop.tool_calls import ToolCall

_SPLITS = click.Choice([s.value for s in Split])


def _catalog_options(fn):
    fn = click.option("--catalog-seed", default=0, show_default=True, help="Seed of the generated catalog.")(
        fn
    )
    fn = click.option("--num-products", type=int, default=None,
                      help="Catalog size [default: the level's; full: 2000].")(fn)  # fmt: skip
    fn = click.option("--level", type=click.Choice(list(LEVELS)), default=DEFAULT_LEVEL, show_default=True,
                      help="Difficulty level of the tasks (docs/environment.md).")(fn)  # fmt: skip
    fn = click.option("--max-turns", default=DEFAULT_MAX_TURNS, show_default=True, help="Turn limit.")(fn)
    return fn


@click.group()
def shop() -> None:
    """The ShopSim environment: play a task by hand or run the scripted expert.

    Example: shopsimrl shop play --split train --index 0
    """


def _read_action(line: str) -> ToolCall | str:
    """A typed line: a JSON object {"name", "arguments"} becomes a ToolCall; anything else is
    passed verbatim as assistant text (so `<tool_call>...</tool_call>` goes through the parser)."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            return line  # the environment's parser reports what is wrong
        if (
            isinstance(obj, dict)
            and isinstance(obj.get("name"), str)
            and isinstance(obj.get("arguments", {}), dict)
        ):
            return ToolCall(obj["name"], obj.get("arguments", {}))
    return line


@shop.command()
@click.option("--task-id", default=None, help='A task id, e.g. "train-0-00003" (overrides --split/--index).')
@click.option("--split", "split", type=_SPLITS, default="train", show_default=True)
@click.option("--index", default=0, show_default=True, help="Task number within the split.")
@click.option("--seed", default=0, show_default=True, help="Episode seed (recorded in the state hash).")
@click.option("--format", "fmt", type=click.Choice([f.value for f in ToolCallFormat]), default="json",
              show_default=True, help="Tool-call syntax of the rendered prompt.")  # fmt: skip
@click.option("--show-gold", is_flag=True, help="Print the privileged gold audit at the end.")
@_catalog_options
def play(task_id, split, index, seed, fmt, show_gold, catalog_seed, num_products, level, max_turns) -> None:
    """Play one task in the terminal and see exactly what the agent sees.

    Type one tool call per line, either as JSON or as the model would write it:

    \b
      {"name": "search", "arguments": {"keywords": "leather hiking boots"}}
      <tool_call>{"name": "view_product", "arguments": {"product_id": "P000123"}}</tool_call>

    End with checkout, the turn limit, or end of input (Ctrl-D).

    Example: shopsimrl shop play --split validation --index 2 --level easy
    """
    catalog = generate_catalog(seed=catalog_seed, num_products=num_products, level=level)
    try:
        if task_id is not None:
            task = get_task(catalog, task_id)
        else:
            tasks = load_split(catalog, split)
            if not 0 <= index < len(tasks):
                raise click.ClickException(
                    f"--index {index} is out of range: split {split} has {len(tasks)} tasks"
                )
            task = tasks[index]
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    env = ShopEnv(catalog, max_turns=max_turns)
    instruction, _ = env.reset(task=task, seed=seed)
    messages = [{"role": "system", "content": system_prompt([])}, {"role": "user", "content": instruction}]
    click.echo(f"== task {task.task_id} (split {task.split.value}); the rendered prompt follows ==")
    click.echo(render_chat(messages, env.offered_tools(), fmt=fmt, add_generation_prompt=True))
    offered = [t["function"]["name"] for t in env.offered_tools()]
    click.echo(f"== offered tools: {', '.join(offered)} ==")
    done = False
    while not done:
        click.echo(f"[turn {env.state.turn + 1}/{max_turns}] > ", nl=False)
        line = sys.stdin.readline()
        if not line:
            click.echo("\n== end of input ==")
            break
        if not line.strip():
            continue
        try:
            observation, reward, terminated, truncated, info = env.step(_read_action(line))
        except TechnicalError as e:
            raise click.ClickException(f"technical error (unscorable): {e}") from e
        click.echo(tool_response_turn(observation), nl=False)
        if info["policy_failure"]:
            click.echo(f"== policy failure: {info['policy_failure']} ==")
        if info["tool_schema_changed"]:
            names = [t["function"]["name"] for t in env.offered_tools()]
            click.echo(f"== offered tools changed (a new segment starts): {', '.join(names)} ==")
        done = terminated or truncated
        if truncated:
            click.echo("== turn limit reached without a purchase ==")
    outcome = env.outcome()
    click.echo("== outcome ==")
    click.echo(json.dumps(outcome.to_dict(), indent=2))
    if show_gold:
        click.echo("== gold audit (privileged: never show this to a policy) ==")
        click.echo(json.dumps(env.gold_audit(), indent=2))


def run_expert(*, num_tasks: int, split: str, noise: float, seed: int, catalog_seed: int, num_products: int | None,
               max_turns: int, level: str = DEFAULT_LEVEL) -> dict:  # fmt: skip
    """Run the expert on the first `num_tasks` tasks of a split; summary statistics."""
    catalog = generate_catalog(seed=catalog_seed, num_products=num_products, level=level)
    tasks = load_split(catalog, split, limit=num_tasks)
    env = ShopEnv(catalog, max_turns=max_turns)
    rewards, strict, successes, turns, failures = [], [], [], [], 0
    for i, task in enumerate(tasks):
        expert = ExpertPolicy(noise=noise, seed=seed + i)
        env.reset(task=task, seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(expert.next_action(env))
            failures += info["policy_failure"] is not None
            done = terminated or truncated
        outcome = env.outcome()
        rewards.append(outcome.reward)
        strict.append(outcome.strict_reward)
        successes.append(outcome.success)
        turns.append(env.state.turn)
    n = len(tasks)
    return {
        "split": split,
        "tasks": n,
        "noise": noise,
        "success_rate": sum(successes) / n if n else 0.0,
        "reward_mean": statistics.fmean(rewards) if n else 0.0,
        "strict_reward_mean": statistics.fmean(strict) if n else 0.0,
        "turns_mean": statistics.fmean(turns) if n else 0.0,
        "policy_failures": failures,
    }


@shop.command()
@click.option(
    "--tasks", "num_tasks", default=20, show_default=True, help="How many tasks of the split to run."
)
@click.option("--split", "split", type=_SPLITS, default="train", show_default=True)
@click.option(
    "--noise", default=0.0, show_default=True, help="Probability of a random wrong action per step."
)
@click.option(
    "--seed", default=0, show_default=True, help="Seed of the expert's noise (task i uses seed + i)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as one JSON object.")
@_catalog_options
def expert(num_tasks, split, noise, seed, as_json, catalog_seed, num_products, level, max_turns) -> None:
    """Run the scripted expert and print success and reward statistics.

    Example: shopsimrl shop expert --tasks 50 --split validation --noise 0.2
    """
    if num_tasks < 1:
        raise click.ClickException(f"--tasks must be at least 1, got {num_tasks}")
    try:
        stats = run_expert(num_tasks=num_tasks, split=split, noise=noise, seed=seed, catalog_seed=catalog_seed,
                           num_products=num_products, max_turns=max_turns, level=level)  # fmt: skip
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        click.echo(json.dumps(stats))
        return
    click.echo(f"split={stats['split']} tasks={stats['tasks']} noise={stats['noise']}")
    click.echo(f"success_rate={stats['success_rate']:.3f} reward_mean={stats['reward_mean']:.3f} "
               f"strict_reward_mean={stats['strict_reward_mean']:.3f}")  # fmt: skip
    click.echo(f"turns_mean={stats['turns_mean']:.2f} policy_failures={stats['policy_failures']}")

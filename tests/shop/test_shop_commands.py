"""`shopsimrl shop` commands: help everywhere, play fed through stdin (CliRunner and a real
subprocess), expert statistics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from shopsimrl.cli import main
from shopsimrl.shop import ExpertPolicy, ShopEnv, format_tool_call, generate_catalog, load_split


@pytest.mark.parametrize("args", [["shop"], ["shop", "play"], ["shop", "expert"]])
def test_every_command_has_help_with_an_example(args):
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example: shopsimrl shop" in result.output


def _expert_lines(task_index: int) -> list[str]:
    catalog = generate_catalog(seed=0, num_products=2000)
    task = load_split(catalog, "train")[task_index]
    env = ShopEnv(catalog)
    env.reset(task=task, seed=0)
    expert, lines = ExpertPolicy(), []
    while True:
        call = expert.next_action(env)
        # alternate the two input forms a person may type
        lines.append(
            json.dumps(call.to_dict()) if len(lines) % 2 else format_tool_call(call).replace("\n", " ")
        )
        _, _, terminated, _, _ = env.step(call)
        if terminated:
            return lines


def test_play_with_clirunner_shows_prompt_tools_observations_and_outcome():
    lines = _expert_lines(2)
    result = CliRunner().invoke(main, ["shop", "play", "--split", "train", "--index", "2", "--show-gold"],
                                input="\n".join(lines) + "\n")  # fmt: skip
    out = result.output
    assert result.exit_code == 0, out
    assert "== task train-0-00002 (split train); the rendered prompt follows ==" in out
    assert "<|im_start|>system\nYou are a shopping assistant" in out and out.count("<tools>\n") == 1
    assert "== offered tools: search ==" in out
    assert "== offered tools changed (a new segment starts): search, view_product ==" in out
    assert out.count("<tool_response>") == len(lines)
    outcome = json.loads(out.split("== outcome ==\n")[1].split("== gold audit")[0])
    assert (outcome["reward"], outcome["success"]) == (1.0, True)
    assert '"privileged": true' in out


def test_play_in_a_real_subprocess_reports_policy_failures_and_end_of_input():
    stdin = 'hello there\n{"name": "browse", "arguments": {}}\n'
    proc = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "shop", "play", "--task-id", "validation-0-00001"],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "== policy failure: malformed_tool_call ==" in proc.stdout
    assert "== policy failure: unknown_tool ==" in proc.stdout
    assert "== end of input ==" in proc.stdout
    assert '"finish": "in_progress"' in proc.stdout and "gold audit" not in proc.stdout


def test_play_rejects_bad_task_selection():
    result = CliRunner().invoke(main, ["shop", "play", "--split", "test", "--index", "999"])
    assert result.exit_code == 1
    assert "Error: --index 999 is out of range: split test has 62 tasks" in result.output
    result = CliRunner().invoke(main, ["shop", "play", "--task-id", "train-5-00001"])
    assert (
        "Error: unknown task id 'train-5-00001': the task belongs to catalog seed 5, this catalog has seed 0"
        in result.output
    )


def test_expert_command_prints_statistics():
    result = CliRunner().invoke(main, ["shop", "expert", "--tasks", "15", "--split", "validation", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats == {"split": "validation", "tasks": 15, "noise": 0.0, "success_rate": 1.0, "reward_mean": 1.0,
                     "strict_reward_mean": 1.0, "turns_mean": stats["turns_mean"], "policy_failures": 0}  # fmt: skip
    assert 5.0 <= stats["turns_mean"] <= 6.0
    text = CliRunner().invoke(main, ["shop", "expert", "--tasks", "5", "--noise", "0.5"]).output
    assert text.startswith("split=train tasks=5 noise=0.5\nsuccess_rate=")
    bad = CliRunner().invoke(main, ["shop", "expert", "--tasks", "0"])
    assert bad.exit_code == 1 and "Error: --tasks must be at least 1, got 0" in bad.output

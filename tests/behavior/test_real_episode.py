"""The analysis of a real episode: the agent loop on a real ShopEnv with the scripted expert's text,
turned into slime Samples and a group trace by the same code the hooks use."""

from __future__ import annotations

import asyncio
import csv
import sys
from pathlib import Path

from shopsimrl.behavior import analyze_runs
from shopsimrl.config import ShopSimOptions
from shopsimrl.contract import Arm, Sample, ShopSimMeta
from shopsimrl.metrics import summarize_group
from shopsimrl.models import tiny_tokenizer
from shopsimrl.records import build_group_trace, write_group_trace
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.segments import trajectory_to_samples
from shopsimrl.shop import generate_catalog, load_split

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from expert_generator import ExpertTextGenerator  # noqa: E402


def test_a_real_split_episode_is_counted_as_one_episode(tmp_path: Path) -> None:
    catalog = generate_catalog(seed=0, num_products=500)
    task = load_split(catalog, "train")[0]
    tokenizer = tiny_tokenizer()
    options = ShopSimOptions(
        run_dir=str(tmp_path), max_turns=12, max_new_tokens_per_turn=256, max_context_tokens=8192
    )
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=ExpertTextGenerator(catalog, task, tokenizer),
        options=options, skill_texts=[], sampling_params={"temperature": 1.0},
    ))  # fmt: skip
    meta = ShopSimMeta(task_id=task.task_id, group_key=f"{task.task_id}#g0", arm=Arm.SKILL_FREE, q=1.0)
    template = Sample(index=0, group_index=0, prompt="", status=Sample.Status.PENDING)
    samples = trajectory_to_samples(trajectory, template=template, meta=meta)
    stage = tmp_path / "runs" / "round" / "train"
    write_group_trace(stage, build_group_trace(summarize_group(samples), samples, 0, "reward"))

    analyze_runs([stage.parent], tmp_path / "out")
    with (tmp_path / "out" / "episodes.csv").open(newline="") as handle:
        [row] = list(csv.DictReader(handle))
    assert int(row["segments"]) == len(trajectory.segments) == len(samples) > 1
    assert int(row["model_turns"]) == trajectory.num_turns
    assert int(row["generated_tokens"]) == sum(sum(s.loss_mask) for s in trajectory.segments)
    calls = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    expected = {}
    for text in calls:
        name = text.split("<function=", 1)[1].split(">", 1)[0]  # the expert writes Qwen3.5's XML form
        expected[name] = expected.get(name, 0) + 1
    assert row["tool_calls"] == ";".join(f"{k}:{expected[k]}" for k in sorted(expected))
    assert (row["ending"], row["failure_mode"], row["success"], row["invalid_calls"]) == (
        "checkout",
        "success",
        "1",
        "0",
    )

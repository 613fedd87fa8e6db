"""Benchmark: behaviour analysis of 1M synthetic episodes with flat memory (docs/benchmarks.md).

Each measurement runs in a fresh process and reports its wall time and peak RSS (ru_maxrss):

* stream N: the analysis as shipped (`tally_traces` -> `Tally` + streamed episodes.csv + aggregate
  CSVs) over N synthetic episodes, 8 per group, 64 groups per rollout step, built from a fixed pool
  of 256 validated group traces (1-3 segments, 1-12 turns, valid and invalid tool calls, every ending);
* list N (the peer): the obvious non-streaming version — every `EpisodeFacts` kept in a list, then
  tallied — on the same input;
* disk N: `analyze_runs` end to end on N episodes written as real trace files (read, JSON, schema
  validation, plots, report);
* baseline: a process that only imports the same modules.

    .venv/bin/python bench/bench_behavior.py                       # 1M streamed, peers at 100k / 1M
    .venv/bin/python bench/bench_behavior.py --episodes 200000 --disk-episodes 8000   # quicker
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

EPISODES_PER_GROUP = 8
GROUPS_PER_STEP = 64
POOL = 256
ARMS = ("skill_free", "assisted", "assisted_empty")


def _pool(seed: int = 0) -> list:
    from shopsimrl.records import GroupTrace
    from shopsimrl.shop import ToolCall, format_tool_call
    from shopsimrl.shop.observations import PolicyFailureKind, error_observation

    rng = random.Random(seed)
    gold = {
        "product_type": "mug",
        "attributes": {"material": "steel"},
        "options": {"size": "m"},
        "price_ceiling": 50.0,
    }
    head = [
        {"role": "system", "content": "You are a shopping assistant."},
        {"role": "user", "content": "a mug"},
    ]
    tools = ("search", "view", "select_option", "add_to_cart")
    errors = (
        PolicyFailureKind.MALFORMED_TOOL_CALL,
        PolicyFailureKind.BAD_ARGUMENTS,
        PolicyFailureKind.INVALID_ACTION,
    )

    def trajectory(rollout_id: int) -> dict:
        kind = rng.choices(["checkout", "turn_limit", "length", "technical"], [6, 2, 1, 0.3])[0]
        turns = rng.randint(1, 12)
        messages = list(head)
        for _ in range(turns - 1):
            if rng.random() < 0.15:
                messages += [{"role": "assistant", "content": "let me think"},
                             {"role": "tool", "content": error_observation(rng.choice(errors), "bad")}]  # fmt: skip
            else:
                call = format_tool_call(
                    ToolCall(rng.choice(tools), {"query": "mug"}), rng.choice(["json", "xml"])
                )
                messages += [
                    {"role": "assistant", "content": call},
                    {"role": "tool", "content": '{"results": []}'},
                ]
        if kind == "length":
            messages.append({"role": "assistant", "content": "<tool_call> ..."})
        elif kind != "technical":
            messages += [{"role": "assistant", "content": format_tool_call(ToolCall("checkout", {}))},
                         {"role": "tool", "content": '{"done": true}'}]  # fmt: skip
        count = rng.choice([1, 1, 2, 3])
        cut = [
            0,
            *sorted(rng.sample(range(2, len(messages)), min(count - 1, len(messages) - 2))),
            len(messages),
        ]
        segments = [
            {"segment_index": i, "segment_count": len(cut) - 1, "sample_index": None,
             "status": "truncated" if kind == "length" and i == len(cut) - 2 else "completed",
             "total_tokens": 900, "response_tokens": 120, "trained_tokens": rng.randint(10, 200),
             "messages": messages[cut[i]:cut[i + 1]]}
            for i in range(len(cut) - 1)
        ]  # fmt: skip
        success = kind == "checkout" and rng.random() < 0.4
        line = {"product_type": "mug", "attributes": {"material": "steel"}, "price": 40.0,
                "selected_options": {"size": "m" if success else rng.choice(["s", "m"])}}  # fmt: skip
        if kind == "technical":
            outcome = {"scorable": False, "technical_error": {"kind": "model_service", "message": "HTTP 503"}}
            audit = None
        else:
            outcome = {"reward": 1.0 if success else 0.5, "strict_reward": float(success), "success": success,
                       "scorable": True}  # fmt: skip
            finish = {"checkout": "checkout", "turn_limit": "turn_limit", "length": "in_progress"}[kind]
            audit = {"gold": gold, "finish": finish, "purchased": [line] if kind == "checkout" else []}
        return {"rollout_id": rollout_id, "outcome": outcome, "gold_audit": audit, "segments": segments}

    return [
        GroupTrace.model_validate(
            {
                "rollout_step": 0,
                "group_index": g,
                "group_key": f"t{g}#g",
                "task_id": f"t{g}",
                "split": "train",
                "arm": ARMS[g % 3],
                "mask": [],
                "q": 0.3,
                "rho": {},
                "technical_error": False,
                "all_wrong": False,
                "zero_std": False,
                "trajectories": [trajectory(g * EPISODES_PER_GROUP + i) for i in range(EPISODES_PER_GROUP)],
            }
        )  # fmt: skip
        for g in range(POOL)
    ]


def synthetic_traces(episodes: int) -> Iterator:
    pool = _pool()
    for g in range(episodes // EPISODES_PER_GROUP):
        yield pool[g % POOL].model_copy(update={"rollout_step": g // GROUPS_PER_STEP, "group_index": g})


def _worker(mode: str, episodes: int, out: Path) -> dict:
    from shopsimrl.behavior import Tally, group_episodes, tally_traces
    from shopsimrl.behavior.tables import EPISODE_COLUMNS, StreamingCsv, write_aggregate_tables

    start = time.perf_counter()
    tally = Tally()
    if mode == "stream":
        with StreamingCsv(out / "episodes.csv", EPISODE_COLUMNS) as episodes_csv:
            tally_traces(synthetic_traces(episodes), "r0", tally, episodes_csv)
    elif mode == "list":
        kept = [e for trace in synthetic_traces(episodes) for e in group_episodes(trace, "r0")]
        for episode in kept:
            tally.add(episode)
    elif mode == "disk":
        from shopsimrl.behavior import analyze_runs

        tally = analyze_runs([out / "runs" / "r0"], out / "analysis").tally
    if mode != "disk":
        write_aggregate_tables(out, tally, {})
    seconds = time.perf_counter() - start
    counted = tally.by_arm[("r0", "all")].episodes if tally.rounds else 0
    return {"mode": mode, "episodes": counted, "seconds": seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip


def _run(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _write_disk_round(root: Path, episodes: int) -> None:
    from shopsimrl.records import write_group_traces

    batch = []
    for trace in synthetic_traces(episodes):
        batch.append(trace)
        if len(batch) == GROUPS_PER_STEP:
            write_group_traces(root / "runs" / "r0" / "train", batch)
            batch = []
    if batch:
        write_group_traces(root / "runs" / "r0" / "train", batch)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--peer-episodes", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--disk-episodes", type=int, default=40_000)
    parser.add_argument("--worker", choices=["stream", "list", "disk", "baseline"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker == "baseline":
        import shopsimrl.behavior  # noqa: F401
        import shopsimrl.behavior.tables  # noqa: F401

        print(
            json.dumps(
                {
                    "mode": "baseline",
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                }
            )
        )
        return
    if args.worker:
        print(json.dumps(_worker(args.worker, args.episodes, args.out)))
        return

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    print(f"CPU: {cpu}; Python {platform.python_version()}; command: {' '.join(sys.argv)}")
    results = [_run(["--worker", "baseline"])]
    with tempfile.TemporaryDirectory(prefix="bench-behavior-") as tmp:
        for n in sorted({min(args.peer_episodes or [args.episodes]), args.episodes}):
            results.append(_run(["--worker", "stream", "--episodes", str(n), "--out", tmp]))
        for n in args.peer_episodes:
            results.append(_run(["--worker", "list", "--episodes", str(n), "--out", tmp]))
        if args.disk_episodes:
            _write_disk_round(Path(tmp), args.disk_episodes)
            results.append(_run(["--worker", "disk", "--episodes", str(args.disk_episodes), "--out", tmp]))
    print(f"{'mode':<9} {'episodes':>10} {'seconds':>9} {'episodes/s':>11} {'peak RSS MiB':>13}")
    for r in results:
        rate = r["episodes"] / r["seconds"] if r.get("seconds") else float("nan")
        print(
            f"{r['mode']:<9} {r.get('episodes', 0):>10} {r.get('seconds', 0):>9.1f} {rate:>11.0f} {r['peak_rss_mib']:>13.1f}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()

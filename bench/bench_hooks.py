"""Hook overhead of the monitoring hooks: record (all-samples) + enrich (rollout log).

    .venv/bin/python bench/bench_hooks.py                       # 64 groups x 8 trajectories x 4 segments
    .venv/bin/python bench/bench_hooks.py --scaling             # linearity up to 100k samples
    .venv/bin/python bench/bench_hooks.py --trace-dir /dev/shm  # trace files on tmpfs

Reports, per configuration, the median over repeats of the record hook and the enrich hook, and
the in-memory share of `record` (parse, summarise, build and serialise traces), measured on its own;
the rest of `record` is the file writes (one atomic, fsynced JSON per group, plus triage lines),
which depend on the file system more than on our code.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from shopsimrl import slime_metrics
from shopsimrl.contract import Arm
from shopsimrl.metrics import summarize_group
from shopsimrl.metrics.groups import flatten_group, parse_metas
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.records import build_group_trace

RHO = {"c1": 0.5, "c2": 0.5, "c3": 0.3}


def _groups(n_groups: int, n_traj: int, n_seg: int) -> list[list]:
    groups = []
    for g in range(n_groups):
        rewards = [Traj(((g + t) % 3) / 2, segments=n_seg) for t in range(n_traj)]
        arm = (Arm.SKILL_FREE, Arm.ASSISTED, Arm.ASSISTED_EMPTY)[g % 3]
        mask = ("c1", "c3") if arm is Arm.ASSISTED else ()
        groups.append(make_group(g, rewards, arm=arm, mask=mask, rho=RHO, first_index=g * n_traj * n_seg))
    return groups


def _time(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(n_groups: int, n_traj: int, n_seg: int, repeats: int, trace_dir: str | None) -> dict[str, float]:
    groups = _groups(n_groups, n_traj, n_seg)
    accepted = [s for g in groups[: n_groups // 2] for s in flatten_group(g)]
    record_s, enrich_s, trace_s = [], [], []
    with tempfile.TemporaryDirectory(dir=trace_dir) as tmp:
        args = SimpleNamespace(shopsim={"run_dir": str(Path(tmp) / "train"), "rho": RHO, "full_skill_retry": False},
                               use_wandb=False, start_rollout_id=None)
        for _ in range(repeats):
            slime_metrics.reset_process_state()
            args.shopsim_rollout_step = 0  # as the local driver does before each rollout
            start = time.perf_counter()
            slime_metrics.record_generated_rollout_groups(args, groups, None)
            middle = time.perf_counter()
            slime_metrics.enrich_rollout_metrics(0, args, accepted, {}, 1.0)
            end = time.perf_counter()
            record_s.append(middle - start)
            enrich_s.append(end - middle)
            # The in-memory share of `record`: parse, summarise, build and serialise every trace
            # (everything but the atomic, fsynced file writes).
            start = time.perf_counter()
            for g in groups:
                leaves = flatten_group(g)
                metas = parse_metas(leaves)
                trace = build_group_trace(summarize_group(leaves, metas), leaves, 0, "reward", metas)
                json.dumps(trace.model_dump(mode="json"), ensure_ascii=False)
            trace_s.append(time.perf_counter() - start)
    med = statistics.median
    return {"samples": n_groups * n_traj * n_seg, "record_ms": med(record_s) * 1e3, "enrich_ms": med(enrich_s) * 1e3,
            "in_memory_ms": med(trace_s) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trace-dir", default=None, help="parent directory of the run dir (default: system temp)")
    ns = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, trace dir {ns.trace_dir or tempfile.gettempdir()}")
    configs = [(64, 8, 4)]
    if ns.scaling:
        configs += [(128, 8, 4), (512, 8, 4), (1024, 8, 4), (3125, 8, 4)]  # 3125 x 8 x 4 = 100k samples
    print("| samples | record+enrich ms | record ms | enrich ms | record in memory ms | record file writes ms | us/sample |")
    print("|---|---|---|---|---|---|---|")
    for n_groups, n_traj, n_seg in configs:
        r = measure(n_groups, n_traj, n_seg, ns.repeats if n_groups <= 512 else 3, ns.trace_dir)
        total = r["record_ms"] + r["enrich_ms"]
        print(f"| {r['samples']} | {total:.1f} | {r['record_ms']:.1f} | {r['enrich_ms']:.1f} | {r['in_memory_ms']:.1f} "
              f"| {r['record_ms'] - r['in_memory_ms']:.1f} | {total * 1e3 / r['samples']:.1f} |")


if __name__ == "__main__":
    main()

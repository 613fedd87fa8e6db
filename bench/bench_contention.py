"""How the local backend's torch work degrades beside one competing CPU-bound process, per thread setting.

The workload (one subprocess per setting, SmolLM2-135M as the demo trains it): 3 warm-start
supervised steps on the expert's episodes (2 episodes a step, top 8 layers trained) and one probe
wave of 8 episodes decoded as one batch (the demo's rollout path). Each setting runs quiet, then
beside one `nice -n 19` busy loop (what a user's laptop always has), and the table shows the ratio.

Settings: torch's default (as many threads as cores, OpenMP's default wait policy: threads spin
before they sleep), `OMP_WAIT_POLICY=PASSIVE` (waiting threads sleep at once), and 1 thread.
Stop every other process first: the quiet figures need an idle machine.

    .venv/bin/python bench/bench_contention.py [--settings default,passive,one] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one": {"OMP_NUM_THREADS": "1"},
}
_WORKLOAD = r'''
import asyncio, json, sys, time
import torch
from shopsimrl.config.options import validate_options
from shopsimrl.local.run import freeze_below
from shopsimrl.local.warm_start import expert_items, sft_step, probe
from shopsimrl.models.smollm2 import load_smollm2
from shopsimrl.rollout.generators import BatchedLocalHFGenerator
from shopsimrl.shop import generate_catalog, load_split
level = sys.argv[1]
loaded = load_smollm2()
model, tok = loaded.model, loaded.tokenizer
freeze_below(model, 8)
catalog = generate_catalog(seed=0, level=level)
tasks = load_split(catalog, "train", limit=8)
options = validate_options({"run_dir": "/tmp/bench-contention", "tool_call_format": "json", "max_turns": 6,
                            "max_new_tokens_per_turn": 64, "catalog": {"seed": 0, "level": level}}, "bench")
items = [i for t in tasks[:6] for i in expert_items(t, catalog, tok, options)]
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
started = time.perf_counter()
for step in range(3):
    optimizer.zero_grad(set_to_none=True)
    sft_step(model, items[2 * step: 2 * step + 2], 4096)
    optimizer.step()
sft = time.perf_counter() - started
generator = BatchedLocalHFGenerator(model, tok, seed=0)
params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64, "stop": None,
          "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
          "spaces_between_special_tokens": False}
started = time.perf_counter()
probe(tasks[:2], catalog, tok, generator, options, 4, params, 0)
rollout = time.perf_counter() - started
print(json.dumps({"sft_s": sft, "rollout_s": rollout, "threads": torch.get_num_threads()}))
'''


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def measure(setting: str, level: str, competitor: bool) -> dict[str, float]:
    env = {**os.environ, **SETTINGS[setting], "PYTHONPATH": str(ROOT)}
    busy = None
    if competitor:
        busy = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
    try:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _WORKLOAD, level], cwd=ROOT, env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["wall_s"] = time.perf_counter() - started
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="default,passive,one")
    parser.add_argument("--level", default="easy")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    machine = {"cpu": cpu_model(), "cores": os.cpu_count()}
    print(f"machine: {machine['cpu']}, {machine['cores']} cores; workload: 3 SFT steps + 8 probe episodes "
          f"({args.level} level)", flush=True)  # fmt: skip
    rows = []
    for setting in args.settings.split(","):
        for competitor in (False, True):
            print(f"  {setting} {'with one busy process' if competitor else 'quiet'} ...", flush=True)
            result = measure(setting, args.level, competitor)
            rows.append({"setting": setting, "competitor": competitor, **result})
            print(f"    sft {result['sft_s']:.1f} s, rollout {result['rollout_s']:.1f} s "
                  f"({result['threads']} threads)", flush=True)  # fmt: skip
    print("| setting | sft quiet | sft busy | ratio | rollout quiet | rollout busy | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for setting in args.settings.split(","):
        quiet = next(r for r in rows if r["setting"] == setting and not r["competitor"])
        busy = next(r for r in rows if r["setting"] == setting and r["competitor"])
        print(f"| {setting} | {quiet['sft_s']:.1f} s | {busy['sft_s']:.1f} s | {busy['sft_s'] / quiet['sft_s']:.2f}x | "
              f"{quiet['rollout_s']:.1f} s | {busy['rollout_s']:.1f} s | {busy['rollout_s'] / quiet['rollout_s']:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

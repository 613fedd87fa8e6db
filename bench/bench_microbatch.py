"""One GRPO optimizer step of a real demo rollout: the local backend's scorer now, and as it was (the peer).

The samples are a demo rollout's multi-turn segments, rebuilt from its traces (each segment = the
conversation so far rendered with the checkpoint's chat template; its assistant turn in the loss, the
tool answer after it masked). Their lengths are the demo's (mean 1,189 tokens against 1,211 in the
run), but every segment is rendered with the tools of the episode's opening: the real driver starts a
new segment when the offered tools change and re-renders the system prompt with them, so its segments
do not nest. This measures a profile with a fixed tool set, which the demo has been since it lists every
tool from the first turn (`catalog.tools: all`: one segment per episode; docs/local_backend.md). The
same optimizer step runs in a fresh subprocess per scorer (so each peak RSS is its own):

* `now`: `shopsimrl.local.grpo` — a trajectory's earlier segments read off its longest one, a
  shared prompt run once, micro-batches packed by those forward positions;
* `before` (the peer): `shopsimrl/local/grpo.py` at `--peer` (git show), which ran every segment
  and packed by rows x longest sample.

Both at the demo's `max_tokens_per_gpu` (4096) and the demo model's 8 trainable top layers.

    .venv/bin/python bench/bench_microbatch.py [--traces runs/local-demo-round-000/train/traces/step-0] \
        [--checkpoint checkpoints/warm-start-cache/<key>/model] [--peer 205f3c2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_run import cpu_model  # noqa: E402

MAX_TOKENS = 4096
TRAINABLE_TOP_LAYERS = 8


def build_items(traces: Path, tokenizer: Any, item_class: Any) -> list[Any]:
    """Every segment of every trajectory: the conversation so far as the driver renders it (the checkpoint's
    template with ShopSim's tools), the assistant turn in the loss and the tool answer after it masked."""
    from shopsimrl.rollout.prompting import ChatRenderer
    from shopsimrl.shop import generate_catalog, load_split
    from shopsimrl.shop.environment import ShopEnv

    renderer = ChatRenderer(tokenizer)
    catalog = generate_catalog(seed=0, num_products=1000, level="budget")  # the demo's (configs/local/demo_round.yaml)
    tasks = {task.task_id: task for task in load_split(catalog, "train")}
    items = []
    for path in sorted(traces.glob("group-*.json")):
        group = json.loads(path.read_text(encoding="utf-8"))
        env = ShopEnv(catalog)
        env.reset(task=tasks[group["task_id"]], seed=0)
        tools = env.offered_tools()  # what the episode's opening showed
        for trajectory in group["trajectories"]:
            advantage = 1.0 if trajectory["outcome"]["success"] else -1.0
            conversation: list[dict[str, Any]] = []
            for segment in trajectory["segments"]:
                new = [dict(m) for m in segment["messages"]]
                turn = next((k for k, m in enumerate(new) if m["role"] == "assistant"), None)
                if turn is None:
                    conversation += new
                    continue
                prompt = _ids(tokenizer, renderer.prompt_text(conversation + new[:turn], tools))
                spoken = _ids(tokenizer, renderer.prompt_text(conversation + new[: turn + 1], tools))
                conversation += new
                full = _ids(tokenizer, renderer.prompt_text(conversation, tools))
                response = len(full) - len(prompt)
                said = max(0, min(len(spoken) - len(prompt), response))
                if response < 1 or full[: len(prompt)] != prompt:
                    continue
                items.append(
                    item_class(
                        tokens=full,
                        response_length=response,
                        loss_mask=[1] * said + [0] * (response - said),
                        advantage=advantage,
                        rollout_key=(path.name, trajectory["rollout_id"]),
                    )
                )
    return items


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _grpo_at(revision: str) -> Any:
    """shopsimrl/local/grpo.py as it was at `revision` (the peer), imported from a temporary file."""
    import importlib.util
    import tempfile

    source = subprocess.run(
        ["git", "show", f"{revision}:shopsimrl/local/grpo.py"], check=True, capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    path = Path(tempfile.mkdtemp()) / "grpo_peer.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("grpo_peer", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_peer"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _before_positions(module: Any, items: Sequence[Any], batch: Sequence[int]) -> int:
    """What the previous scorer ran: the shared prompt once when it was long enough, else rows x longest."""
    longest = max(len(items[i].tokens) for i in batch)
    prefix = module._shared_prompt_prefix(items, batch)
    if len(batch) > 1 and prefix >= module.MIN_SHARED_PREFIX:
        return prefix + len(batch) * (longest - prefix)
    return len(batch) * longest


def measure(packing: str, traces: Path, checkpoint: str | None, revision: str) -> dict[str, Any]:
    import torch

    from shopsimrl.local import grpo
    from shopsimrl.local.run import freeze_below

    if checkpoint:
        from shopsimrl.models.checkpoint import load_checkpoint

        model, tokenizer = load_checkpoint(checkpoint)
    else:
        from shopsimrl.models.smollm2 import load_smollm2

        loaded = load_smollm2()
        model, tokenizer = loaded.model, loaded.tokenizer
    freeze_below(model, TRAINABLE_TOP_LAYERS)
    items = build_items(traces, tokenizer, grpo.TrainItem)
    if packing == "before":
        trainer_module = _grpo_at(revision)
        batches = trainer_module.micro_batches(items, range(len(items)), MAX_TOKENS)
        positions = sum(_before_positions(trainer_module, items, b) for b in batches)
    else:
        trainer_module = grpo
        batches = grpo.micro_batches(items, range(len(items)), MAX_TOKENS)
        positions = sum(grpo.forward_positions(items, b) for b in batches)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-6)
    config = trainer_module.GrpoConfig(rollout_temperature=0.7, max_tokens_per_microbatch=MAX_TOKENS)
    trainer = trainer_module.GrpoTrainer(model, optimizer, config)
    trajectories = len({item.rollout_key for item in items})
    start = time.perf_counter()
    result = trainer.train_rollout(items, rollout_id=0, global_batch_size=trajectories)
    seconds = time.perf_counter() - start
    return {
        "packing": packing,
        "samples": len(items),
        "trajectories": trajectories,
        "sample_tokens": sum(len(item.tokens) for item in items),
        "micro_batches": len(batches),
        "forward_positions": positions,
        "step_s": seconds,
        "loss": result.step_metrics[0]["train/loss"],
        "grad_norm": result.step_metrics[0]["train/grad_norm"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="runs/local-demo-round-000/train/traces/step-0")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--peer", default="205f3c2", help="the revision whose grpo.py is the peer")
    parser.add_argument("--one", choices=["now", "before"], help=argparse.SUPPRESS)  # the subprocess
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, Path(args.traces), args.checkpoint, args.peer)))
        return
    print(f"machine: {cpu_model()}, python {platform.python_version()}", flush=True)
    rows = []
    for packing in ("now", "before"):
        command = [sys.executable, __file__, "--one", packing, "--traces", args.traces, "--peer", args.peer]
        if args.checkpoint:
            command += ["--checkpoint", args.checkpoint]
        print(f"{packing}: one optimizer step ...", flush=True)
        out = subprocess.run(command, check=True, capture_output=True, text=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print("| scorer | samples | micro-batches | forward positions | step s | peak RSS MiB | loss | grad norm |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['packing']} | {r['samples']} | {r['micro_batches']} | {r['forward_positions']} | "
            f"{r['step_s']:.1f} | {r['peak_rss_mib']:.0f} | {r['loss']:.5f} | {r['grad_norm']:.4f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": cpu_model(), "rows": rows}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

"""The trainable layers' forward and backward on a shared prefix: split attention against the masked call.

`FrozenTrunk.top_shared` runs the rows' shared prompt once and every row's rest on top of it; the rest's
attention was one SDPA call with an explicit mask (the path before) and is now `split_attention` (two
unmasked calls, exact gradients; shopsimrl/local/split_attention.py). This bench times both on the same
inputs in one process, interleaved (A, B, A, B, ...) so that a noisy host slows both alike, and reports
medians and how far the gradients agree:

    .venv/bin/python bench/bench_split_attention.py --weights /tmp/demo-ws.pt --json split.json

Inputs: the demo's model (configs/local/demo_round.yaml: SmolLM2-135M, top 8 of 30 layers trained)
with bench_speed.py's warm-started weights when `--weights` names them, and a warm-start batch (2 expert
episodes of different tasks, ~2,000 tokens each, sharing the ~1,077-token system prompt), or `--rows`
episodes. The loss is a fixed random projection of every final hidden state (the cost does not depend
on it).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_speed import cpu, expert_batch, progress, restore, setup, warm_weights  # noqa: E402

from shopsimrl.local.trunk import FrozenTrunk  # noqa: E402
from shopsimrl.rollout.generators.precision import compute_precision  # noqa: E402


def masked_top_shared(trunk: FrozenTrunk, bottoms: list[torch.Tensor], prefix: int) -> torch.Tensor:
    """The path before: `top_shared` with the rest's attention masked ([rows, prefix + width] padding
    mask, transformers' SDPA), every position's final hidden state, rows flattened."""
    top = trunk.decoder.layers[trunk.split :]
    cache = DynamicCache()
    head_in, head_positions = bottoms[0][:prefix][None], torch.arange(prefix)[None]
    head = trunk._run(top, head_in, head_positions, trunk._mask(head_in, head_positions, None, None), cache)[0]
    cache.batch_repeat_interleave(len(bottoms))
    rests = [b.shape[0] - prefix for b in bottoms]
    width = max(rests)
    suffix = bottoms[0].new_zeros((len(bottoms), width, bottoms[0].shape[-1]))
    mask = torch.zeros((len(bottoms), prefix + width), dtype=torch.long)
    mask[:, :prefix] = 1
    for row, bottom in enumerate(bottoms):
        suffix[row, : rests[row]] = bottom[prefix:]
        mask[row, prefix : prefix + rests[row]] = 1
    tail_positions = torch.arange(prefix, prefix + width)[None]
    tail = trunk._run(top, suffix, tail_positions, trunk._mask(suffix, tail_positions, mask, cache), cache)
    return trunk.decoder.norm(torch.cat([head] + [tail[row, : rests[row]] for row in range(len(bottoms))]))


def split_top_shared(trunk: FrozenTrunk, bottoms: list[torch.Tensor], prefix: int) -> torch.Tensor:
    """This code's path: `top_shared` at every position, in the same order as `masked_top_shared`."""
    positions = [(0, p) for p in range(prefix)]
    positions += [(row, p) for row, b in enumerate(bottoms) for p in range(prefix, b.shape[0])]
    return trunk.top_shared(bottoms, prefix, positions)


def timed_backward(fn: Any, trunk: FrozenTrunk, bottoms: list[torch.Tensor], prefix: int,
                   dtype: torch.dtype, projection: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:  # fmt: skip
    model = trunk.model
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    with compute_precision(dtype):
        hidden = fn(trunk, bottoms, prefix)
    (hidden.float() * projection[: hidden.shape[0]]).sum().backward()
    seconds = time.perf_counter() - started
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return seconds, grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/local/demo_round.yaml")
    parser.add_argument("--weights", default=None, help="bench_speed.py's warm-started weights (made if absent)")
    parser.add_argument("--rows", type=int, default=2, help="expert episodes sharing the system prompt")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    env = setup(options.config, "/tmp/bench-split-runs")
    restore(env["model"], warm_weights(env, options.weights))
    model = env["model"]
    model.train()
    trunk = FrozenTrunk.of(model)
    rng = random.Random(0)
    items = expert_batch(env, rng, options.rows)
    rows = [list(item.tokens[:-1]) for item in items]
    prefix = next((k for k in range(min(map(len, rows))) if len({r[k] for r in rows}) > 1), min(map(len, rows)))
    bottoms = trunk.hidden(rows)
    projection = torch.randn(sum(map(len, rows)), bottoms[0].shape[-1], generator=torch.Generator().manual_seed(0))
    report: dict[str, Any] = {"cpu": cpu(), "torch": torch.__version__, "command": " ".join(sys.argv),
                              "rows": [len(r) for r in rows], "shared_prefix": prefix}  # fmt: skip
    progress(f"{len(rows)} rows of {[len(r) for r in rows]} tokens, shared prefix {prefix}")
    for dtype in (torch.float32, torch.bfloat16):
        times: dict[str, list[float]] = {"masked": [], "split": []}
        grads: dict[str, dict[str, torch.Tensor]] = {}
        for repeat in range(options.repeats + 1):  # the first pair warms up (not counted)
            for name, fn in (("masked", masked_top_shared), ("split", split_top_shared)):
                seconds, grads[name] = timed_backward(fn, trunk, bottoms, prefix, dtype, projection)
                if repeat:
                    times[name].append(seconds)
            progress(f"{dtype}: repeat {repeat}: masked {times['masked'][-1] if repeat else 0:.2f} s, "
                     f"split {times['split'][-1] if repeat else 0:.2f} s")  # fmt: skip
        worst = max(
            float((grads["split"][n] - grads["masked"][n]).norm() / grads["masked"][n].norm()) for n in grads["masked"]
        )
        row = {name: {"median_s": statistics.median(t), "seconds": t} for name, t in times.items()}
        row["ratio"] = row["masked"]["median_s"] / row["split"]["median_s"]
        row["max_relative_gradient_difference"] = worst
        report[str(dtype).replace("torch.", "")] = row
        progress(f"{dtype}: masked {row['masked']['median_s']:.2f} s, split {row['split']['median_s']:.2f} s "
                 f"({row['ratio']:.2f}x), gradients within {worst:.1e} relative")  # fmt: skip
    text = json.dumps(report, indent=1)
    print(text)
    if options.json:
        Path(options.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

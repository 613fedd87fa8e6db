"""How close the demo's float32 warm-start step runs to this machine's float32 arithmetic (issue 37).

The frozen trunk, the rollout's hand-over, the head fold and split attention (bench_speed.py,
bench_split_attention.py) removed the work that was repeated; what is left is arithmetic the step
needs. This bench says how fast that arithmetic already runs, and so what a faster implementation of
the same float32 work could still gain:

* `peak`: torch's float32 (and bfloat16) matrix product rate on this machine: one 4,096-cube product,
  and the shapes of the demo's MLP over a warm-start batch.
* `step`: the demo's warm-start steps (2 expert episodes, its seed, lr and batches; the frozen trunk;
  SmolLM2-135M with the top 8 of 30 layers trained) under torch.profiler, after one unprofiled step.
  Each op's time goes to one of three classes: matrix products (`aten::mm`, `bmm`, `addmm`: FLOPs from
  their shapes), attention (CPU flash attention, forward and backward: FLOPs from the shapes, causal
  when the query and key lengths are equal, the backward counted as 2.5 forwards) and the rest
  (element-wise, copies, norms, softmax of the loss). Reported: seconds and GFLOP/s of each class, and
  the step's floor: its time had the products and the attention run at the 4,096-cube rate and the
  rest at no cost at all.

Progress goes to stderr; the report (with `lscpu`'s model name and torch's thread count) to stdout and
`--json`. Timing needs a quiet machine.

    .venv/bin/python bench/bench_floor.py --json floor.json
    .venv/bin/python bench/bench_floor.py --weights /tmp/demo-ws.pt --steps 3 --dtypes float32,bfloat16

`--weights` starts from bench_speed.py's warm-started weights (the cost does not depend on them; the
base weights are the default).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_speed import cpu, expert_batch, progress, restore, setup, warm_weights  # noqa: E402

from shopsimrl.local.trunk import FrozenTrunk  # noqa: E402
from shopsimrl.local.warm_start import sft_step  # noqa: E402
from shopsimrl.storage.atomic import atomic_write_json  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PRODUCTS = {"aten::mm", "aten::bmm", "aten::addmm"}
ATTENTION_FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"
ATTENTION_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
BACKWARD_PER_FORWARD = 2.5  # a flash backward's five products against the forward's two


def product_rate(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of `[m, k] @ [k, n]` in `dtype`, after 2 unmeasured products."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(k, n, generator=generator).to(dtype)
    for _ in range(2):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * m * k * n * repeats / (time.perf_counter() - started) / 1e9


def bench_peak(dtypes: list[str]) -> dict[str, Any]:
    out = {}
    for name in dtypes:
        dtype = DTYPES[name]
        out[name] = {
            "cube_4096_gflops": product_rate(4096, 4096, 4096, dtype, 5),
            "mlp_1830x576x1536_gflops": product_rate(1830, 576, 1536, dtype, 20),
            "mlp_1830x1536x576_gflops": product_rate(1830, 1536, 576, dtype, 20),
        }
        progress(f"peak [{name}]: 4,096 cube {out[name]['cube_4096_gflops']:.0f} GFLOP/s")
    return out


def op_flops(name: str, shapes: list[Any]) -> float:
    """FLOPs of one profiled op from its input shapes (0 for the classes not counted)."""
    if name in PRODUCTS:
        a, b = shapes[-2], shapes[-1]  # addmm's first input is the bias
        batch = a[0] if name == "aten::bmm" else 1
        return 2.0 * batch * a[-2] * a[-1] * b[-1]
    if name in (ATTENTION_FORWARD, ATTENTION_BACKWARD):
        # forward: (query, key, value, ...); backward: (grad_out, query, key, value, ...)
        query, key = (shapes[0], shapes[1]) if name == ATTENTION_FORWARD else (shapes[1], shapes[2])
        batch, heads, queries, dim = query
        keys = key[2]
        flops = 4.0 * batch * heads * queries * keys * dim  # scores and the weighted values
        if queries == keys:
            flops /= 2  # causal: only the keys at or before each query
        return flops * (BACKWARD_PER_FORWARD if name == ATTENTION_BACKWARD else 1.0)
    return 0.0


def op_class(name: str) -> str:
    if name in PRODUCTS:
        return "products"
    if name in (ATTENTION_FORWARD, ATTENTION_BACKWARD):
        return "attention"
    return "rest"


def classify(profile: Any, totals: dict[str, dict[str, float]]) -> None:
    """Add each class's self time (s) and GFLOP in `profile` to `totals`."""
    for event in profile.key_averages(group_by_input_shape=True):
        bucket = totals[op_class(event.key)]
        bucket["seconds"] += event.self_cpu_time_total / 1e6
        bucket["gflop"] += op_flops(event.key, event.input_shapes) * event.count / 1e9


def bench_step(env: dict[str, Any], weights: dict[str, torch.Tensor] | None, steps: int,
               dtype_name: str, peak_gflops: float) -> dict[str, Any]:  # fmt: skip
    """The warm start's steps as `warm_start()` takes them (same rng and batches), the first
    unprofiled, then `steps` profiled ones."""
    model, config = env["model"], env["config"]
    dtype = DTYPES[dtype_name]
    restore(model, weights or env["base"])
    model.train()
    trunk = FrozenTrunk.of(model)
    rng = random.Random(config.model.seed)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.warm_start.lr, weight_decay=0.0
    )
    classes = {name: {"seconds": 0.0, "gflop": 0.0} for name in ("products", "attention", "rest")}
    seconds, tokens = 0.0, 0
    for step in range(steps + 1):
        batch = expert_batch(env, rng, min(config.warm_start.batch_size, len(env["tasks"])))
        optimizer.zero_grad(set_to_none=True)
        if step == 0:
            sft_step(model, batch, 4096, trunk, dtype)
            optimizer.step()
            continue
        started = time.perf_counter()
        with torch.profiler.profile(record_shapes=True) as profile:
            sft_step(model, batch, 4096, trunk, dtype)
        took = time.perf_counter() - started
        optimizer.step()
        seconds += took
        tokens += sum(len(item.tokens) for item in batch)
        classify(profile, classes)
        progress(f"step [{dtype_name}] {step}/{steps}: {took:.2f} s")
    for bucket in classes.values():
        bucket["gflops"] = bucket["gflop"] / bucket["seconds"] if bucket["gflop"] else 0.0
        bucket["s_per_step"] = bucket["seconds"] / steps
    floor = (classes["products"]["gflop"] + classes["attention"]["gflop"]) / peak_gflops / steps
    return {
        "steps": steps,
        "tokens": tokens,
        "s_per_step": seconds / steps,
        "classes": classes,
        "floor_s_per_step": floor,
        "step_over_floor": seconds / steps / floor,
    }


def report(out: dict[str, Any]) -> None:
    print(f"# {out['cpu'].get('Model name', '?')}, torch threads {out['cpu']['torch_threads']}")
    for name, peak in out["peak"].items():
        print(f"peak [{name}]: " + ", ".join(f"{key} {value:.0f}" for key, value in peak.items()))
    for name, step in out["step"].items():
        print(
            f"warm-start step [{name}]: {step['s_per_step']:.2f} s ({step['tokens'] // step['steps']} tokens a step)"
        )
        for label, bucket in step["classes"].items():
            rate = f", {bucket['gflops']:.0f} GFLOP/s" if bucket["gflop"] else ""
            print(
                f"  {label:<9} {bucket['s_per_step']:.2f} s a step ({bucket['gflop'] / step['steps']:.0f} GFLOP){rate}"
            )
        print(f"  floor (products and attention at the 4,096-cube rate, the rest free): "
              f"{step['floor_s_per_step']:.2f} s; the step is {step['step_over_floor']:.2f}x it")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/local/demo_round.yaml")
    parser.add_argument(
        "--weights", default=None, help="bench_speed.py's warm-started weights (loaded if present)"
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="profiled warm-start steps (after one unprofiled)"
    )
    parser.add_argument("--dtypes", default="float32", help="comma-separated: float32, bfloat16")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    dtypes = [name.strip() for name in args.dtypes.split(",") if name.strip()]
    unknown = [name for name in dtypes if name not in DTYPES]
    if unknown:
        raise SystemExit(f"--dtypes: unknown {unknown}; choose from {sorted(DTYPES)}")
    if args.steps < 1:
        raise SystemExit(f"--steps {args.steps}: at least 1 profiled step is needed")
    out: dict[str, Any] = {"cpu": cpu(), "config": args.config}
    out["peak"] = bench_peak(dtypes)
    env = setup(args.config, str(Path("runs") / "bench-floor"))
    weights = warm_weights(env, args.weights) if args.weights else None
    out["step"] = {
        name: bench_step(env, weights, args.steps, name, out["peak"][name]["cube_4096_gflops"])
        for name in dtypes
    }
    report(out)
    if args.json:
        atomic_write_json(args.json, out)


if __name__ == "__main__":
    main()

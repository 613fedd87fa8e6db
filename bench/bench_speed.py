"""The CPU round's costs (issue 37), the path before the frozen trunk against the new one, in one
process on the same inputs: SmolLM2-135M-Instruct with the demo's top 8 of 30 layers trained.

* `warm_start`: `--warm-steps` supervised steps of the demo's warm start (2 expert episodes a step,
  its seed, batches and lr) from the base weights, once per path: `full` (every layer over every
  token: the path before) and `trunk` (the frozen layers once per token prefix, local/trunk.py).
  Reported: seconds a step, both paths' losses, the largest weight difference after the steps, and
  whether the two policies' next 8 episodes are token-identical.
* `update`: one demo rollout (6 groups of 2 through the demo's hooks, curriculum and sampling) on the
  warm-started weights, recorded for the trunk, then its GRPO update (one optimizer step, AdamW at the
  demo's lr) three times from the same weights: `full`; `trunk` (the frozen layers computed, each
  distinct token prefix once); `trunk_rollout` (what the rollout computed read back: the demo's path).
  Reported: seconds, micro-batches, the train metrics and the largest differences to `full` (metrics,
  relative gradient per tensor, weights after the step; the next 8 episodes of `full`'s and
  `trunk_rollout`'s policies, token-identical or not).
* `gate`: the gate's episodes (`--gate-episodes`, 20 in flight, the demo round's episode settings,
  validation tasks, two skill masks as the two arms) on the warm-started weights: where an episode's
  time goes (prefill: tokens encoded and reused, and how many no cache could have served; decode:
  steps, tokens, drafts; the rest: environment, rendering, Python). Identical tokens in every variant
  (`--gate-variants`: the generator's `draft_tokens` values; 4 is the default) are checked.

With `--dtypes float32,bfloat16` (the default) each part also runs `model.compute_dtype: bfloat16`
(autocast, float32 weights; rollout/generators/precision.py) beside float32 on the same inputs:
`warm_start` adds `trunk_bf16` (against `trunk`: seconds, losses, weights, the next 8 episodes of each
policy in its own precision); `update` adds `trunk_rollout_bf16` (the same samples and frozen-layer
output, against `trunk_rollout`: seconds, metrics, relative gradients, weights) and `rollout_bf16` (the
same rollout decoded in bfloat16: seconds, samples token-identical to float32's, where the others
first differ); `gate` runs every variant in both (`draft_tokens=4` and `draft_tokens=4,bfloat16`:
seconds, prefill/decode, successes, episodes identical to float32's and where the others first differ).
`--dtypes float32` runs what it ran before. `quality` (not in the default parts: ~20-40 min) runs the
demo's whole warm start in float32 and in bfloat16 (`--weights`, `--bf16-weights`: loaded when the
files exist, else made and saved) and `--quality-episodes` held-out episodes of each policy: successes
and token identity of the float32 policy decoded in bfloat16, and of the bfloat16-trained policy.

Progress goes to stderr; the report (with `lscpu`'s model name and torch's thread count) to stdout and
`--json`. Timing needs a quiet machine; the ratios within one run are the measurement.

    .venv/bin/python bench/bench_speed.py --weights /tmp/demo-ws.pt --json speed.json
    .venv/bin/python bench/bench_speed.py --parts update --weights /tmp/demo-ws.pt     # one part
    .venv/bin/python bench/bench_speed.py --parts quality --weights /tmp/demo-ws.pt --bf16-weights /tmp/demo-ws-bf16.pt

`--weights PATH` keeps the warm-started weights (loaded when the file exists; otherwise the demo's
warm start runs on the trunk path, ~2-4 min, and writes it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.local.config import RunConfig, load_round_train_config  # noqa: E402
from shopsimrl.local.driver import LocalDriver, base_sampling_params, build_args, flatten_groups, train_items  # noqa: E402
from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, micro_batches  # noqa: E402
from shopsimrl.local.run import load_model  # noqa: E402
from shopsimrl.local.trunk import FrozenTrunk  # noqa: E402
from shopsimrl.local.warm_start import expert_items, sft_step, warm_start  # noqa: E402
from shopsimrl.rollout.agent import run_trajectory  # noqa: E402
from shopsimrl.rollout.curriculum import ROLLOUT_STEP_ATTR  # noqa: E402
from shopsimrl.rollout.generators import BatchedLocalHFGenerator  # noqa: E402
from shopsimrl.shop import load_split  # noqa: E402
from shopsimrl.slime_metrics import reset_process_state  # noqa: E402

PARTS = ("warm_start", "update", "gate", "quality")
DEFAULT_PARTS = ("warm_start", "update", "gate")  # `quality` is asked for by name (it warm-starts twice)
FP32, BF16 = "float32", "bfloat16"  # model.compute_dtype's values (--dtypes)
# gate part only: bfloat16 compute over float32 KV caches, the generator's path before its caches
# stored bfloat16 (the peer of `bfloat16` in one run)
BF16_F32KV = "bfloat16-f32kv"
NEXT_EPISODES = 8  # episodes generated from each path's policy to check they stay token-identical
GATE_CONCURRENCY = 20  # configs/local/demo_round.yaml gate.generator.concurrency
GATE_LESSON = (
    "Before checkout, compare the product's attribute with the one the instruction names; "
    "if they differ, go back to the search results."
)  # the candidate arm's extra skill (a lesson as the Analyst writes them)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu() -> dict[str, Any]:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    pick = ("Model name", "Vendor ID", "CPU(s)", "Thread(s) per core", "L2 cache", "L3 cache")
    return {key: fields[key].strip() for key in pick if key in fields} | {
        "torch_threads": torch.get_num_threads()
    }


def setup(config_path: str, runs_root: str) -> dict[str, Any]:
    config = load_round_train_config(config_path, overrides={"run.runs_root": runs_root})
    model, tokenizer, _ = load_model(config)
    catalog = config.shopsim.catalog.build()
    tasks = load_split(catalog, config.shopsim.split)
    return {
        "config": config,
        "model": model,
        "tokenizer": tokenizer,
        "catalog": catalog,
        "tasks": tasks,
        "base": trained_weights(model),
    }


def trained_weights(model: Any) -> dict[str, torch.Tensor]:
    """Copies of the trainable parameters: all that differs between the policies compared here."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def restore(model: Any, trained: dict[str, torch.Tensor]) -> None:
    """Set the trainable parameters only: writing the frozen ones (even with the same values) bumps their
    versions, and a FrozenTrunk then drops what it stored, as it must for weights it cannot compare."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.copy_(trained[name])


def warm_weights(
    env: dict[str, Any], path: str | None, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The warm-started policy's trainable parameters (its frozen ones are the base model's), warm-started
    with `dtype` forwards (model.compute_dtype)."""
    model, config = env["model"], env["config"]
    if path and Path(path).exists():
        progress(f"warm-started weights from {path}")
        saved = torch.load(path, weights_only=True)
        frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
        if any(not torch.equal(saved[n], p) for n, p in frozen.items()):
            raise SystemExit(
                f"{path}: its frozen layers are not this model's (another base or trained layers)"
            )
        return {name: saved[name].clone() for name, p in model.named_parameters() if p.requires_grad}
    progress(f"the demo's warm start (trunk path, {dtype}) for the warm-started weights")
    restore(model, env["base"])
    generator = BatchedLocalHFGenerator(model, env["tokenizer"], seed=config.model.seed, compute_dtype=dtype)
    args = build_args(
        config, use_wandb=False, generator=generator, tokenizer=env["tokenizer"], catalog=env["catalog"]
    )
    warm_start(model, env["tokenizer"], generator, env["catalog"], env["tasks"], config.shopsim, config.warm_start,
               base_sampling_params(args), seed=config.model.seed, trunk=FrozenTrunk.of(model), compute_dtype=dtype,
               on_step=lambda step, loss, _: progress(f"  warm start step {step}: loss {loss:.4f}"))  # fmt: skip
    if path:
        torch.save(model.state_dict(), path)
    return trained_weights(model)


def max_weight_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest |difference| over the entries of the same-named tensors."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def expert_batch(env: dict[str, Any], rng: random.Random, size: int) -> list[Any]:
    """`size` tasks' expert episodes, drawn from `rng` as `warm_start()` draws a batch (the tasks, then
    each task's noise seed)."""
    config = env["config"]
    return [item for task in rng.sample(list(env["tasks"]), k=size)
            for item in expert_items(task, env["catalog"], env["tokenizer"], config.shopsim,
                                     noise=config.warm_start.expert_noise, seed=rng.randrange(1 << 30))]  # fmt: skip


# ---------------------------------------------------------------------- warm start
def bench_warm_start(env: dict[str, Any], steps: int, dtypes: list[str]) -> dict[str, Any]:
    """The warm start's supervised steps as `warm_start()` takes them (same rng, batches, optimizer)."""
    model, config = env["model"], env["config"]
    ws = config.warm_start
    out: dict[str, Any] = {"steps": steps, "batch_size": ws.batch_size}
    finals = {}
    for path in ("full", "trunk", *(["trunk_bf16"] if BF16 in dtypes else [])):
        restore(model, env["base"])
        model.train()
        trunk = None if path == "full" else FrozenTrunk.of(model)
        dtype = torch.bfloat16 if path.endswith("_bf16") else torch.float32
        rng = random.Random(config.model.seed)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=ws.lr, weight_decay=0.0
        )
        seconds, losses, tokens = [], [], 0
        for step in range(1, steps + 1):
            batch = expert_batch(env, rng, min(ws.batch_size, len(env["tasks"])))
            tokens += sum(len(item.tokens) for item in batch)
            started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            losses.append(sft_step(model, batch, 4096, trunk, dtype))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            seconds.append(time.perf_counter() - started)
            progress(f"warm start [{path}] step {step}/{steps}: {seconds[-1]:.1f} s, loss {losses[-1]:.5f}")
        finals[path] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        out[path] = {"s_per_step": sum(seconds) / steps, "seconds": seconds, "losses": losses,
                     "tokens": tokens, "trunk": None if trunk is None else trunk.stats.__dict__}  # fmt: skip
    out["speedup"] = out["full"]["s_per_step"] / out["trunk"]["s_per_step"]
    out["max_loss_difference"] = max(
        abs(a - b) for a, b in zip(out["full"]["losses"], out["trunk"]["losses"], strict=True)
    )
    out["max_weight_difference_after"] = max_weight_difference(finals["full"], finals["trunk"])
    out["next_episodes"] = same_episodes(env, finals["full"], finals["trunk"], NEXT_EPISODES)
    if "trunk_bf16" in finals:  # against the float32 trunk path: what bfloat16 alone changes
        bf16 = out["trunk_bf16"]
        bf16["speedup_vs_trunk"] = out["trunk"]["s_per_step"] / bf16["s_per_step"]
        bf16["max_loss_difference"] = max(
            abs(a - b) for a, b in zip(out["trunk"]["losses"], bf16["losses"], strict=True)
        )
        bf16["max_weight_difference_after"] = max_weight_difference(finals["trunk"], finals["trunk_bf16"])
        bf16["next_episodes"] = same_episodes(
            env, finals["trunk"], finals["trunk_bf16"], NEXT_EPISODES, (torch.float32, torch.bfloat16)
        )
    return out


def same_episodes(
    env: dict[str, Any],
    first: dict[str, torch.Tensor],
    second: dict[str, torch.Tensor],
    count: int,
    dtypes: tuple[torch.dtype, torch.dtype] = (torch.float32, torch.float32),
) -> dict[str, Any]:
    """Whether the two policies' next episodes are token-identical: `count` episodes each (validation
    tasks, temperature 0.7, fixed seeds, concurrent on the batched generator, each policy's generator
    in its `dtypes` entry), where the first that differs does, and each policy's successes."""
    model, catalog, tokenizer = env["model"], env["catalog"], env["tokenizer"]
    tasks = load_split(catalog, "validation")
    options = env["config"].shopsim
    runs = []
    for trained, dtype in zip((first, second), dtypes, strict=True):
        restore(model, trained)
        model.eval()
        generator = BatchedLocalHFGenerator(model, tokenizer, seed=0, compute_dtype=dtype)

        async def all_episodes(generator: Any = generator) -> list[Any]:
            return list(await asyncio.gather(*(
                run_trajectory(task=tasks[i % len(tasks)], catalog=catalog, tokenizer=tokenizer,
                               generator=generator, options=options, skill_texts=[],
                               sampling_params={"temperature": 0.7, "sampling_seed": 100 + i})
                for i in range(count)
            )))  # fmt: skip

        progress(f"next episodes: {count} from policy {len(runs) + 1} of 2")
        runs.append(asyncio.run(all_episodes()))
    identical, divergences = 0, []
    for index, (a, b) in enumerate(zip(*runs, strict=True)):
        tokens_a = [t for s in a.segments for t in s.tokens]
        tokens_b = [t for s in b.segments for t in s.tokens]
        if tokens_a == tokens_b:
            identical += 1
            continue
        at = next((k for k, (x, y) in enumerate(zip(tokens_a, tokens_b, strict=False)) if x != y), None)
        divergences.append({"episode": index, "first_differing_token": at})
    successes = [sum(bool(t.outcome.success) for t in run) for run in runs]
    return {"episodes": count, "identical": identical, "divergences": divergences, "successes": successes}


# ---------------------------------------------------------------------- bfloat16's quality
def bench_quality(env: dict[str, Any], fp32_path: str | None, bf16_path: str | None, episodes: int) -> dict[str, Any]:
    """The demo's whole warm start in float32 and in bfloat16 (each loaded from its --weights file when
    present), then `episodes` held-out episodes of each policy (validation tasks, fixed seeds): the
    float32 policy in float32 against (a) the same policy decoded in bfloat16 (what bfloat16 inference
    alone changes) and (b) the bfloat16-trained policy in bfloat16 (the demo's policy with
    model.compute_dtype: bfloat16). Successes and token identity of each pair."""
    fp32 = warm_weights(env, fp32_path, torch.float32)
    bf16 = warm_weights(env, bf16_path, torch.bfloat16)
    return {
        "episodes": episodes,
        "max_weight_difference": max_weight_difference(fp32, bf16),
        "fp32_policy_decoded_in_bf16": same_episodes(env, fp32, fp32, episodes, (torch.float32, torch.bfloat16)),
        "bf16_trained_policy_in_bf16": same_episodes(env, fp32, bf16, episodes, (torch.float32, torch.bfloat16)),
    }


# ---------------------------------------------------------------------- GRPO update
def demo_rollout(
    env: dict[str, Any], weights: dict[str, torch.Tensor], trunk: FrozenTrunk, dtype: torch.dtype = torch.float32
) -> tuple[list[Any], float]:
    """One rollout of the demo driver (its hooks, curriculum, sampling) recorded for `trunk`; its items."""
    config: RunConfig = env["config"]
    model = env["model"]
    restore(model, weights)
    reset_process_state()
    generator = BatchedLocalHFGenerator(
        model, env["tokenizer"], seed=config.driver.rollout_seed, recorder=trunk, compute_dtype=dtype
    )
    driver = LocalDriver(config, model=model, tokenizer=env["tokenizer"], generator=generator, catalog=env["catalog"],
                         tasks=env["tasks"], sink=_NoSink(), use_wandb=False, trunk=trunk)  # fmt: skip
    args = driver.args
    setattr(args, ROLLOUT_STEP_ATTR, 0)
    started = time.perf_counter()
    output = asyncio.run(driver.generate_rollout(0))
    seconds = time.perf_counter() - started
    if driver.hooks.all_samples_process is not None:
        driver.hooks.all_samples_process(args, output.all_groups, driver.data_source.get_samples)
    samples = flatten_groups(output.groups)
    _, rewards = driver.hooks.reward_post_process(args, samples)
    return train_items(samples, rewards), seconds


class _NoSink:
    def log(self, metrics: dict[str, Any]) -> None:
        pass


def bench_update(env: dict[str, Any], weights: dict[str, torch.Tensor], dtypes: list[str]) -> dict[str, Any]:
    config: RunConfig = env["config"]
    model, driver = env["model"], config.driver
    recorded = FrozenTrunk.of(model)
    progress("update: one demo rollout (recorded for the trunk)")
    items, rollout_s = demo_rollout(env, weights, recorded)
    advantages = "the rollout's"
    if not any(item.advantage for item in items):  # every group all-equal: no gradient to compare
        advantages = "+1/-1 by sample (the rollout's are all 0)"
        items = [replace(item, advantage=1.0 if i % 2 else -1.0) for i, item in enumerate(items)]
    progress(
        f"update: rollout {rollout_s:.0f} s, {len(items)} samples, {sum(len(i.tokens) for i in items)} tokens"
    )
    grpo = GrpoConfig(eps_clip=driver.eps_clip, eps_clip_high=driver.eps_clip_high, entropy_coef=driver.entropy_coef,
                      clip_grad=driver.clip_grad, rollout_temperature=driver.rollout_temperature,
                      max_tokens_per_microbatch=driver.max_tokens_per_gpu)  # fmt: skip
    out: dict[str, Any] = {"rollout_s": rollout_s, "samples": len(items), "advantages": advantages,
                           "tokens": sum(len(item.tokens) for item in items),
                           "micro_batches": len(micro_batches(items, range(len(items)), grpo.max_tokens_per_microbatch))}  # fmt: skip
    results = {}
    # trunk_rollout_bf16: the demo's path in bfloat16 on the same samples (the float32 rollout's
    # frozen-layer output: float32 hidden states either way, so the same read-back)
    for path in ("full", "trunk", "trunk_rollout", *(["trunk_rollout_bf16"] if BF16 in dtypes else [])):
        restore(model, weights)
        trunk = FrozenTrunk.of(model) if path == "trunk" else None if path == "full" else recorded
        optimizer = torch.optim.AdamW(model.parameters(), lr=driver.lr, weight_decay=driver.weight_decay,
                                      betas=(driver.adam_beta1, driver.adam_beta2))  # fmt: skip
        trainer = GrpoTrainer(model, optimizer, grpo, trunk=trunk,
                              compute_dtype=torch.bfloat16 if path.endswith("_bf16") else torch.float32,
                              on_micro_batch=lambda done, total, p=path: progress(f"update [{p}] micro-batch {done}/{total}"))  # fmt: skip
        before = None if trunk is None else trunk.stats
        started = time.perf_counter()
        result = trainer.train_rollout(items, 0, driver.global_batch_size)
        seconds = time.perf_counter() - started
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        results[path] = {"weights": trained, "grads": grads}
        out[path] = {"seconds": seconds, "steps": result.num_steps, "metrics": result.step_metrics,
                     "encoded_tokens": None if trunk is None else trunk.stats.encoded_tokens - before.encoded_tokens}  # fmt: skip
        progress(f"update [{path}]: {seconds:.1f} s")
    for path in ("trunk", "trunk_rollout"):
        full, mine = results["full"], results[path]
        out[path]["speedup"] = out["full"]["seconds"] / out[path]["seconds"]
        out[path]["max_metric_difference"] = max(
            abs(a[k] - b[k])
            for a, b in zip(out["full"]["metrics"], out[path]["metrics"], strict=True)
            for k in a
        )
        out[path]["max_relative_gradient_difference"] = max(
            float((mine["grads"][n] - g).norm() / g.norm()) for n, g in full["grads"].items() if g.norm() > 0
        )
        out[path]["max_weight_difference_after"] = max_weight_difference(full["weights"], mine["weights"])
    out["trunk_rollout"]["recorded"] = recorded.stats.__dict__
    out["trunk_rollout"]["next_episodes"] = same_episodes(
        env, results["full"]["weights"], results["trunk_rollout"]["weights"], NEXT_EPISODES
    )
    if BF16 in dtypes:
        out["trunk_rollout_bf16"] |= bf16_update_agreement(out, results)
        out["rollout_bf16"] = bf16_rollout(env, weights, items)
    return out


def bf16_update_agreement(out: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The bfloat16 update against the float32 one on the same samples and frozen-layer output."""
    fp32, bf16 = results["trunk_rollout"], results["trunk_rollout_bf16"]
    return {
        "speedup_vs_trunk_rollout": out["trunk_rollout"]["seconds"] / out["trunk_rollout_bf16"]["seconds"],
        "max_metric_difference_vs_trunk_rollout": max(
            abs(a[k] - b[k])
            for a, b in zip(out["trunk_rollout"]["metrics"], out["trunk_rollout_bf16"]["metrics"], strict=True)
            for k in a
        ),
        "max_relative_gradient_difference_vs_trunk_rollout": max(
            float((bf16["grads"][n] - g).norm() / g.norm()) for n, g in fp32["grads"].items() if g.norm() > 0
        ),
        "max_weight_difference_after_vs_trunk_rollout": max_weight_difference(fp32["weights"], bf16["weights"]),
    }


def bf16_rollout(env: dict[str, Any], weights: dict[str, torch.Tensor], fp32_items: list[Any]) -> dict[str, Any]:
    """The same demo rollout (seeds, tasks) with the generator in bfloat16: its time and how many of its
    samples are token-identical to the float32 rollout's (and where the others first differ)."""
    progress("update: the same rollout in bfloat16")
    items, seconds = demo_rollout(env, weights, FrozenTrunk.of(env["model"]), torch.bfloat16)
    differing = [
        next((k for k, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)) if x != y), min(len(a.tokens), len(b.tokens)))
        for a, b in zip(fp32_items, items, strict=False)
        if list(a.tokens) != list(b.tokens)
    ]  # fmt: skip
    return {"rollout_s": seconds, "samples": len(items), "identical_samples": len(items) - len(differing),
            "first_differing_token": differing}  # fmt: skip


# ---------------------------------------------------------------------- gate episodes
def bench_gate(
    env: dict[str, Any], weights: dict[str, torch.Tensor], episodes: int, variants: list[int], dtypes: list[str]
) -> dict[str, Any]:
    model, tokenizer, catalog, config = env["model"], env["tokenizer"], env["catalog"], env["config"]
    restore(model, weights)
    model.eval()
    tasks = load_split(catalog, "validation")
    options = config.shopsim.model_copy(update={"max_turns": 6, "max_new_tokens_per_turn": 256,
                                                "full_skill_retry": False})  # fmt: skip
    bank = json.loads(Path("configs/skillbank.example.json").read_text(encoding="utf-8"))
    skills = [chunk["text"] for chunk in bank["chunks"] if chunk["active"]]
    arms = {"a": [*skills, GATE_LESSON], "b": skills}
    rng = random.Random(0)
    pairs = [
        (tasks[k % len(tasks)], rng.randrange(1 << 31), rng.randrange(1 << 31))
        for k in range(episodes // 2 + 1)
    ]
    # a pair's two arms: the same task and seeds, the candidate's skill on or off (gate/stage.py)
    plan = [(pairs[i // 2][0], "ab"[i % 2], pairs[i // 2][1], pairs[i // 2][2]) for i in range(episodes)]
    out: dict[str, Any] = {"episodes": episodes, "concurrency": GATE_CONCURRENCY}
    reference = None
    for dtype_name, drafts in [(d, v) for d in dtypes for v in variants]:
        dtype = torch.float32 if dtype_name == FP32 else torch.bfloat16
        generator = BatchedLocalHFGenerator(
            model, tokenizer, seed=0, max_batch=GATE_CONCURRENCY, draft_tokens=drafts, compute_dtype=dtype,
            kv_dtype=torch.float32 if dtype_name == BF16_F32KV else None,
        )  # fmt: skip
        progress(f"gate: {episodes} episodes, draft_tokens={drafts}, {dtype_name}")
        started = time.perf_counter()
        results = asyncio.run(gate_wave(generator, plan, arms, env, options))
        wall = time.perf_counter() - started
        profile, cache = generator.profile, generator.cache_stats
        tokens = [[list(s.tokens) for s in t.segments] for t in results]
        row = {
            "wall_s": wall, "s_per_episode": wall / episodes,
            "prefill_s": profile.prefill_s, "decode_s": profile.decode_s,
            "rest_s": wall - profile.prefill_s - profile.decode_s,
            "prefill_tokens_encoded": profile.prefill_tokens, "prefill_tokens_reused": profile.reused_tokens,
            "prefill_tokens_unavoidable": unavoidable_prefill(results),
            "decode_steps": profile.decode_steps, "generated_tokens": profile.decode_tokens,
            "drafts_fed": profile.drafts_fed, "drafts_confirmed": profile.drafts_confirmed,
            "turns": sum(t.num_turns for t in results), "successes": sum(bool(t.outcome.success) for t in results),
            "cache": None if cache is None else cache.__dict__,
        }  # fmt: skip
        if reference is None:
            reference = tokens
        row["identical_episodes_to_first_variant"] = sum(
            a == b for a, b in zip(reference, tokens, strict=True)
        )
        row["first_differing_token_to_first_variant"] = [
            next((k for k, (x, y) in enumerate(zip(_flat(a), _flat(b), strict=False)) if x != y), None)
            for a, b in zip(reference, tokens, strict=True)
            if a != b
        ]
        key = f"draft_tokens={drafts}" + ("" if dtype_name == FP32 else f",{dtype_name}")
        out[key] = row
        progress(f"gate {key}: {wall:.0f} s ({wall / episodes:.2f} s an episode), "
                 f"prefill {profile.prefill_s:.0f} s, decode {profile.decode_s:.0f} s")  # fmt: skip
    return out


async def gate_wave(
    generator: Any,
    plan: list[tuple[Any, str, int, int]],
    arms: dict[str, list[str]],
    env: dict[str, Any],
    options: Any,
) -> list[Any]:
    """The planned episodes, `GATE_CONCURRENCY` in flight (as the gate's EpisodeRunner runs them)."""
    semaphore = asyncio.Semaphore(GATE_CONCURRENCY)

    async def one(task: Any, arm: str, sampling_seed: int, env_seed: int) -> Any:
        async with semaphore:
            return await run_trajectory(
                task=task, catalog=env["catalog"], tokenizer=env["tokenizer"], generator=generator, options=options,
                skill_texts=arms[arm], env_seed=env_seed,
                sampling_params={"temperature": 0.7, "top_p": 1.0, "sampling_seed": sampling_seed},
            )  # fmt: skip

    return list(await asyncio.gather(*(one(*episode) for episode in plan)))


def _flat(segments: list[list[int]]) -> list[int]:
    return [token for segment in segments for token in segment]


def unavoidable_prefill(trajectories: list[Any]) -> int:
    """Prompt tokens that no cache could have served: the distinct token prefixes of all segments (a
    trie), less the tokens their decode steps fed (each turn's generated tokens but its last, which the
    next turn's prompt carries) and each segment's final token (never fed)."""
    trie: dict[Any, Any] = {}
    nodes = fed = 0
    for trajectory in trajectories:
        for segment in trajectory.segments:
            node = trie
            for token in segment.tokens:
                if token not in node:
                    node[token] = {}
                    nodes += 1
                node = node[token]
            fed += sum(max(len(turn) - 1, 0) for turn in _turns(segment)) + 1
    return nodes - fed


def _turns(segment: Any) -> list[list[int]]:
    """The model's turns of a segment: runs of loss-mask-1 response tokens."""
    prompt = len(segment.tokens) - segment.response_length
    turns, current = [], []
    for token, mask in zip(segment.tokens[prompt:], segment.loss_mask, strict=True):
        if mask:
            current.append(token)
        elif current:
            turns.append(current)
            current = []
    if current:
        turns.append(current)
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/local/demo_round.yaml", help="a round config: its train: section")
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS), help="comma-separated, from " + ", ".join(PARTS))
    parser.add_argument(
        "--weights", default=None, help="warm-started weights: loaded if present, else made and saved"
    )
    parser.add_argument("--warm-steps", type=int, default=3)
    parser.add_argument("--gate-episodes", type=int, default=40)
    parser.add_argument(
        "--gate-variants", default="4", help="draft_tokens values, comma-separated (4: default)"
    )
    parser.add_argument(
        "--dtypes", default=f"{FP32},{BF16}",
        help=f"compute dtypes compared (model.compute_dtype), comma-separated; with --parts gate also {BF16_F32KV}",
    )  # fmt: skip
    parser.add_argument("--bf16-weights", default=None, help="quality: the bfloat16 warm start's weights, as --weights")
    parser.add_argument("--quality-episodes", type=int, default=20)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    dtypes = options.dtypes.split(",")
    parts = options.parts.split(",")
    if not set(parts) <= set(PARTS):
        parser.error(f"--parts names only {', '.join(PARTS)}")
    if parts == ["gate"]:  # the gate compares its variants with the first one named
        if not set(dtypes) <= {FP32, BF16, BF16_F32KV}:
            parser.error(f"--dtypes names {FP32}, {BF16} or {BF16_F32KV} with --parts gate")
    elif not set(dtypes) <= {FP32, BF16} or FP32 not in dtypes:
        parser.error(f"--dtypes names {FP32} and optionally {BF16} ({BF16_F32KV}: with --parts gate only)")
    report: dict[str, Any] = {"cpu": cpu(), "torch": torch.__version__, "command": " ".join(sys.argv)}
    progress(f"cpu: {report['cpu']}")
    with tempfile.TemporaryDirectory() as runs_root:
        env = setup(options.config, runs_root)
        if "warm_start" in parts:
            report["warm_start"] = bench_warm_start(env, options.warm_steps, dtypes)
        if "update" in parts or "gate" in parts:
            weights = warm_weights(env, options.weights)
            if "update" in parts:
                report["update"] = bench_update(env, weights, dtypes)
            if "gate" in parts:
                variants = [int(v) for v in options.gate_variants.split(",")]
                report["gate"] = bench_gate(env, weights, options.gate_episodes, variants, dtypes)
        if "quality" in parts:
            report["quality"] = bench_quality(env, options.weights, options.bf16_weights, options.quality_episodes)
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if options.json:
        Path(options.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

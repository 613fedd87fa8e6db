"""Rollout and training throughput of the local backend on SmolLM2-135M, and TRL's GRPOTrainer as a peer.

One run, one batch shape: 16 completions of up to 64 tokens for one ~150-token prompt (a ShopSim
instruction in the model's chat template), one optimizer step.

* local rollout tokens/s: completion tokens / generation time of `LocalHFGenerator` (KV cache,
  one sequence at a time), and of `BatchedLocalHFGenerator` (the local driver's: the 16 requests,
  submitted concurrently as the driver's sibling episodes do, decoded as one left-padded batch);
* local training tokens/s: (prompt + completion tokens of the batch) / time of the GRPO update
  (`perf/train_time`: the old-log-prob pass + the optimizer step, as slime's actor does); the
  optimizer step alone (`perf/actor_train_tok_per_s`) is reported too;
* TRL (`trl.GRPOTrainer`, default settings except batch shape and CPU): the same tokens over its
  training-step time minus its generation-and-scoring time.

Each side runs one warm-up step first; the second step is measured.

    .venv/bin/pip install -e '.[bench]'      # trl, for the peer comparison only
    .venv/bin/python bench/bench_train.py [--skip-trl] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, TrainItem  # noqa: E402
from shopsimrl.models.smollm2 import load_smollm2  # noqa: E402
from shopsimrl.rollout.generators import BatchedLocalHFGenerator, LocalHFGenerator  # noqa: E402
from shopsimrl.shop import generate_catalog, load_split  # noqa: E402

COMPLETIONS = 16
MAX_NEW_TOKENS = 64
SYSTEM = (
    "You are a careful online shopping assistant. Read the customer's request, find the product that "
    "matches every stated attribute and option, respect the price ceiling, and explain your choice in "
    "a few short sentences. Mention the size, colour and material you would pick, and say why the "
    "product fits the budget. Never invent product facts that are not in the request."
)


def _prompt_messages() -> list[dict[str, str]]:
    catalog = generate_catalog(seed=0, num_products=500)
    task = load_split(catalog, "train")[0]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.instruction}]


def _reward(text: str) -> float:
    # Any reward with in-group variance gives the same amount of training work; this one is cheap.
    return float(len(text) % 7) / 6.0


def bench_local(messages: list[dict[str, str]], seed: int) -> dict[str, Any]:
    loaded = load_smollm2()
    model, tokenizer = loaded.model, loaded.tokenizer
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = list(tokenizer.encode(text, add_special_tokens=False))
    generator = LocalHFGenerator(model, tokenizer, seed=seed)
    batched = BatchedLocalHFGenerator(model, tokenizer, seed=seed, max_batch=COMPLETIONS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.1, betas=(0.9, 0.98))
    trainer = GrpoTrainer(model, optimizer, GrpoConfig())
    params = {"temperature": 1.0, "max_new_tokens": MAX_NEW_TOKENS}
    out: dict[str, Any] = {"prompt_tokens": len(prompt_ids)}
    for step in range(2):
        start = time.perf_counter()
        results = [generator.generate_sync(prompt_ids, params) for _ in range(COMPLETIONS)]
        generation_s = time.perf_counter() - start
        batched_tokens, batched_s = _batched_rollout(batched, prompt_ids, params)
        rewards = [_reward(r.text) for r in results]
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        items = [
            TrainItem(
                tokens=prompt_ids + r.token_ids,
                response_length=len(r.token_ids),
                loss_mask=[1] * len(r.token_ids),
                advantage=(w - mean) / (std + 1e-6),
                rollout_key=i,
                rollout_log_probs=r.log_probs,
            )
            for i, (r, w) in enumerate(zip(results, rewards, strict=True))
        ]
        result = trainer.train_rollout(items, rollout_id=step, global_batch_size=COMPLETIONS)
        completion_tokens = sum(len(r.token_ids) for r in results)
        total_tokens = sum(len(item.tokens) for item in items)
        out[f"step{step}"] = {
            "completion_tokens": completion_tokens,
            "batch_tokens": total_tokens,
            "generation_s": generation_s,
            "rollout_tok_per_s": completion_tokens / generation_s,
            "batched_completion_tokens": batched_tokens,
            "batched_generation_s": batched_s,
            "batched_rollout_tok_per_s": batched_tokens / batched_s,
            "train_s": result.perf_metrics["perf/train_time"],
            "train_tok_per_s": total_tokens / result.perf_metrics["perf/train_time"],
            "actor_train_tok_per_s": result.perf_metrics["perf/actor_train_tok_per_s"],
            "grad_norm": result.step_metrics[0]["train/grad_norm"],
        }
    return out


def _batched_rollout(
    generator: BatchedLocalHFGenerator, prompt_ids: list[int], params: dict[str, Any]
) -> tuple[int, float]:
    """COMPLETIONS concurrent `generate()` calls, as the driver's sibling episodes make them."""

    async def all_completions() -> list[Any]:
        return await asyncio.gather(*(generator.generate(prompt_ids, params) for _ in range(COMPLETIONS)))

    start = time.perf_counter()
    results = asyncio.run(all_completions())
    return sum(len(r.token_ids) for r in results), time.perf_counter() - start


def bench_trl(messages: list[dict[str, str]], seed: int, workdir: Path) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    loaded = load_smollm2()
    timings: dict[str, list[float]] = {"generation_s": [], "tokens": []}

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            start = time.perf_counter()
            batch = super()._generate_and_score_completions(inputs)
            timings["generation_s"].append(time.perf_counter() - start)
            timings["tokens"].append(float(batch["prompt_mask"].sum() + batch["completion_mask"].sum()))
            return batch

    def reward_fn(completions: list[Any], **_: Any) -> list[float]:
        return [_reward(c[0]["content"] if isinstance(c, list) else str(c)) for c in completions]

    config = GRPOConfig(
        output_dir=str(workdir),
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        num_generations=COMPLETIONS,
        per_device_train_batch_size=COMPLETIONS,
        max_completion_length=MAX_NEW_TOKENS,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-6,
        dataloader_num_workers=0,
    )
    trainer = TimedGRPOTrainer(
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=reward_fn,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": messages}] * 4),
    )
    trainer.train()
    step_times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    measured = step_times[-1] - timings["generation_s"][-1]
    return {
        "gradient_checkpointing": config.gradient_checkpointing,
        "loss_type": config.loss_type,
        "batch_tokens": timings["tokens"][-1],
        "step_s": step_times[-1],
        "generation_s": timings["generation_s"][-1],
        "train_s": measured,
        "train_tok_per_s": timings["tokens"][-1] / measured,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    messages = _prompt_messages()
    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "local": bench_local(messages, args.seed),
    }
    if not args.skip_trl:
        report["trl"] = bench_trl(messages, args.seed, Path(".cache/bench_trl"))
        report["ratio_train_tok_per_s"] = (
            report["local"]["step1"]["train_tok_per_s"] / report["trl"]["train_tok_per_s"]
        )
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

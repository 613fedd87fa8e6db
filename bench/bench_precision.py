"""Float32 against bfloat16 on this CPU (issue 37): SmolLM2-135M-Instruct's prefill, batched decode and
the forward + backward of its top 8 layers, in three precisions, interleaved (ABCABC...) so the ratios
of one run share the machine's load:

* `fp32`: float32 weights and arithmetic (what every path runs today);
* `autocast`: float32 weights, `torch.autocast("cpu", dtype=torch.bfloat16)` around the forward (the
  matrix products in bfloat16, reductions and the loss in float32; gradients land on float32 weights);
* `bf16`: a bfloat16 copy of the weights and activations (no autocast).

Parts: `prefill` (one prompt of `--prefill-tokens`, no cache), `decode` (`--decode-rows` rows on a
`--decode-context`-token cache, `--decode-fed` tokens fed a row per step as prompt lookup does, a
fresh copy of the cache per step), `train` (the top 8 layers, final norm and output layer over the
frozen layers' hidden states of 2 rows of `--train-tokens`, a log-softmax loss, backward).
Also reported: the largest log-prob difference to `fp32` (prefill) and the relative gradient difference
per trainable tensor (train). Random token ids: the cost of a forward does not depend on which tokens.

    .venv/bin/python bench/bench_precision.py --repeats 3 --json /tmp/precision.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.local.run import freeze_below  # noqa: E402
from shopsimrl.local.trunk import FrozenTrunk  # noqa: E402
from shopsimrl.models.smollm2 import load_smollm2  # noqa: E402

MODES = ("fp32", "autocast", "bf16")
TOP_LAYERS = 8  # the demo's model.trainable_top_layers


def _context(mode: str) -> contextlib.AbstractContextManager:
    if mode == "autocast":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def prefill(model: Any, mode: str, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(), _context(mode):
        logits = model(input_ids=ids, use_cache=True).logits
    return torch.log_softmax(logits.float(), dim=-1)


def decode(model: Any, mode: str, cache: DynamicCache, fed: torch.Tensor, steps: int) -> None:
    rows, context = fed.shape[0], cache.get_seq_length()
    with torch.inference_mode(), _context(mode):
        for _ in range(steps):
            step_cache = copy.deepcopy(cache)  # every step on the same context: equal work per step
            positions = torch.arange(context, context + fed.shape[1]).expand(rows, -1)
            model(input_ids=fed, past_key_values=step_cache, position_ids=positions, use_cache=True)


def train(model: Any, trunk: FrozenTrunk, mode: str, bottoms: list[torch.Tensor]) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    positions = [(row, col) for row, b in enumerate(bottoms) for col in range(b.shape[0])]
    with _context(mode):
        final = trunk.top_padded(bottoms, positions)
        logits = model.lm_head(final)
    loss = -torch.log_softmax(logits.float(), dim=-1)[:, 0].mean()
    loss.backward()
    return [p.grad.float().clone() for p in model.parameters() if p.requires_grad]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prefill-tokens", type=int, default=1100)
    parser.add_argument("--decode-rows", type=int, default=20)
    parser.add_argument("--decode-context", type=int, default=1500)
    parser.add_argument("--decode-fed", type=int, default=5)
    parser.add_argument("--decode-steps", type=int, default=4)
    parser.add_argument("--train-tokens", type=int, default=1500)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    loaded = load_smollm2()
    models = {"fp32": loaded.model.eval()}
    freeze_below(models["fp32"], TOP_LAYERS)
    models["autocast"] = models["fp32"]
    models["bf16"] = copy.deepcopy(models["fp32"]).to(torch.bfloat16)
    trunks = {mode: FrozenTrunk.of(m) for mode, m in models.items()}
    generator = torch.Generator().manual_seed(0)
    vocab = models["fp32"].config.vocab_size
    prompt = torch.randint(vocab, (1, args.prefill_tokens), generator=generator)
    context = torch.randint(vocab, (1, args.decode_context), generator=generator)
    fed = torch.randint(vocab, (args.decode_rows, args.decode_fed), generator=generator)
    train_rows = [torch.randint(vocab, (args.train_tokens,), generator=generator).tolist() for _ in range(2)]

    caches, bottoms = {}, {}
    for mode in MODES:
        with torch.inference_mode(), _context(mode):
            out = models[mode](input_ids=context, use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(args.decode_rows)
        caches[mode] = cache
        with torch.no_grad(), _context(mode):  # the frozen layers' output, in each mode's own precision
            bottoms[mode] = [h.detach() for h in trunks[mode].hidden(train_rows)]

    times: dict[str, dict[str, list[float]]] = {part: {m: [] for m in MODES} for part in ("prefill", "decode", "train")}
    logprobs: dict[str, torch.Tensor] = {}
    grads: dict[str, list[torch.Tensor]] = {}
    for repeat in range(-1, args.repeats):  # repeat -1 warms each mode's kernels up and is not kept
        for mode in MODES:
            model = models[mode]
            seconds, logprobs[mode] = _timed(prefill, model, mode, prompt)
            times["prefill"][mode].append(seconds)
            seconds, _ = _timed(decode, model, mode, caches[mode], fed, args.decode_steps)
            times["decode"][mode].append(seconds / args.decode_steps)
            seconds, grads[mode] = _timed(train, model, trunks[mode], mode, bottoms[mode])
            times["train"][mode].append(seconds)
            print(f"repeat {repeat} {mode}: " + ", ".join(f"{p} {times[p][mode][-1]:.3f}s" for p in times),
                  file=sys.stderr, flush=True)
            if repeat < 0:
                for part in times:
                    times[part][mode].clear()

    report: dict[str, Any] = {"torch_threads": torch.get_num_threads(), "args": {k: str(v) for k, v in vars(args).items()}}
    for part, by_mode in times.items():
        report[part] = {
            mode: {
                "median_s": statistics.median(values),
                "runs_s": values,
                # the ratio within each repeat (the same load), then their median
                "speedup_vs_fp32": statistics.median(f / v for f, v in zip(by_mode["fp32"], values, strict=True)),
            }
            for mode, values in by_mode.items()
        }
    for mode in MODES[1:]:
        report[mode + "_agreement"] = {
            "prefill_max_logprob_diff": (logprobs[mode] - logprobs["fp32"]).abs().max().item(),
            "prefill_argmax_agreement": (logprobs[mode].argmax(-1) == logprobs["fp32"].argmax(-1)).float().mean().item(),
            "train_max_rel_grad_diff": max(
                ((g - f).norm() / f.norm()).item() for g, f in zip(grads[mode], grads["fp32"], strict=True)
            ),
        }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

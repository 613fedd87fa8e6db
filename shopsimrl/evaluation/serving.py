"""The fixed checkpoint's tokenizer and generator, and the episode options, for planned episodes.

    tokenizer, generator = load_generator("checkpoints/g/final", GeneratorConfig(), seed=0)
    options = episode_options(run_dir, EpisodeConfig(), CatalogConfig(), GeneratorConfig())
    runner = episode_runner(checkpoint, config.generator, config.episode, config.catalog, ...)   # both
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shopsimrl.config import ShopSimOptions
from shopsimrl.evaluation.episode_config import (
    DEMO_CHECKPOINT,
    Backend,
    CatalogConfig,
    EpisodeConfig,
    GeneratorConfig,
)

if TYPE_CHECKING:
    from shopsimrl.evaluation.runner import EpisodeRunner


def load_generator(checkpoint: str, generator: GeneratorConfig, *, seed: int,
                   tokenizer_dir: str | None = None) -> tuple[Any, Any]:
    """(tokenizer, generator) on the checkpoint: an SGLang URL, the demo model, or an HF directory on CPU."""
    if generator.backend is Backend.SGLANG:
        from transformers import AutoTokenizer

        from shopsimrl.rollout.generators import SGLangGenerator

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or checkpoint)
        return tokenizer, SGLangGenerator(generator.url or "", timeout_s=generator.timeout_s)
    if checkpoint == DEMO_CHECKPOINT:
        from shopsimrl.models.smollm2 import load_smollm2

        loaded = load_smollm2()
        model, tokenizer = loaded.model, loaded.tokenizer
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or checkpoint)
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
    model.eval()
    if generator.concurrency == 1:
        from shopsimrl.rollout.generators import LocalHFGenerator

        return tokenizer, LocalHFGenerator(model, tokenizer, seed=seed, compute_dtype=generator.compute_dtype.torch)
    from shopsimrl.rollout.generators import BatchedLocalHFGenerator

    return tokenizer, BatchedLocalHFGenerator(
        model, tokenizer, seed=seed, max_batch=generator.concurrency, compute_dtype=generator.compute_dtype.torch
    )


def episode_options(run_dir: Path, episode: EpisodeConfig, catalog: CatalogConfig,
                    generator: GeneratorConfig) -> ShopSimOptions:
    return ShopSimOptions(
        run_dir=str(run_dir),
        catalog=catalog,  # training's CatalogOptions itself (episode_config.py)
        tool_call_format=episode.tool_call_format,
        max_turns=episode.max_turns,
        max_new_tokens_per_turn=episode.max_new_tokens_per_turn,
        max_context_tokens=episode.max_context_tokens,
        full_skill_retry=False,
        sglang_timeout_s=generator.timeout_s,
    )


def episode_runner(checkpoint: str, generator: GeneratorConfig, episode: EpisodeConfig, catalog_config: CatalogConfig,
                   *, seed: int, tokenizer_dir: str | None, run_dir: Path, tasks: Sequence[Any], catalog: Any,
                   skill_texts_for: Callable[[tuple[str, ...]], list[str]], path: Path, kind: str) -> EpisodeRunner:
    """The runner of planned episodes on a fixed checkpoint, built the same way for eval and the gate:
    the generator section gives the serving, the concurrency and the failure limits."""
    from shopsimrl.evaluation.runner import EpisodeRunner

    tokenizer, model_generator = load_generator(checkpoint, generator, seed=seed, tokenizer_dir=tokenizer_dir)
    return EpisodeRunner(
        tasks={task.task_id: task for task in tasks},
        catalog=catalog,
        tokenizer=tokenizer,
        generator=model_generator,
        options=episode_options(run_dir, episode, catalog_config, generator),
        skill_texts_for=skill_texts_for,
        sampling=episode.sampling(),
        path=path,
        kind=kind,
        concurrency=generator.concurrency,
        max_attempts=generator.max_attempts,
        abort_after_consecutive_failures=generator.abort_after_consecutive_failures,
    )

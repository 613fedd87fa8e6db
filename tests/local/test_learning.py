"""GRPO makes the policy better: the real local driver and update learn a task, and unlearn it when
the advantages' sign is flipped (so the first test fails for the right reason if the update is wrong).

Task (toy_task.py): one turn of 6 tokens, reward = share of token ids below 128; a random tiny model
scores ~0.5. 12 rollouts of 2 groups x 8 samples, one optimizer step each, lr 1e-2. Measured on
seeds 1-3: the reward climbs to 0.90-0.95 normally and falls to 0.09-0.19 with the sign flipped; the
margins below leave room for other CPUs' sampling paths.
"""

from __future__ import annotations

from statistics import fmean

import pytest
import torch

from shopsimrl.local.driver import LocalDriver
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import LocalHFGenerator
from shopsimrl.shop import generate_catalog, load_split

ROLLOUTS = 12


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, row: dict) -> None:
        self.rows.append(row)


def _reward_curve(tiny_config, seed: int, post_process: str) -> list[float]:
    config = tiny_config(driver={
        "num_rollout": ROLLOUTS, "rollout_batch_size": 2, "n_samples_per_prompt": 8,
        "over_sampling_batch_size": 2, "global_batch_size": 16, "lr": 1e-2, "rollout_max_response_len": 6,
    })
    hooks = config.hooks.model_copy(update={
        "custom_generate_function_path": "toy_task.toy_generate",
        "custom_reward_post_process_path": post_process,
        "dynamic_sampling_filter_path": None,  # the ShopSim-specific hooks have nothing to do here
        "rollout_all_samples_process_path": None,
        "custom_rollout_log_function_path": None,
    })
    config = config.model_copy(update={"hooks": hooks})
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=seed)
    catalog = generate_catalog(seed=0, num_products=200)
    driver = LocalDriver(config, model=model, tokenizer=tokenizer,
                         generator=LocalHFGenerator(model, tokenizer, seed=seed + 1), catalog=catalog,
                         tasks=load_split(catalog, "train")[:4], sink=_Rows(), use_wandb=False)
    return [report.rollout_row["rollout/raw_reward"] for report in driver.run()]


@pytest.mark.parametrize("seed", [1, 2])
def test_grpo_raises_the_reward_of_a_learnable_task(tiny_config, seed):
    curve = _reward_curve(tiny_config, seed, "shopsimrl.slime_hooks.reward_post_process")
    start, end = fmean(curve[:2]), fmean(curve[-3:])
    assert 0.3 < start < 0.7, curve  # a random policy
    assert end > start + 0.25, curve


def test_with_the_advantage_sign_flipped_the_reward_does_not_rise(tiny_config):
    curve = _reward_curve(tiny_config, 1, "toy_task.flipped_reward_post_process")
    start, end = fmean(curve[:2]), fmean(curve[-3:])
    assert end < start - 0.1, curve

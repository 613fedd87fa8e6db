"""A one-decision task the tiny model can learn in seconds, as slime hooks (used by test_learning.py).

The episode is one model turn of `RESPONSE_TOKENS` tokens after a fixed prompt; the reward is the
fraction of generated token ids below 128 (the byte-level tiny vocabulary's lower half), so a random
policy scores about 0.5 and the reward is dense. The outcome goes into `metadata["shopsim"]`, so our
own reward hook and GRPO post-process run unchanged.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.contract import Arm, Outcome, Sample, ShopSimMeta, set_meta
from shopsimrl.rollout.advantages import reward_post_process

PROMPT = [72, 105, 33, 10]  # "Hi!\n" in the tiny byte vocabulary
RESPONSE_TOKENS = 6
TARGET_BELOW = 128


async def toy_generate(args: Any, sample: Any, sampling_params: dict, evaluation: bool = False) -> list[Any]:
    params = {**sampling_params, "max_new_tokens": RESPONSE_TOKENS, "stop_token_ids": []}
    result = await args.shopsim_generator.generate(PROMPT, params)
    ids = list(result.token_ids)
    sample.tokens = PROMPT + ids
    sample.response_length = len(ids)
    sample.loss_mask = [1] * len(ids)
    sample.rollout_log_probs = list(result.log_probs)
    sample.rollout_id = sample.index
    sample.status = Sample.Status.COMPLETED
    reward = sum(token < TARGET_BELOW for token in ids) / max(len(ids), 1)
    outcome = Outcome(reward=reward, strict_reward=float(reward == 1.0), success=reward == 1.0, scorable=True)
    set_meta(sample, ShopSimMeta(task_id="toy", group_key=f"toy#g{sample.group_index}", arm=Arm.SKILL_FREE,
                                 q=1.0, outcome=outcome))
    return [sample]


def flipped_reward_post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """Our GRPO advantages with the sign flipped: training must then push the reward down."""
    raw, advantages = reward_post_process(args, samples)
    return raw, [-a for a in advantages]

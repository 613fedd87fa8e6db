"""The local PPO critic: a value head on the policy's final hidden states, and slime's clipped value loss.

Why a head on the policy's features rather than a second model (slime's critic is a separate Megatron
model, initialised from the actor's checkpoint with a one-wide output layer): on the CPU backend the
policy's forward over the rollout already runs once before the update (the old log-probs, which PPO
always needs), and its final hidden states at the response positions are what a second model's top
would compute on the same frozen trunk at the start. The critic reads those states *detached*, so

* the critic costs no decoder forward or backward: its optimizer steps are a regression on stored
  features (a small MLP), seconds on SmolLM2 instead of a second 8-layer update;
* the actor's gradient is exactly slime's PPO policy loss: no value-loss term flows into the policy
  (slime's separate critic gives the same separation).

The price: the critic's features are the policy's at the rollout's start, not learned for value
prediction, so its explained variance is bounded by what those features carry (docs/local_backend.md).

value_loss follows slime v0.3.1 `value_loss_function` (megatron_utils/loss.py): per token
`max((old + clamp(v - old, -clip, clip) - R)^2, (v - R)^2)` (no 1/2 factor), reduced like the policy
loss (`sum_of_sample_mean`), and the fraction of tokens with `|v - old| > clip`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from shopsimrl.local.grpo import sum_of_sample_mean
from shopsimrl.metrics import names as m

HEAD_WIDTH = 64  # hidden units of the value head's MLP
# The critic's weights inside a saved checkpoint directory (beside model.safetensors): what the next
# round's PPO starts from, as slime's critic loads its own save (docs/local_backend.md, "PPO").
CRITIC_FILE = "critic.safetensors"
INIT_STD = 0.02  # slime's `_reinitialize_critic_output_layer`: normal(0, init_method_std=0.02), bias 0


class ValueHead(torch.nn.Module):
    """`hidden_size -> HEAD_WIDTH -> 1` (tanh): one value per response position."""

    def __init__(self, hidden_size: int, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.hidden = torch.nn.Linear(hidden_size, HEAD_WIDTH)
        self.out = torch.nn.Linear(HEAD_WIDTH, 1)
        with torch.no_grad():
            for layer in (self.hidden, self.out):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * INIT_STD)
                layer.bias.zero_()

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """`[positions, hidden_size]` -> `[positions]`."""
        return self.out(torch.tanh(self.hidden(features))).squeeze(-1)


def load_critic_from(checkpoint: Path, critic: ValueHead) -> Path | None:
    """Load `checkpoint`'s saved critic into `critic`; None (left as initialised) when it holds none.

    The checkpoint directory was verified against its hash when the policy was loaded from it.
    """
    from safetensors.torch import load_file

    from shopsimrl.models.checkpoint import CheckpointError

    path = Path(checkpoint) / CRITIC_FILE
    if not path.is_file():
        return None
    try:
        critic.load_state_dict(load_file(path))
    except RuntimeError as exc:  # another hidden size or head width than this run's value head
        raise CheckpointError(f"{path}: not a critic for this model ({str(exc).splitlines()[0]})") from None
    return path


def value_loss(
    values: Sequence[torch.Tensor],
    old_values: Sequence[torch.Tensor],
    returns: Sequence[torch.Tensor],
    loss_masks: Sequence[torch.Tensor],
    mask_sums: Sequence[float],
    num_rollouts: int,
    value_clip: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """slime's clipped value loss over these samples and its two `train/critic-*` metrics."""
    losses, clipped = [], []
    for v, old, ret in zip(values, old_values, returns, strict=True):
        v_clipped = old + (v - old).clamp(-value_clip, value_clip)
        losses.append(torch.maximum((v_clipped - ret) ** 2, (v - ret) ** 2))
        clipped.append(((v - old).abs() > value_clip).float())
    loss = sum_of_sample_mean(losses, loss_masks, mask_sums, num_rollouts)
    clipfrac = sum_of_sample_mean(clipped, loss_masks, mask_sums, num_rollouts)
    return loss, {
        m.TRAIN_CRITIC_VALUE_LOSS.name: float(loss.detach()),
        m.TRAIN_CRITIC_VALUE_CLIPFRAC.name: float(clipfrac),
    }

"""Run slime v0.3.1's PPO rollout-data path on data-parallel CPU ranks, with our rollout-data hook in it.

Used by test_ppo_spreads_through_slime.py in a subprocess (its stubs never reach the test session):

    python slime_ppo_spread_probe.py SPEC.json OUT_DIR

SPEC: {"hook": DOTTED_PATH, "rollout_id": N, "normalize_advantages": bool, "gamma": g, "lambd": l,
       "ranks": [{"values": [[float, ...], ...], "rewards": [float, ...], "loss_masks": [[0|1, ...], ...]}, ...]}
One process per rank (torch.distributed, gloo, a file store in OUT_DIR). Each runs what slime's
`MegatronTrainRayActor.train_actor` runs on the actor's rollout data once the critic's values have
arrived (slime/backends/megatron_utils/actor.py:497-506): slime's `compute_advantages_and_returns`,
the hook loaded by slime's `load_function` from the dotted path, slime's `log_rollout_data`.
Writes OUT_DIR/rank<r>.json (the rank's values, returns, advantages and loss masks after the hook)
and, from the rank slime logs on, OUT_DIR/logged.json: every dict slime hands its W&B/TensorBoard
sink (`slime.utils.logging_utils.log`, the one function replaced here, to record instead of upload).

No stand-in for Megatron: slime's code asks `megatron.core.mpu` for its ranks and groups, and each
rank here initializes Megatron's own parallel state (megatron-core, which `make setup` installs) for a
pure data-parallel job of len(ranks) ranks on gloo: tensor, pipeline and context parallel sizes 1.
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path


def _rank(rank: int, spec: dict, out: Path) -> None:
    import torch
    import torch.distributed as dist

    world = len(spec["ranks"])
    dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel()  # every model-parallel size 1: data parallel over the world
    from slime.backends.megatron_utils.data import log_rollout_data
    from slime.backends.megatron_utils.loss import compute_advantages_and_returns
    from slime.utils import logging_utils
    from slime.utils.misc import load_function

    logged: list[dict] = []
    logging_utils.log = lambda args, metrics, step_key: logged.append(dict(metrics))
    args = Namespace(
        advantage_estimator="ppo", use_critic=True, kl_coef=0.0, use_rollout_logprobs=False,
        custom_advantage_function_path=None, use_opd=False, normalize_advantages=spec["normalize_advantages"],
        gamma=spec["gamma"], lambd=spec["lambd"], ci_test=False, log_multi_turn=False, log_passrate=False,
        log_correct_samples=False, wandb_always_use_train_step=False, use_wandb=False, use_tensorboard=False,
    )  # fmt: skip
    mine = spec["ranks"][rank]
    lengths = [len(v) for v in mine["values"]]
    rollout_data = {
        "values": [torch.tensor(v, dtype=torch.float32) for v in mine["values"]],
        "rewards": list(mine["rewards"]),
        "loss_masks": [torch.tensor(m, dtype=torch.int) for m in mine["loss_masks"]],
        "response_lengths": lengths,
        "total_lengths": [n + 3 for n in lengths],  # a 3-token prompt each
        "global_batch_sizes": [sum(len(r["rewards"]) for r in spec["ranks"])],  # one sample per rollout
    }
    compute_advantages_and_returns(args, rollout_data)
    load_function(spec["hook"])(args, spec["rollout_id"], rollout_data)
    log_rollout_data(spec["rollout_id"], args, rollout_data)
    dump = {k: [t.tolist() for t in rollout_data[k]] for k in ("values", "returns", "advantages", "loss_masks")}
    (out / f"rank{rank}.json").write_text(json.dumps(dump))
    if rank == 0:
        (out / "logged.json").write_text(json.dumps(logged))
    # No rank tears its gloo pairs down while the other is still in a collective: one full `make test`
    # saw rank 0 abort ("terminate called without an active exception") without this barrier.
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    mp.spawn(_rank, args=(spec, out), nprocs=len(spec["ranks"]), join=True)


if __name__ == "__main__":
    main()

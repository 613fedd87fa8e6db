"""Run slime v0.3.1's own argument handling and checkpoint/data-position logic on a train.py argv (CPU).

Used by test_round_handoff.py in a subprocess (its stubs never reach the test session):

    python slime_handoff_probe.py SPEC.json  ->  one JSON object on stdout

SPEC: {"save_data": [{"save": DIR, "rollout_id": N, "sample_offset": K}, ...],
       "launches": {NAME: [train.py arg, ...], ...}}

What runs is slime's code: `get_slime_extra_args_provider` (its parser), `slime_validate_args` (the
`--load` / `--ref-load` branch), `_is_megatron_checkpoint`, and `RolloutDataSource.save/load` (the
data position a start restores). What stands in, because Megatron is not vendored:
- Megatron's parser: slime parses with `ignore_unknown_args=True` (parse_known_args here), and the
  four Megatron flags slime's load logic reads are declared as Megatron declares them
  (`--finetune`, `--no-load-optim`, `--no-load-rng`: store_true; `--ckpt-step`: int, None);
- Megatron's `load_checkpoint` "Set iteration": `iteration = 0 if args.finetune or release else` the
  tracker's iteration (megatron/training/checkpointing.py), read here with shopsimrl's
  `latest_iteration`; the actor then starts at `iteration + 1` (slime/backends/megatron_utils/
  actor.py:107) unless `args.start_rollout_id` is already set (slime/ray/placement_group.py:218);
- import-time stubs for sglang, sglang_router, ray and megatron (none of them is called).

Under `--advantage-estimator ppo` a launch also reports `critic`: slime's own `create_training_models`
(slime/ray/placement_group.py:183-224: the role files read by `parse_megatron_role_args`, the critic's
start taking precedence) runs with Megatron's train group stood in by `_MegatronGroup`, which applies
the same "Set iteration" rule to the role's arguments, and slime's own load-dir check
(`_is_dir_nonempty`, slime/backends/megatron_utils/checkpoint.py:100) to its `--load`.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import types
from pathlib import Path


def _ray_remote(*args, **options):
    """`@ray.remote` and `@ray.remote(num_gpus=1)` at slime's import time: the class unchanged."""
    return args[0] if args and not options else (lambda cls: cls)


_STUBS = {
    "sglang": {}, "sglang.srt": {}, "sglang.srt.server_args": {"ServerArgs": object},
    "sglang_router": {}, "sglang_router.launch_router": {"RouterArgs": object},
    "ray": {"remote": _ray_remote}, "ray.util": {}, "ray.util.placement_group": {"placement_group": None,
    "PlacementGroup": object}, "ray.util.scheduling_strategies": {"PlacementGroupSchedulingStrategy": object},
    "megatron": {}, "megatron.training": {},
    "megatron.training.checkpointing": {"load_checkpoint": None, "save_checkpoint": None},
    "megatron.training.global_vars": {"get_args": None},
}  # fmt: skip
# What slime's parse_args merges in from its pre-parser (slime/utils/arguments.py, _pre_parse_mode).
_PRE_PARSED = {"train_backend": "megatron", "debug_rollout_only": False, "debug_train_only": False,
               "load_debug_rollout_data": None}  # fmt: skip


def _install_stubs() -> None:
    for name, attrs in _STUBS.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for key, value in attrs.items():
            setattr(module, key, value)


def _parser() -> argparse.ArgumentParser:
    from slime.utils.arguments import get_slime_extra_args_provider

    parser = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--finetune", "--no-load-optim", "--no-load-rng"):  # Megatron's, as Megatron declares them
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--ckpt-step", type=int, default=None)
    get_slime_extra_args_provider()(parser)
    return parser


def _data_source(args):
    """slime's RolloutDataSource with its position counters, without loading a prompt dataset."""
    from slime.rollout.data_source import RolloutDataSource

    source = object.__new__(RolloutDataSource)
    source.args, source.dataset, source.metadata = args, None, {}
    source.sample_offset = source.epoch_id = source.sample_group_index = source.sample_index = 0
    return source


def _loaded_iteration(args) -> int | None:
    """Megatron's "Set iteration" for a role's arguments: 0 with --finetune, else the tracker's (None: no tracker)."""
    from slime.backends.megatron_utils.checkpoint import _is_megatron_checkpoint

    from shopsimrl.models.slime_saves import latest_iteration

    tracker = latest_iteration(args.load) if args.load is not None and _is_megatron_checkpoint(args.load) else None
    return 0 if args.finetune or tracker is None else tracker


class _MegatronGroup:
    """Stands in for RayTrainGroup + MegatronTrainRayActor.init: what a role loads and the start it returns."""

    created: dict[str, dict] = {}

    def __init__(self, args, role: str):
        self.args, self.role = args, role

    def create(self, rollout_manager=None) -> list[int]:
        from slime.backends.megatron_utils.checkpoint import _is_dir_nonempty

        args = self.args
        loadable = args.load is not None and Path(args.load).exists() and _is_dir_nonempty(args.load)
        iteration = _loaded_iteration(args)
        self.created[self.role] = {"load": args.load, "save": args.save, "finetune": args.finetune,
                                   "no_load_optim": args.no_load_optim, "no_load_rng": args.no_load_rng,
                                   "load_passes_slimes_check": loadable, "loads_iteration": iteration,
                                   "lr": args.lr}  # fmt: skip
        return [iteration + 1]  # slime/backends/megatron_utils/actor.py:107


def _ppo_models(args) -> dict:
    """slime's create_training_models on `args` (validated): each role's load/save and the run's start."""
    import ray
    from slime.ray import placement_group

    ray.get = lambda value: value  # slime's own unit test of create_training_models does the same
    placement_group.allocate_train_group = lambda args, role="actor", **_: _MegatronGroup(args, role)
    _MegatronGroup.created = {}
    source = _data_source(args)

    class _RolloutManager:  # rollout_manager.load.remote(start - 1): slime's data source restores its position
        class load:  # noqa: N801
            remote = staticmethod(source.load)

    placement_group.create_training_models(args, {"actor": None, "critic": None}, _RolloutManager())
    return {**_MegatronGroup.created, "start_rollout_id": args.start_rollout_id,
            "data_sample_offset": source.sample_offset}  # fmt: skip


def _launch(argv: list[str]) -> dict:
    from slime.backends.megatron_utils.checkpoint import _is_megatron_checkpoint
    from slime.utils.arguments import slime_validate_args

    from shopsimrl.models.slime_saves import latest_iteration
    from shopsimrl.rollout.curriculum import rollout_step

    args, _megatron_only = _parser().parse_known_args(argv)
    for key, value in _PRE_PARSED.items():
        setattr(args, key, value)
    args.custom_config_path = None  # the plugin options are not under test here
    slime_validate_args(args)
    # The RolloutManager gets a copy of args now, before create_training_models sets start_rollout_id
    # on the driver's (slime/ray/placement_group.py:218-219, train.py:19-21): the step our generate
    # and all-samples hooks number its first rollout with.
    rollout_manager_step = rollout_step(copy.copy(args))
    megatron_dir = args.load is not None and _is_megatron_checkpoint(args.load)
    tracker = latest_iteration(args.load) if megatron_dir else None
    loaded_iteration = 0 if args.finetune or tracker is None else tracker
    start = args.start_rollout_id if args.start_rollout_id is not None else loaded_iteration + 1
    source = _data_source(args)
    if args.rollout_global_dataset:
        source.load(start - 1)  # what create_training_models does (slime/ray/placement_group.py:221-222)
    ppo = _ppo_models(copy.deepcopy(args)) if args.use_critic else None
    return {
        "ppo": ppo,
        "load": args.load, "save": args.save, "ref_load": args.ref_load, "finetune": args.finetune,
        "no_load_optim": args.no_load_optim, "no_load_rng": args.no_load_rng,
        "start_rollout_id_after_validate": args.start_rollout_id, "load_is_megatron": megatron_dir,
        "loads_iteration": tracker, "start_rollout_id": start, "num_rollout": args.num_rollout,
        "rollouts_trained": max(0, args.num_rollout - start), "data_sample_offset": source.sample_offset,
        "rollout_manager_step": rollout_manager_step,
        # Whether slime builds a reference model (restated from slime/ray/placement_group.py:178).
        "reference_model": args.kl_coef != 0 or args.use_kl_loss,
    }  # fmt: skip


def main(spec_path: str) -> None:
    _install_stubs()
    spec = json.loads(Path(spec_path).read_text())
    for entry in spec.get("save_data", []):
        source = _data_source(argparse.Namespace(save=entry["save"], rollout_global_dataset=True))
        source.sample_offset = entry["sample_offset"]
        source.save(entry["rollout_id"])  # slime's own writer: <save>/rollout/global_dataset_state_dict_<id>.pt
    print(json.dumps({name: _launch(argv) for name, argv in spec["launches"].items()}))


if __name__ == "__main__":
    main(sys.argv[1])

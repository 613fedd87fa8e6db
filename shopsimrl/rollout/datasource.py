"""How tasks reach the rollout: slime prompt data, the group key, and the local data source.

slime reads prompt data as JSONL (`--prompt-data`, with `--input-key prompt --label-key label
--metadata-key metadata --apply-chat-template`); `export_prompt_data` writes one line per task:

    {"prompt": [{"role": "user", "content": "<instruction>"}], "label": "<task_id>",
     "metadata": {"schema_version": 2, "task_id": "train-0-00012", "split": "train"}}

Why a message list: Qwen3.5 checkpoints ship a processor config, so slime's data source loads a
(vision-language) processor, and its `Dataset` then asserts that every prompt is a list of chat
messages (slime v0.3.1 `slime/utils/data.py`). With `--apply-chat-template` slime renders the list
with the checkpoint's template into `sample.prompt` (its logs and length filter use that text).

Our custom generate never uses `prompt` as model input (it renders the chat itself, with the system
prompt of the group's skill mask and the offered tools); it looks the task up by
`metadata.task_id`, so gold never travels through the data file.

Group key (docs/curriculum.md): `f"{task_id}#g{group_index}"`. slime's data source gives every
prompt group a global, checkpointed, monotonically increasing `group_index` shared by its n
siblings, so the key names one group: siblings share it (same arm and mask), a resampled group
(a new wave) gets a new key and a fresh draw, and a diagnostic retry reuses its source group's key.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Iterable, Sequence
from typing import Any

from shopsimrl.contract import Sample
from shopsimrl.shop import Catalog, Task, get_task
from shopsimrl.storage import atomic_write_text
from shopsimrl.storage.jsonl import dumps_record

# 2: `prompt` is a list of chat messages (1 had the bare instruction string).
PROMPT_DATA_SCHEMA_VERSION = 2
TASK_ID_KEY = "task_id"
SPLIT_KEY = "split"


def group_key(task_id: str, group_index: int) -> str:
    if group_index is None:
        raise ValueError(f"task {task_id!r}: sample has no group_index, cannot build a group key")
    return f"{task_id}#g{int(group_index)}"


def prompt_messages(task: Task) -> list[dict[str, str]]:
    """The prompt slime sees for `task`: the instruction as one user message."""
    return [{"role": "user", "content": task.instruction}]


def prompt_record(task: Task) -> dict[str, Any]:
    """One slime prompt-data line for `task` (no gold)."""
    return {
        "prompt": prompt_messages(task),
        "label": task.task_id,
        "metadata": {
            "schema_version": PROMPT_DATA_SCHEMA_VERSION,
            TASK_ID_KEY: task.task_id,
            SPLIT_KEY: task.split.value,
        },
    }


def export_prompt_data(tasks: Iterable[Task], path: str | os.PathLike[str]) -> int:
    """Write slime prompt data atomically; returns the number of lines."""
    lines = [dumps_record(prompt_record(task)) for task in tasks]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def task_for_sample(sample: Any, catalog: Catalog) -> Task:
    """The task a slime sample stands for, from `sample.metadata["task_id"]`."""
    metadata = sample.metadata or {}
    task_id = metadata.get(TASK_ID_KEY)
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(
            f"sample index={sample.index} names no task: expected metadata[{TASK_ID_KEY!r}] "
            "(write prompt data with shopsimrl.rollout.datasource.export_prompt_data)"
        )
    task = get_task(catalog, task_id)
    expected_split = metadata.get(SPLIT_KEY)
    if expected_split is not None and expected_split != task.split.value:
        raise ValueError(
            f"sample index={sample.index}: task {task_id!r} is in split {task.split.value}, "
            f"metadata says {expected_split!r}"
        )
    return task


class TaskGroupSource:
    """The local backend's data source: groups of n fresh samples, counters as slime's RolloutDataSource.

    `get_samples(k)` returns k groups; every sample gets a new global `index`, every group a new
    `group_index`. Tasks are taken in order, reshuffled each epoch when `shuffle_seed` is set.
    `add_samples` puts groups back (slime's buffer); they come out first.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        n_samples_per_prompt: int,
        *,
        shuffle_seed: int | None = None,
        sample_factory: type = Sample,
    ):
        if not tasks:
            raise ValueError("TaskGroupSource needs at least one task")
        if n_samples_per_prompt < 1:
            raise ValueError(f"n_samples_per_prompt must be >= 1, got {n_samples_per_prompt}")
        self.tasks = list(tasks)
        self.n_samples_per_prompt = n_samples_per_prompt
        self.shuffle_seed = shuffle_seed
        self.sample_factory = sample_factory
        self.sample_index = 0
        self.group_index = 0
        self.epoch = 0
        self.offset = 0
        self._order = self._epoch_order()
        self._buffer: list[list[Any]] = []

    def _epoch_order(self) -> list[int]:
        order = list(range(len(self.tasks)))
        if self.shuffle_seed is not None:
            random.Random(self.shuffle_seed + self.epoch).shuffle(order)
        return order

    def _next_task(self) -> Task:
        if self.offset >= len(self._order):
            self.epoch += 1
            self.offset = 0
            self._order = self._epoch_order()
        task = self.tasks[self._order[self.offset]]
        self.offset += 1
        return task

    def get_samples(self, num_groups: int) -> list[list[Any]]:
        groups = self._buffer[:num_groups]
        del self._buffer[:num_groups]
        while len(groups) < num_groups:
            task = self._next_task()
            template = self.sample_factory(
                prompt=task.instruction, label=task.task_id, metadata=prompt_record(task)["metadata"]
            )
            group = []
            for _ in range(self.n_samples_per_prompt):
                sample = copy.deepcopy(template)
                sample.group_index = self.group_index
                sample.index = self.sample_index
                self.sample_index += 1
                group.append(sample)
            self.group_index += 1
            groups.append(group)
        return groups

    def add_samples(self, groups: list[list[Any]]) -> None:
        self._buffer.extend(groups)

    def __len__(self) -> int:
        return len(self.tasks)

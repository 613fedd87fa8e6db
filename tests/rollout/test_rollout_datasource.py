"""The local data source's counters and the group key, as slime's RolloutDataSource numbers samples."""

from __future__ import annotations

import pytest

from shopsimrl.contract import Sample
from shopsimrl.rollout.datasource import TaskGroupSource, group_key, task_for_sample
from shopsimrl.shop import generate_catalog, load_split


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(seed=0, num_products=500)


def test_groups_counters_and_epochs(catalog):
    tasks = load_split(catalog, "train")[:3]
    source = TaskGroupSource(tasks, n_samples_per_prompt=2)
    first = source.get_samples(2)
    second = source.get_samples(2)
    groups = first + second
    assert [[s.index for s in g] for g in groups] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [{s.group_index for s in g} for g in groups] == [{0}, {1}, {2}, {3}]
    assert [g[0].metadata["task_id"] for g in groups] == [t.task_id for t in tasks] + [tasks[0].task_id]
    assert source.epoch == 1
    assert groups[0][0] is not groups[0][1] and groups[0][0].metadata is not groups[0][1].metadata
    assert all(s.status is Sample.Status.PENDING and s.tokens == [] for g in groups for s in g)


def test_buffer_comes_out_first(catalog):
    source = TaskGroupSource(load_split(catalog, "train")[:2], n_samples_per_prompt=1)
    returned = source.get_samples(1)
    source.add_samples(returned)
    again = source.get_samples(2)
    assert again[0] is returned[0]
    assert again[1][0].group_index == 1


def test_shuffle_is_seeded_per_epoch(catalog):
    tasks = load_split(catalog, "train")[:10]
    order = lambda seed: [g[0].metadata["task_id"] for g in TaskGroupSource(tasks, 1, shuffle_seed=seed).get_samples(20)]  # noqa: E731
    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)[:10]) == sorted(t.task_id for t in tasks)
    assert order(1)[:10] != order(1)[10:]


def test_group_key_and_task_lookup(catalog):
    task = load_split(catalog, "train")[4]
    assert group_key(task.task_id, 17) == "train-0-00004#g17"
    with pytest.raises(ValueError, match="task 'x': sample has no group_index, cannot build a group key"):
        group_key("x", None)
    assert task_for_sample(Sample(index=1, metadata={"task_id": task.task_id}), catalog) == task
    with pytest.raises(ValueError, match="task 'train-0-00004' is in split train, metadata says 'validation'"):
        task_for_sample(Sample(index=1, metadata={"task_id": task.task_id, "split": "validation"}), catalog)
    with pytest.raises(ValueError, match="n_samples_per_prompt must be >= 1, got 0"):
        TaskGroupSource([task], 0)

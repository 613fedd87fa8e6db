import pytest

from shopsimrl.tracking.export import ExportError
from shopsimrl.tracking.export.tables import MERGE_WINDOW, SplitStats, split_rows


def _split(rows, k=2):
    rollouts, updates, stats = [], [], SplitStats()
    split_rows(rows, k, rollouts.append, updates.append, stats)
    return rollouts, updates, stats


def test_interleaved_batches_merge_and_conflicts_keep_the_first_value():
    rows = [
        {"_step": 0, "rollout/step": 1, "rollout/a": 1.0},
        {"_step": 1, "rollout/step": 2, "rollout/a": 2.0},  # rollout manager already on batch 2
        {"_step": 2, "train/step": 2, "train/loss": 0.5},
        {"_step": 3, "rollout/step": 1, "perf/t": 9.0, "rollout/a": 1.5},  # conflict on rollout/a
        {"_step": 4, "eval/step": 1, "eval/x": 1.0},
    ]
    rollouts, updates, stats = _split(rows)
    assert [(r.rollout_step, r.wandb_steps, r.values) for r in rollouts] == [
        (1, [0, 3], {"rollout/a": 1.0, "perf/t": 9.0}),
        (2, [1], {"rollout/a": 2.0}),
    ]
    assert [(u.train_step, u.update_ordinal, u.rollout_step, u.values) for u in updates] == [
        (2, 1, 1, {"train/loss": 0.5})
    ]
    assert stats.conflicts == 1
    assert stats.conflict_examples == ["rollout/a at rollout/step 1: 1.0 kept, 1.5 ignored"]
    assert stats.rows_without_axis == 1


def test_a_batch_logged_again_after_the_window_is_an_error():
    rows = [{"_step": i, "rollout/step": i + 1, "rollout/a": 0.0} for i in range(MERGE_WINDOW + 2)]
    rows.append({"_step": 99, "rollout/step": 1, "rollout/a": 1.0})
    with pytest.raises(
        ExportError, match=r"rollout/step 1 logged again after 8 later steps were seen \(W&B _step 99\)"
    ):
        _split(rows)


def test_four_updates_per_rollout():
    _, updates, _ = _split([{"_step": 0, "train/step": 4 * 5 + 3, "train/loss": 1.0}], k=4)
    assert (updates[0].update_ordinal, updates[0].rollout_step) == (20, 5)

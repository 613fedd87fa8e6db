"""Reading a slime save dir: Megatron's tracker and the --save-hf copies, on real directories."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from shopsimrl.cli import main
from shopsimrl.models.slime_saves import SlimeSaveError, hf_saves, last_hf_save, latest_iteration, prune_saves


def _save_dir(tmp_path, tracker: str | None, hf_ids: list[int]):
    save = tmp_path / "checkpoints" / "qwen35-4b-round-000"
    save.mkdir(parents=True)
    if tracker is not None:
        (save / "latest_checkpointed_iteration.txt").write_text(tracker)
        (save / f"iter_{int(tracker) if tracker.strip().isdigit() else 0:07d}").mkdir()
    for rollout_id in hf_ids:
        _hf_export(save / "hf" / f"rollout-{rollout_id}")
    return save


SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _hf_export(path, *, shards=SHARDS, index=True):
    """What slime's --save-hf exporter leaves: config first, then the shards, the index last."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    for name in shards:
        (path / name).write_bytes(b"w")
    if index:
        weight_map = {"model.embed_tokens.weight": SHARDS[0], "lm_head.weight": SHARDS[1], "model.norm.weight": SHARDS[1]}
        (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_latest_iteration_reads_the_tracker(tmp_path) -> None:
    assert latest_iteration(_save_dir(tmp_path, "199\n", [])) == 199


def test_latest_iteration_is_none_before_the_first_save(tmp_path) -> None:
    save = tmp_path / "fresh"
    save.mkdir()
    assert latest_iteration(save) is None
    assert latest_iteration(tmp_path / "absent") is None


def test_release_tracker_reads_as_iteration_zero(tmp_path) -> None:
    assert latest_iteration(_save_dir(tmp_path, "release", [])) == 0


def test_a_malformed_tracker_is_an_error_naming_the_file(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [])
    (save / "latest_checkpointed_iteration.txt").write_text("iter_199")
    with pytest.raises(SlimeSaveError) as err:
        latest_iteration(save)
    assert str(err.value) == (
        f"{save / 'latest_checkpointed_iteration.txt'}: expected an iteration number or 'release', found 'iter_199'"
    )


def test_last_hf_save_is_the_highest_rollout_by_number_not_by_name(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [9, 99, 199, 19])
    (save / "hf" / "rollout-200.partial").mkdir()  # not slime's pattern: ignored
    (save / "hf" / "notes.txt").write_text("")
    assert last_hf_save(save) == save / "hf" / "rollout-199"
    assert [n for n, _ in hf_saves(save)] == [9, 19, 99, 199]


@pytest.mark.parametrize(
    ("shards", "index", "reason"),
    [
        (SHARDS, False, "no model.safetensors.index.json"),
        (SHARDS[:1], True, f"{SHARDS[1]} of its index is missing"),
    ],
    ids=["no-index", "missing-shard"],
)
def test_an_incomplete_newest_hf_save_is_a_loud_error_naming_it(tmp_path, shards, index, reason) -> None:
    """A crash during the final export leaves the directory without its index or shards; serving it
    would load uninitialised layers (SGLang does not check), so it is never taken, nor skipped silently."""
    save = _save_dir(tmp_path, "199", [179])
    newest = save / "hf" / "rollout-199"
    _hf_export(newest, shards=shards, index=index)
    with pytest.raises(SlimeSaveError) as err:
        last_hf_save(save)
    assert str(err.value) == (
        f"{newest}: the newest Hugging Face save is incomplete ({reason}): slime's exporter writes the "
        "index last, so the export was cut short. Export the final iteration again on a GPU host, or move "
        f"{newest.name} aside to serve {save / 'hf' / 'rollout-179'}"
    )
    (save / "hf" / "rollout-179").rename(save / "hf" / "old-179")
    with pytest.raises(SlimeSaveError) as err:
        last_hf_save(save)
    assert str(err.value).endswith("Export the final iteration again on a GPU host (no earlier save)"
    )


def test_a_complete_save_whose_index_names_each_shard_once_or_more_is_taken(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [179, 199])
    assert last_hf_save(save) == save / "hf" / "rollout-199"


def test_no_hf_save_is_an_error_naming_the_dir_and_the_flag(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [])
    with pytest.raises(SlimeSaveError) as err:
        last_hf_save(save)
    assert str(err.value) == (
        f"{save}: no Hugging Face save (no hf/rollout-<n> directory); slime writes them with "
        f"--save-hf {save}/hf/rollout-{{rollout_id}} at every --save-interval"
    )


def test_cli_prints_the_last_hf_save(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [99, 199])
    result = CliRunner().invoke(main, ["slime", "last-hf-save", str(save)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{save / 'hf' / 'rollout-199'}\n"


def test_cli_exits_2_with_the_reason_when_there_is_none(tmp_path) -> None:
    save = tmp_path / "empty"
    save.mkdir()
    result = CliRunner().invoke(main, ["slime", "last-hf-save", str(save)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {save}: no Hugging Face save")


def test_prune_keeps_the_trackers_iteration_and_the_last_hf_save_only(tmp_path) -> None:
    """What a finished round's later stages and the next round read: iter_<tracker> (START_LOAD) and
    the last hf/rollout-N (analyze, gate, eval). Nothing else of slime's (rollout/ data states) is touched."""
    save = _save_dir(tmp_path, "199", [19, 99, 199])
    for n in (19, 99):
        (save / f"iter_{n:07d}").mkdir()
    (save / "rollout").mkdir()
    (save / "rollout" / "global_dataset_state_dict_199.pt").write_bytes(b"d")
    (save / "iter_0000099.partial").mkdir()  # not Megatron's pattern: left alone
    removed = prune_saves(save)
    assert removed == [save / "iter_0000019", save / "iter_0000099", save / "hf" / "rollout-19", save / "hf" / "rollout-99"]
    assert sorted(p.name for p in save.iterdir()) == [
        "hf", "iter_0000099.partial", "iter_0000199", "latest_checkpointed_iteration.txt", "rollout"]
    assert [p.name for p in (save / "hf").iterdir()] == ["rollout-199"]
    assert prune_saves(save) == []


def test_prune_removes_nothing_when_the_last_saves_are_not_whole(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [99, 199])
    (save / "iter_0000099").mkdir()
    (save / "iter_0000199").rmdir()  # the tracker names an iteration that is not there
    with pytest.raises(SlimeSaveError, match="iter_0000199 .* is missing: nothing pruned"):
        prune_saves(save)
    assert (save / "iter_0000099").is_dir() and (save / "hf" / "rollout-99").is_dir()


def test_prune_keeps_the_critics_tracked_iteration_too(tmp_path) -> None:
    """A PPO round's critic saves in critic/ (its role's --save): Megatron's tracker and iter_ dirs, no HF copy.
    The next round's critic starts from the tracker's iteration, so that one stays."""
    save = _save_dir(tmp_path, "199", [99, 199])
    critic = save / "critic"
    for n in (99, 199):
        (critic / f"iter_{n:07d}").mkdir(parents=True)
    (critic / "latest_checkpointed_iteration.txt").write_text("199")
    removed = prune_saves(save)
    assert removed == [save / "hf" / "rollout-99", critic / "iter_0000099"]
    assert sorted(p.name for p in critic.iterdir()) == ["iter_0000199", "latest_checkpointed_iteration.txt"]


def test_prune_removes_nothing_when_the_critics_tracked_save_is_missing(tmp_path) -> None:
    save = _save_dir(tmp_path, "199", [99, 199])
    (save / "iter_0000099").mkdir()
    (save / "critic" / "iter_0000099").mkdir(parents=True)  # the critic's tracker was never written
    with pytest.raises(SlimeSaveError) as err:
        prune_saves(save)
    assert str(err.value) == f"{save / 'critic'}: no latest_checkpointed_iteration.txt: nothing pruned"
    assert (save / "iter_0000099").is_dir() and (save / "hf" / "rollout-99").is_dir()

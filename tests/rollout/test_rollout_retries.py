"""Diagnostic full-skill retries: queue -> run -> results journal; every active chunk in the prompt."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from expert_generator import ExpertTextGenerator
from sglang_fake_server import fake_sglang, ok_reply

from shopsimrl.config import ShopSimOptions
from shopsimrl.models import tiny_tokenizer
from shopsimrl.records import RetryRequest, append_retry_request, read_retry_results
from shopsimrl.rollout.retries import (
    RetryMode,
    pending_requests,
    retry_mode,
    run_pending_retries,
    sampling_params_from_args,
    schedule_pending,
)
from shopsimrl.shop import generate_catalog, load_split
from shopsimrl.skills.skillbank import load_skillbank

SKILLBANK = Path(__file__).resolve().parents[2] / "configs" / "skillbank.example.json"
CATALOG = {"seed": 0, "num_products": 500}


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(**CATALOG)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _request(task_id: str, group_index: int) -> RetryRequest:
    return RetryRequest(request_id=f"4-{group_index}-full_skill", task_id=task_id, group_key=f"{task_id}#g{group_index}",
                        source_group_index=group_index, rollout_step=4,
                        chunk_ids=load_skillbank(SKILLBANK).active_ids)


def _options(tmp_path) -> ShopSimOptions:
    return ShopSimOptions(run_dir=str(tmp_path), skillbank=str(SKILLBANK), catalog=CATALOG, max_turns=12)


class Recording(ExpertTextGenerator):
    """The expert, recording the system prompt each episode was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    async def generate(self, input_ids, sampling_params):
        if not self.calls:
            self.prompts.append(self.tokenizer.decode(input_ids))
        return await super().generate(input_ids, sampling_params)


def test_run_pending_retries_uses_every_active_chunk_and_records_results(tmp_path, catalog, tokenizer):
    task = load_split(catalog, "train")[0]
    append_retry_request(tmp_path, _request(task.task_id, 11))
    append_retry_request(tmp_path, _request(task.task_id, 11))  # a duplicate line runs once
    generator = Recording(catalog, task, tokenizer)
    results = run_pending_retries(str(tmp_path), generator, tokenizer, _options(tmp_path), catalog=catalog)
    assert [r.model_dump(mode="json") for r in results] == [{
        "schema_version": 1, "kind": "retry_result", "request_id": "4-11-full_skill", "source_group_index": 11,
        "outcome": {"reward": 1.0, "strict_reward": 1.0, "success": True, "scorable": True, "technical_error": None},
        "technical_error": None,
    }]
    bank = load_skillbank(SKILLBANK)
    system = generator.prompts[0]
    positions = [system.index(chunk.text) for chunk in bank.active_chunks]
    assert positions == sorted(positions)  # every active chunk, in skillbank order
    assert bank.chunks[-1].text not in system  # the inactive chunk is not offered
    assert [r.request_id for r in read_retry_results(tmp_path).records] == ["4-11-full_skill"]
    assert pending_requests(str(tmp_path)) == []
    assert run_pending_retries(str(tmp_path), generator, tokenizer, _options(tmp_path), catalog=catalog) == []


def test_unknown_task_becomes_a_technical_result_not_a_crash(tmp_path, catalog, tokenizer):
    append_retry_request(tmp_path, _request("train-0-99999", 3))
    results = run_pending_retries(str(tmp_path), object(), tokenizer, _options(tmp_path), catalog=catalog)
    assert results[0].outcome.scorable is False
    assert results[0].technical_error == {
        "kind": "internal",
        "message": "retry 4-3-full_skill: unknown task id 'train-0-99999': split train has 95 tasks",
    }


def test_schedule_pending_inline_with_an_injected_generator(tmp_path, catalog, tokenizer):
    task = load_split(catalog, "train")[0]
    append_retry_request(tmp_path, _request(task.task_id, 5))
    args = SimpleNamespace(shopsim=_options(tmp_path).model_dump(), shopsim_tokenizer=tokenizer,
                           shopsim_catalog=catalog, shopsim_generator=ExpertTextGenerator(catalog, task, tokenizer))
    assert retry_mode(args) is RetryMode.INLINE
    assert schedule_pending(args) is None
    assert [(r.request_id, r.outcome.success) for r in read_retry_results(tmp_path).records] == [("4-5-full_skill", True)]


def test_under_slime_with_colocated_engines_retries_run_inside_the_rollout_window(tmp_path, catalog, tokenizer):
    """The all-samples hook runs inside slime's rollout function: inline retries are done (against the
    engines serving this rollout's weights) before it returns, never racing slime's offload/update."""
    tasks = load_split(catalog, "train")[1:3]
    for i, task in enumerate(tasks):
        append_retry_request(tmp_path, _request(task.task_id, 8 + i))
    ids = tokenizer.encode("no tool call", add_special_tokens=False) + [258]
    options = _options(tmp_path).model_copy(update={"max_turns": 1})
    with fake_sglang([ok_reply(ids, [-1.0] * len(ids))] * 2) as server:
        host, port = server.url.removeprefix("http://").split(":")
        args = SimpleNamespace(shopsim=options.model_dump(), shopsim_tokenizer=tokenizer, shopsim_catalog=catalog,
                               sglang_router_ip=host, sglang_router_port=int(port), colocate=True,
                               rollout_temperature=0.8, rollout_top_p=0.9, rollout_top_k=-1)
        assert retry_mode(args) is RetryMode.INLINE
        assert schedule_pending(args) is None
        # Done when the hook returns: both episodes were served before slime could abort/offload.
        assert len(server.requests) == 2
    results = read_retry_results(tmp_path).records
    assert sorted(r.request_id for r in results) == ["4-8-full_skill", "4-9-full_skill"]


def test_background_retries_are_refused_with_colocated_engines():
    args = SimpleNamespace(shopsim_retry_mode="background", colocate=True)
    with pytest.raises(ValueError, match=r"^shopsim_retry_mode=background needs engines that are not colocated: "
                                         r"with --colocate slime aborts, offloads and updates the engines"):
        retry_mode(args)
    assert retry_mode(SimpleNamespace(shopsim_retry_mode="background", colocate=False)) is RetryMode.BACKGROUND
    assert retry_mode(SimpleNamespace(colocate=True)) is RetryMode.INLINE


def test_schedule_pending_in_the_background_against_sglang(tmp_path, catalog, tokenizer):
    task = load_split(catalog, "train")[1]
    append_retry_request(tmp_path, _request(task.task_id, 8))
    ids = tokenizer.encode("no tool call", add_special_tokens=False) + [258]
    options = _options(tmp_path).model_copy(update={"max_turns": 1})
    with fake_sglang([ok_reply(ids, [-1.0] * len(ids))]) as server:
        host, port = server.url.removeprefix("http://").split(":")
        args = SimpleNamespace(shopsim=options.model_dump(), shopsim_tokenizer=tokenizer, shopsim_catalog=catalog,
                               sglang_router_ip=host, sglang_router_port=int(port), colocate=False,
                               shopsim_retry_mode="background",
                               rollout_temperature=0.8, rollout_top_p=0.9, rollout_top_k=-1)
        assert retry_mode(args) is RetryMode.BACKGROUND
        thread = schedule_pending(args)
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert server.requests[0]["sampling_params"] == {
        "temperature": 0.8, "top_p": 0.9, "top_k": -1, "max_new_tokens": 256, "stop_token_ids": [258]}
    results = read_retry_results(tmp_path).records
    assert [(r.request_id, r.outcome.scorable, r.outcome.success) for r in results] == [("4-8-full_skill", True, False)]


def test_driver_mode_does_nothing_and_bad_modes_are_rejected(tmp_path):
    append_retry_request(tmp_path, _request("train-0-00000", 1))
    args = SimpleNamespace(shopsim={"run_dir": str(tmp_path)}, shopsim_retry_mode="driver")
    assert schedule_pending(args) is None
    assert read_retry_results(tmp_path).records == []
    with pytest.raises(ValueError, match=r"args.shopsim_retry_mode='later'; expected one of: background, inline, driver"):
        retry_mode(SimpleNamespace(shopsim_retry_mode="later"))
    assert sampling_params_from_args(SimpleNamespace(rollout_temperature=1.0)) == {"temperature": 1.0}
    assert json.loads((tmp_path / "retry_queue.jsonl").read_text())["request_id"] == "4-1-full_skill"

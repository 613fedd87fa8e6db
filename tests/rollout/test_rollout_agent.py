"""The agent loop end to end on a real ShopEnv: scripted expert text and the tiny model."""

from __future__ import annotations

import asyncio

import pytest
import torch
from expert_generator import IM_END_ID, MODEL_LOGPROB, ExpertTextGenerator

from shopsimrl.config import ShopSimOptions
from shopsimrl.contract import Arm, Sample, ShopSimMeta, get_meta
from shopsimrl.errors import ModelServiceError
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.agent import run_trajectory
from shopsimrl.rollout.generators import FinishReason, GenerationAborted, GenerationResult, LocalHFGenerator
from shopsimrl.rollout.prompting import ChatRenderer
from shopsimrl.rollout.segments import trajectory_to_samples
from shopsimrl.rollout.trajectory import StopReason, TrajectoryStatus
from shopsimrl.shop import (
    ASSISTANT_TURN_END,
    ExpertPolicy,
    ShopEnv,
    ToolCallFormat,
    format_tool_call,
    generate_catalog,
    load_split,
    tool_response_turn,
)

# The tiny tokenizer's ChatML template opens assistant turns without a think block, also in XML format.
TINY_HEADER = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(seed=0, num_products=500)


@pytest.fixture(scope="module")
def task(catalog):
    return load_split(catalog, "train")[0]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture
def options(tmp_path):
    return ShopSimOptions(run_dir=str(tmp_path), max_turns=12, max_new_tokens_per_turn=256, max_context_tokens=8192)


def _expert_reference(catalog, task):
    """The expert's episode run directly on the environment: texts, observations, tool sets, outcome."""
    env = ShopEnv(catalog, max_turns=12)
    env.reset(task=task, seed=0)
    expert = ExpertPolicy(noise=0.0, seed=0)
    turns = []
    while True:
        before = env.tool_schema_hash()
        text = format_tool_call(expert.next_action(env), ToolCallFormat.XML)
        observation, _, terminated, truncated, _ = env.step(text)
        turns.append({"text": text, "observation": observation, "changed": env.tool_schema_hash() != before})
        if terminated or truncated:
            return turns, env.outcome(), env.state_hash()


def _runs(mask, values):
    """Split `values` into maximal runs of equal mask value: [(mask_value, run), ...]."""
    runs = []
    for m, v in zip(mask, values, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(v)
        else:
            runs.append((m, [v]))
    return runs


def test_expert_episode_exact_tokens_segments_and_reward(catalog, task, tokenizer, options):
    generator = ExpertTextGenerator(catalog, task, tokenizer)
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=generator, options=options,
        skill_texts=["Skill one.", "Skill two."], sampling_params={"temperature": 1.0},
    ))
    turns, outcome, state_hash = _expert_reference(catalog, task)
    assert trajectory.status is TrajectoryStatus.COMPLETED
    assert trajectory.stop_reason is StopReason.DONE
    assert trajectory.num_turns == len(turns) == 6
    assert trajectory.outcome.model_dump() == {
        "reward": 1.0, "strict_reward": 1.0, "success": True, "scorable": True, "technical_error": None,
    }
    assert (outcome.reward, outcome.success) == (1.0, True)
    assert trajectory.state_hash == state_hash
    assert trajectory.gold_audit is not None

    # One segment per tool set: a new one after every turn that changed the offered tools.
    changes = [i for i, t in enumerate(turns[:-1]) if t["changed"]]
    assert len(trajectory.segments) == len(changes) + 1 == 4
    turns_per_segment = [sum(1 for m in trajectory.messages[s.message_start:s.message_end] if m["role"] == "assistant")
                         for s in trajectory.segments]
    assert turns_per_segment == [1, 1, 3, 1]

    # The system prompt carries the skills; the messages are the conversation exactly.
    assert trajectory.messages[0]["content"].endswith("# Shopping skills\n\nSkill one.\n\nSkill two.")
    assert trajectory.messages[1] == {"role": "user", "content": task.instruction}
    assert [m["content"] for m in trajectory.messages[2::2]] == [t["text"] for t in turns]
    assert [m["content"] for m in trajectory.messages[3::2]] == [t["observation"] for t in turns]

    renderer = ChatRenderer(tokenizer, options.tool_call_format)
    for segment in trajectory.segments:
        # Token contiguity: the segment is exactly the chat template's render of its conversation
        # with its tools (this template ignores tools: the fallback messages carry them).
        assert segment.tokens == segment.prompt_ids + segment.response_ids
        last_assistant = segment.message_end - 2  # every segment's messages end with a tool message
        tools = _tools_at(catalog, task, turns, segment.message_start)
        messages, _ = renderer.template_messages(trajectory.messages[:last_assistant + 1], tools)
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        assert tokenizer.decode(segment.tokens) == rendered.removesuffix("\n")
        assert tokenizer.decode(segment.prompt_ids) == renderer.prompt_text(
            trajectory.messages[:segment.message_start], tools
        )
        # Loss mask: 1 exactly on the model's turns (text + <|im_end|>), 0 exactly on the observations.
        runs = _runs(segment.loss_mask, segment.response_ids)
        model_runs = [tokenizer.decode(ids) for m, ids in runs if m == 1]
        observation_runs = [tokenizer.decode(ids) for m, ids in runs if m == 0]
        seg_turns = [m for m in trajectory.messages[segment.message_start:segment.message_end] if m["role"] == "assistant"]
        assert model_runs == [m["content"] + "<|im_end|>" for m in seg_turns]
        seg_observations = [m["content"] for m in trajectory.messages[segment.message_start:segment.message_end]
                            if m["role"] == "tool"][: len(seg_turns) - 1]
        assert observation_runs == ["\n" + tool_response_turn(o) + TINY_HEADER for o in seg_observations]
        assert segment.rollout_log_probs == [MODEL_LOGPROB if m else 0.0 for m in segment.loss_mask]
    # Each generate call saw exactly the segment's tokens so far.
    assert [len(ids) for ids, _ in generator.calls][:1] == [len(trajectory.segments[0].prompt_ids)]
    assert all(params["stop_token_ids"] == [IM_END_ID] and params["max_new_tokens"] == 256
               for _, params in generator.calls)


def _tools_at(catalog, task, turns, message_start):
    """The tools offered after the first (message_start - 2) / 2 expert turns."""
    env = ShopEnv(catalog, max_turns=12)
    env.reset(task=task, seed=0)
    for turn in turns[: (message_start - 2) // 2]:
        env.step(turn["text"])
    return env.offered_tools()


def test_segments_become_samples_sharing_rollout_id_group_and_outcome(catalog, task, tokenizer, options):
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=ExpertTextGenerator(catalog, task, tokenizer),
        options=options, skill_texts=[], sampling_params={},
    ))
    template = Sample(group_index=7, index=41, prompt=task.instruction, label=task.task_id,
                      metadata={"task_id": task.task_id, "split": "train"})
    meta = ShopSimMeta(task_id=task.task_id, group_key=f"{task.task_id}#g7", arm=Arm.SKILL_FREE, q=0.5)
    samples = trajectory_to_samples(trajectory, template, meta)
    assert len(samples) == 4
    assert {(s.rollout_id, s.group_index) for s in samples} == {(41, 7)}
    assert all(type(s) is Sample and s is not template for s in samples)
    assert template.tokens == [] and template.rollout_id is None  # the template is untouched
    for position, (sample, segment) in enumerate(zip(samples, trajectory.segments, strict=True)):
        shop = get_meta(sample)
        assert shop.segment.model_dump() == {"index": position, "count": 4}
        assert shop.outcome == trajectory.outcome
        assert (shop.group_key, shop.arm, shop.q) == (f"{task.task_id}#g7", Arm.SKILL_FREE, 0.5)
        assert sample.tokens == segment.tokens
        assert sample.response_length == len(sample.loss_mask) == len(sample.rollout_log_probs) == segment.response_length
        assert sample.status is Sample.Status.COMPLETED
        assert sample.reward is None and sample.remove_sample is False
        assert sample.metadata["task_id"] == task.task_id  # slime's own metadata keys are kept
        assert sample.metadata["shopsim"]["gold_audit"] == trajectory.gold_audit
        assert sample.metadata["shopsim"]["trajectory"]["num_turns"] == 6
    all_messages = [m for s in samples for m in s.metadata["shopsim"]["messages"]]
    assert all_messages == trajectory.messages


@pytest.mark.parametrize(
    ("error", "status"),
    [(ModelServiceError("HTTP 500 from http://x/generate: boom"), TrajectoryStatus.FAILED),
     (GenerationAborted("http://x/generate aborted the request: Aborted"), TrajectoryStatus.ABORTED)],
)
def test_model_service_error_makes_the_trajectory_unscorable(catalog, task, tokenizer, options, error, status):
    generator = ExpertTextGenerator(catalog, task, tokenizer, fail_on_call=3, error=error)
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=generator, options=options,
        skill_texts=[], sampling_params={},
    ))
    assert trajectory.status is status
    assert trajectory.stop_reason is StopReason.TECHNICAL_ERROR
    assert trajectory.outcome.model_dump() == {
        "reward": None, "strict_reward": None, "success": None, "scorable": False,
        "technical_error": {"kind": "model_service", "message": error.message},
    }
    assert trajectory.num_turns == 2  # two turns were generated before the failure
    template = Sample(group_index=0, index=5, metadata={"task_id": task.task_id})
    meta = ShopSimMeta(task_id=task.task_id, group_key="k", arm=Arm.ASSISTED_EMPTY, q=0.0)
    samples = trajectory_to_samples(trajectory, template, meta)
    assert len(samples) == len(trajectory.segments) == 2
    assert all(s.remove_sample and s.status.value == status.value for s in samples)
    assert all(get_meta(s).outcome.technical_error.kind == "model_service" for s in samples)


def test_a_bug_inside_the_loop_is_an_internal_technical_error(catalog, task, tokenizer, options):
    class Broken:
        async def generate(self, input_ids, sampling_params):
            return {"not": "a GenerationResult"}

    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=Broken(), options=options,
        skill_texts=[], sampling_params={},
    ))
    assert trajectory.status is TrajectoryStatus.FAILED
    assert trajectory.outcome.scorable is False
    assert trajectory.outcome.technical_error.model_dump() == {
        "kind": "internal", "message": "AttributeError: 'dict' object has no attribute 'token_ids'",
    }


def test_turn_hitting_max_new_tokens_truncates_and_is_scored(catalog, task, tokenizer, options):
    class Rambling:
        async def generate(self, input_ids, sampling_params):
            ids = [ord("a")] * sampling_params["max_new_tokens"]
            return GenerationResult(ids, [-1.0] * len(ids), FinishReason.LENGTH)

    opts = options.model_copy(update={"max_new_tokens_per_turn": 5})
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=Rambling(), options=opts,
        skill_texts=[], sampling_params={"max_new_tokens": 9},
    ))
    assert (trajectory.status, trajectory.stop_reason, trajectory.num_turns) == (
        TrajectoryStatus.TRUNCATED, StopReason.LENGTH, 1)
    assert trajectory.segments[0].response_ids == [ord("a")] * 5
    fresh = ShopEnv(catalog, max_turns=12)
    fresh.reset(task=task, seed=0)
    assert trajectory.outcome.model_dump() == {
        "reward": fresh.outcome().reward, "strict_reward": 0.0, "success": False, "scorable": True,
        "technical_error": None,
    }


def test_context_limit_stops_before_generating(catalog, task, tokenizer, options):
    opts = options.model_copy(update={"max_context_tokens": 256})
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=ExpertTextGenerator(catalog, task, tokenizer),
        options=opts, skill_texts=[], sampling_params={},
    ))
    assert (trajectory.status, trajectory.stop_reason, trajectory.num_turns) == (
        TrajectoryStatus.TRUNCATED, StopReason.CONTEXT_LIMIT, 0)
    assert trajectory.outcome.scorable is True
    samples = trajectory_to_samples(trajectory, Sample(index=0, group_index=0), ShopSimMeta(
        task_id=task.task_id, group_key="k", arm=Arm.SKILL_FREE, q=1.0))
    assert [s.response_length for s in samples] == [0]
    assert samples[0].status is Sample.Status.TRUNCATED


def test_tiny_model_episode_with_local_generator(catalog, task, tokenizer, options):
    model = tiny_model(tokenizer, seed=0)
    # Stop on any of 40 common bytes so random text ends turns quickly without <|im_end|>.
    stops = list(range(ord("a"), ord("a") + 40))
    generator = LocalHFGenerator(model, tokenizer, seed=1)
    opts = options.model_copy(update={"max_turns": 3})
    trajectory = asyncio.run(run_trajectory(
        task=task, catalog=catalog, tokenizer=tokenizer, generator=generator, options=opts, skill_texts=[],
        sampling_params={"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 48, "stop_token_ids": stops},
    ))
    assert trajectory.status is TrajectoryStatus.COMPLETED
    assert trajectory.stop_reason is StopReason.TURN_LIMIT
    assert trajectory.num_turns == 3
    assert trajectory.outcome.scorable and trajectory.outcome.reward == 0.0
    assert len(trajectory.segments) == 1  # malformed calls never change the offered tools
    segment = trajectory.segments[0]
    assert segment.tokens == segment.prompt_ids + segment.response_ids
    runs = _runs(segment.loss_mask, segment.response_ids)
    assert [m for m, _ in runs] == [1, 0, 1, 0, 1]
    observations = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
    # Turns ended on a stop byte, not <|im_end|>: the end-of-turn marker is in the masked continuation.
    assert [tokenizer.decode(ids) for m, ids in runs if m == 0] == [
        ASSISTANT_TURN_END + tool_response_turn(o) + TINY_HEADER for o in observations[:2]
    ]
    # The rollout log-probs are log_softmax(logits) at temperature 1 of a full forward pass.
    with torch.no_grad():
        logits = model(torch.tensor([segment.tokens])).logits[0].float()
    reference = torch.log_softmax(logits, dim=-1)
    start = len(segment.prompt_ids)
    for offset, (token, mask, log_prob) in enumerate(
        zip(segment.response_ids, segment.loss_mask, segment.rollout_log_probs, strict=True)
    ):
        expected = float(reference[start + offset - 1, token]) if mask else 0.0
        assert log_prob == pytest.approx(expected, abs=1e-4)

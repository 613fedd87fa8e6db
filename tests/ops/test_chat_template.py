"""The rollout's token stream against a chat template, turn by turn (shopsimrl.ops.chat_template).

Every template available offline must agree with the rollout by construction: the tiny tokenizer's
ChatML, SmolLM2's own (its real tokenizer, from the demo model's GGUF), and Qwen3.5- and Qwen3-style
templates built in tests/chat_templates.py, on both tokenizers. Templates whose later turns are not
what the rollout appends are reported at the first differing token. With the production checkpoint
present (SHOPSIMRL_QWEN35_DIR, or $MODELS_DIR/Qwen3.5-4B) the real template is compared too;
otherwise that test skips with the reason.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from chat_templates import HEADINGS, QWEN3_STYLE, QWEN35_STYLE, TOOL_ROLE_TURNS, smollm2_tokenizer

from shopsimrl.models.tiny import tiny_tokenizer
from shopsimrl.ops.chat_template import compare_with_template, expert_turns
from shopsimrl.rollout.prompting import ChatRenderer, initial_messages
from shopsimrl.shop import ShopEnv, format_tool_call

_TOKENIZERS = {"tiny": tiny_tokenizer, "smollm2": smollm2_tokenizer}
_TEMPLATES = {"own": None, "qwen35_style": QWEN35_STYLE, "qwen3_style": QWEN3_STYLE}


def _tokenizer(name: str, template: str | None):
    tokenizer = copy.deepcopy(_TOKENIZERS[name]())
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


def test_the_expert_episode_has_turns_in_several_segments():
    _, _, turns = expert_turns("xml")
    assert len(turns) == 6
    assert [t.call.name for t in turns][:2] == ["search", "view_product"]
    # The offered tools change during the episode: new segments are part of the comparison.
    assert len({tuple(t["function"]["name"] for t in turn.tools) for turn in turns}) > 1


@pytest.mark.parametrize(
    ("tokenizer_name", "template_name", "fmt", "renders_tools"),
    [
        ("tiny", "own", "json", False),
        ("tiny", "own", "xml", False),
        ("tiny", "qwen35_style", "xml", True),
        ("tiny", "qwen3_style", "json", True),
        ("smollm2", "own", "json", False),
        ("smollm2", "own", "xml", False),
        ("smollm2", "qwen3_style", "json", True),
    ],
)
def test_every_template_here_agrees_with_the_rollout(tokenizer_name, template_name, fmt, renders_tools):
    tokenizer = _tokenizer(tokenizer_name, _TEMPLATES[template_name])
    assert ChatRenderer(tokenizer, fmt).renders_tools is renders_tools
    assert compare_with_template(tokenizer, fmt) == []


def _turn_2_prompt(tokenizer, fmt) -> tuple[str, str]:
    """The rollout's prompt text at turn 2 (a new segment: the first call changed the tools) and the call."""
    catalog, task, turns = expert_turns(fmt)
    env = ShopEnv(catalog)
    instruction, _ = env.reset(task=task, seed=0)
    call = format_tool_call(turns[0].call, fmt)
    observation, *_ = env.step(call)
    messages = [*initial_messages([], instruction), {"role": "assistant", "content": call},
                {"role": "tool", "content": observation}]
    return ChatRenderer(tokenizer, fmt).prompt_text(messages, turns[1].tools), call


def _tokens_before(tokenizer, text: str, end: int) -> int:
    return len(tokenizer.encode(text[:end], add_special_tokens=False))


def test_a_template_with_other_tool_turns_is_reported_from_the_first_tool_response():
    tokenizer = _tokenizer("tiny", TOOL_ROLE_TURNS)
    problems = compare_with_template(tokenizer, "json")
    assert [p.split(":")[0] for p in problems] == ["turn_2", "turn_3", "turn_4", "turn_5", "turn_6"]
    prompt, _ = _turn_2_prompt(tokenizer, "json")
    # Both write <|im_start|>, then "user\n<tool_response>" (ours) against "tool" (the template).
    position = _tokens_before(tokenizer, prompt, prompt.index("<|im_start|>user\n<tool_response>")) + 1
    assert problems[0].startswith(f"turn_2: first difference at token {position} of ")
    assert problems[0].endswith(
        "ours 'call><|im_end|>\\n<|im_start|>user\\n<to' vs template 'call><|im_end|>\\n<|im_start|>tool\\n{\"p'"
    )


def test_a_template_that_is_not_chatml_agrees_on_the_opening_only():
    tokenizer = _tokenizer("tiny", HEADINGS)
    problems = compare_with_template(tokenizer, "json")
    # The opening is the template's own; the rollout's later turns (<|im_end|>, ChatML) are not.
    assert [p.split(":")[0] for p in problems] == ["turn_2", "turn_3", "turn_4", "turn_5", "turn_6"]
    prompt, call = _turn_2_prompt(tokenizer, "json")
    position = _tokens_before(tokenizer, prompt, prompt.index(call) + len(call))
    assert problems[0].startswith(f"turn_2: first difference at token {position} of ")
    assert problems[0].endswith("ours 'ol_call><|im_end|>\\n<|im_start|>user\\n' vs template 'ol_call>\\n\\n### us'")


def test_a_prompt_ending_in_a_blank_line_that_a_tokenizer_splits_otherwise_is_reported():
    """SmolLM2's GPT-2-style pre-tokenizer encodes the header's closing "\\n\\n" as one token at the end
    of a prompt, but as two before the model's "<tool_call>" when the whole conversation is encoded:
    under a Qwen3.5-style header (empty think block) the rollout's ids differ from the template's on
    the turns appended inside a segment (4 and 5; turns 2, 3 and 6 open a new segment, encoded whole).
    Qwen2/Qwen3's pre-tokenizer keeps ">\\n\\n" together in both; the production check finds out for its model."""
    tokenizer = _tokenizer("smollm2", QWEN35_STYLE)
    problems = compare_with_template(tokenizer, "xml")
    assert [p.split(":")[0] for p in problems] == ["turn_4", "turn_5"]
    assert problems[0].endswith("ours '<think>\\n\\n</think>\\n\\n<tool_call>\\n<' vs template '<think>\\n\\n</think>\\n\\n<tool_call>\\n'")


def _production_checkpoint() -> Path | None:
    candidates = [os.environ.get("SHOPSIMRL_QWEN35_DIR"), os.path.join(os.environ.get("MODELS_DIR", "models"), "Qwen3.5-4B")]
    return next((Path(c) for c in candidates if c and (Path(c) / "tokenizer_config.json").is_file()), None)


def test_production_checkpoint_template_agrees_with_the_rollout():
    model_dir = _production_checkpoint()
    if model_dir is None:
        pytest.skip("no Qwen3.5 checkpoint: set SHOPSIMRL_QWEN35_DIR (or MODELS_DIR holding Qwen3.5-4B) to compare "
                    "the rollout with its chat template; `make preflight` runs it on the host")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    assert ChatRenderer(tokenizer, "xml").renders_tools is True
    assert compare_with_template(tokenizer, "xml") == []


@pytest.mark.parametrize(("template", "exit_code"), [(QWEN3_STYLE, 0), (TOOL_ROLE_TURNS, 1)])
def test_check_chat_template_cli_passes_when_the_rollout_agrees(tmp_path, template, exit_code):
    from click.testing import CliRunner

    from shopsimrl.cli import main

    _tokenizer("tiny", template).save_pretrained(str(tmp_path))
    result = CliRunner().invoke(main, ["slime", "check-chat-template", str(tmp_path), "--format", "json"])
    assert result.exit_code == exit_code, result.output
    if exit_code == 0:
        assert result.output.startswith(f"{tmp_path}: ")
    else:
        assert result.output.startswith("mismatch: turn_2: first difference at token ")

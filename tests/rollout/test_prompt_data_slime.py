"""Our exported prompt data read by slime v0.3.1's own `Dataset`, as its data source reads it.

Qwen3.5 checkpoints ship a processor config, so slime's `load_processor` returns a vision-language
processor and `Dataset` asserts that each prompt is a list of messages. The model directory here is
built in the test (tiny byte-level tokenizer + a PIL image processor saved as a processor config),
and slime's `load_tokenizer`/`load_processor`/`Dataset` do the rest. slime's source comes from
tests/slime_source.py; skipped with the reason when it is absent (a user's clone without ../shared).
"""

from __future__ import annotations

import json
import sys

import pytest
from slime_source import SLIME_SOURCE_NOTE, SLIME_SRC

from shopsimrl.models.tiny import tiny_tokenizer
from shopsimrl.rollout.datasource import export_prompt_data, task_for_sample
from shopsimrl.shop import generate_catalog, load_split


@pytest.fixture(scope="module")
def slime_data():
    if SLIME_SRC is None:
        pytest.skip(SLIME_SOURCE_NOTE)
    for path in (SLIME_SRC, SLIME_SRC / "tests" / "plugin_contracts"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    from _shared import install_stubs  # slime's own stub of Ray for its CPU tests

    install_stubs()
    from slime.utils import data, processing_utils

    return data, processing_utils


@pytest.fixture(scope="module")
def vl_model_dir(tmp_path_factory):
    """A model directory like Qwen3.5's: tokenizer, chat template and a vision-language processor config."""
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<image>"]})
    processor = LlavaProcessor(image_processor=CLIPImageProcessorPil(), tokenizer=tokenizer,
                               chat_template=tokenizer.chat_template, patch_size=14)
    path = tmp_path_factory.mktemp("vl-model")
    processor.save_pretrained(path)
    assert (path / "processor_config.json").is_file()
    return path


@pytest.fixture(scope="module")
def catalog():
    return generate_catalog(seed=0, num_products=200)


def _dataset(slime_data, model_dir, prompt_file, *, apply_chat_template):
    data, processing = slime_data
    tokenizer = processing.load_tokenizer(str(model_dir), trust_remote_code=True)
    processor = processing.load_processor(str(model_dir), trust_remote_code=True)
    assert processor is not None, "the test model directory must make slime load a processor"
    # The keyword arguments slime's RolloutDataSource passes, with the launcher's flag values.
    return data.Dataset(str(prompt_file), tokenizer=tokenizer, processor=processor, max_length=None,
                        prompt_key="prompt", multimodal_keys=None, label_key="label", metadata_key="metadata",
                        tool_key="tools", apply_chat_template=apply_chat_template,
                        apply_chat_template_kwargs={}, seed=42)


def test_exported_messages_load_in_slimes_dataset_with_a_processor(slime_data, vl_model_dir, catalog, tmp_path):
    tasks = load_split(catalog, "train", limit=3)
    prompt_file = tmp_path / "shopsim_train.jsonl"
    assert export_prompt_data(tasks, prompt_file) == 3
    dataset = _dataset(slime_data, vl_model_dir, prompt_file, apply_chat_template=True)
    assert len(dataset) == 3
    for task, sample in zip(tasks, dataset.origin_samples, strict=True):
        # slime rendered our message list with the checkpoint's template...
        assert sample.prompt == f"<|im_start|>user\n{task.instruction}<|im_end|>\n<|im_start|>assistant\n"
        assert sample.label == task.task_id
        # ...and our generate hook still finds the task by metadata.task_id.
        assert sample.metadata["task_id"] == task.task_id
        assert task_for_sample(sample, catalog) == task


def test_a_plain_string_prompt_is_what_slime_rejects(slime_data, vl_model_dir, catalog, tmp_path):
    """The shape we exported before: slime's Dataset refuses it once a processor is loaded."""
    task = load_split(catalog, "train", limit=1)[0]
    prompt_file = tmp_path / "old.jsonl"
    prompt_file.write_text(json.dumps({"prompt": task.instruction, "label": task.task_id,
                                       "metadata": {"task_id": task.task_id}}) + "\n")
    with pytest.raises(AssertionError, match="prompt must be a list when processor is not None"):
        _dataset(slime_data, vl_model_dir, prompt_file, apply_chat_template=False)


def test_exported_line_shape(tmp_path, catalog):
    task = load_split(catalog, "train", limit=1)[0]
    export_prompt_data([task], tmp_path / "p.jsonl")
    line = json.loads((tmp_path / "p.jsonl").read_text())
    assert line == {"prompt": [{"role": "user", "content": task.instruction}], "label": task.task_id,
                    "metadata": {"schema_version": 2, "task_id": task.task_id, "split": "train"}}

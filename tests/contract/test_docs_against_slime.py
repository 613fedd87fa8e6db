"""What the docs say about slime, checked against slime v0.3.1's own source (the review's F10/F11)."""

from __future__ import annotations

import ast
from pathlib import Path

from slime_source import SLIME_SRC, requires_slime

pytestmark = requires_slime
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _loaders() -> set[str]:
    """The model types slime's HF loader takes (`_LOADERS` of hf_to_megatron/__init__.py), read, not run."""
    module = ast.parse((SLIME_SRC / "slime/backends/megatron_utils/hf_to_megatron/__init__.py").read_text())
    for node in module.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["_LOADERS"]:
            return {key.value for key in node.value.keys}
    raise AssertionError("no _LOADERS in slime's hf_to_megatron")


def test_the_handoff_doc_says_what_slime_does_with_a_qwen35_hf_load():
    """hf_to_megatron is vendored and loads qwen3_5: an HF --load is loaded as HF, not replaced."""
    assert "qwen3_5" in _loaders()
    text = " ".join((DOCS / "slime_handoff.md").read_text().split())
    assert "not in the vendored subset" not in text and "quietly start from the base model" not in text
    assert "for Qwen3.5 an HF `--load` would be loaded as HF weights" in text


def test_operations_does_not_say_the_reference_must_be_converted():
    text = " ".join((DOCS / "operations.md").read_text().split())
    assert "must point at a converted copy" not in text
    assert "slime v0.3.1 can also load a Qwen3.5 HF directory directly" in text


def test_the_metrics_doc_says_slimes_clip_ratio_counts_long_segments():
    data = (SLIME_SRC / "slime/backends/megatron_utils/data.py").read_text()
    assert '"raw_response_length/response_length_clip_ratio"' in data
    assert "(raw_response_lengths >= args.rollout_max_response_len)" in data
    text = " ".join((DOCS / "metrics.md").read_text().split())
    assert "`raw_response_length/response_length_clip_ratio`" in text and "means nothing here" in text

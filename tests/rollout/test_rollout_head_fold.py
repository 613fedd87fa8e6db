"""The prefill's output head sees canonical strides (head_fold.py), and computes the same logits.

Without the fold, the `[:, -1:, :]` slice that `logits_to_keep=1` hands the head keeps the sequence's
batch stride, and torch runs the head as a batched product over a copied weight (~110 ms a prefill
at SmolLM2's size). The strides are what this test checks (they fail without the fold); the logits
are compared with the same forward without the fold within 1e-6 absolute: the same products of the
same numbers (bit for bit here and at SmolLM2's size on the Intel kind), the margin only for a CPU
whose kernels would sum a 2-D and a batched product in a different order.
"""

from __future__ import annotations

import torch

from shopsimrl.rollout.generators.head_fold import folded_head
from shopsimrl.rollout.generators.prefill import encode_rows, prefill_padded
from shopsimrl.rollout.generators.prefix_cache import PrefixCache


def _canonical_strides(tensor: torch.Tensor) -> tuple[int, ...]:
    return torch.empty(tensor.shape).stride()


class HeadInputs:
    """What the head's forward received (after any pre-hook), while entered."""

    def __init__(self, model: torch.nn.Module):
        self.head = model.get_output_embeddings()
        self.strides: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __enter__(self) -> HeadInputs:
        self._handle = self.head.register_forward_hook(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _seen(self, _module: torch.nn.Module, args: tuple, _output: torch.Tensor) -> None:
        self.strides.append((args[0].stride(), _canonical_strides(args[0])))


PROMPT = [5, 9, 14, 3, 22, 7, 11, 30, 2, 17, 8, 6]


def test_cached_prefill_head_gets_canonical_strides_and_same_logits(model):
    store = PrefixCache()
    with torch.no_grad(), HeadInputs(model) as seen:
        first = encode_rows(model, [PROMPT], store)  # nothing reused: transformers' own attention
        second = encode_rows(model, [PROMPT + [12, 4, 19]], store)  # after a reused prefix
    assert first is not None and second is not None
    assert second.reused_tokens == len(PROMPT)
    assert len(seen.strides) == 2
    for stride, canonical in seen.strides:
        assert stride == canonical

    # The same forward without the fold: its head input is the strided slice, its logits the same.
    with torch.no_grad(), HeadInputs(model) as unfolded:
        plain = model(input_ids=torch.tensor([PROMPT]), use_cache=True, logits_to_keep=1)
    assert unfolded.strides[0][0] != unfolded.strides[0][1]  # the slice the fold exists for
    torch.testing.assert_close(first.logits[0], plain.logits[0, -1].float(), rtol=0, atol=1e-6)


def test_padded_prefill_head_gets_canonical_strides_and_same_logits(model):
    rows = [PROMPT, PROMPT[:7], PROMPT[3:]]
    with torch.no_grad(), HeadInputs(model) as seen:
        batch = prefill_padded(model, rows, pad_id=0)
    assert [stride for stride, _ in seen.strides] == [canonical for _, canonical in seen.strides]
    for row, ids in enumerate(rows):
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        # A padded row against the same row alone: padding changes the attention's shapes (float
        # rounding), so this comparison is the padded path's own tolerance (test_rollout_row_cache).
        torch.testing.assert_close(batch.logits[row], alone.logits[0, -1].float(), rtol=0, atol=1e-4)


def test_fold_leaves_a_model_without_an_output_head_alone():
    module = torch.nn.Linear(4, 4)
    with folded_head(module):
        assert module(torch.ones(1, 4)).shape == (1, 4)

"""Disk a slime run will need, computed from its launch profile (the launcher's command line).

Megatron keeps every checkpoint it saves. slime v0.3.1 saves after rollout `i` when `(i + 1) %
save_interval == 0` and after the last rollout (`slime.utils.misc.should_run_periodic_action`;
`tests/ops/test_footprint.py` checks `saves_in_run` against it). One save with the distributed
optimizer holds, per parameter, the bf16 weights (2 bytes) and the fp32 master copy plus Adam's two
moments (12 bytes): `SAVE_BYTES_PER_PARAM`; with `--save-hf` slime also writes an HF copy of the
bf16 weights at every save (`HF_COPY_BYTES_PER_PARAM`, the launcher's default when it saves). The
converted reference checkpoint (`make convert`) holds the bf16 weights only.

The parameter count comes from the HF checkpoint's weight files when they are present (bf16, so
bytes / 2; this includes a vision tower Megatron does not train, so it errs on the safe side), and
otherwise from the Megatron architecture flags (dense transformer formula, untied embeddings).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shopsimrl.ops.model_files import flag_values

SAVE_BYTES_PER_PARAM = 2 + 4 + 4 + 4
CONVERTED_BYTES_PER_PARAM = 2
HF_COPY_BYTES_PER_PARAM = 2
GIB = 2**30


@dataclass(frozen=True)
class DiskNeed:
    params: int
    params_source: str
    saves: int
    convert_bytes: int  # 0 when the converted checkpoint already exists
    margin_bytes: int
    hf_copy: bool = False  # --save-hf: an HF copy beside every save

    @property
    def bytes_per_param(self) -> int:
        return SAVE_BYTES_PER_PARAM + (HF_COPY_BYTES_PER_PARAM if self.hf_copy else 0)

    @property
    def save_bytes(self) -> int:
        return self.params * self.bytes_per_param

    @property
    def total_bytes(self) -> int:
        return self.saves * self.save_bytes + self.convert_bytes + self.margin_bytes

    def describe(self) -> str:
        return (
            f"{self.saves} save(s) x {self.save_bytes / GIB:.0f} GiB ({self.params / 1e9:.2f}e9 params from "
            f"{self.params_source} x {self.bytes_per_param} B{' incl. the HF copy' if self.hf_copy else ''}) + conversion {self.convert_bytes / GIB:.0f} GiB "
            f"+ margin {self.margin_bytes / GIB:.0f} GiB = {self.total_bytes / GIB:.0f} GiB"
        )


def saves_in_run(num_rollout: int, save_interval: int | None) -> int:
    """How many checkpoints slime writes in a run of `num_rollout` rollouts (no epoch boundary)."""
    if not save_interval:
        return 0
    return num_rollout // save_interval + (1 if num_rollout % save_interval else 0)


def params_from_flags(model_args: Sequence[str]) -> int:
    """A dense GQA transformer's parameter count from Megatron's architecture flags."""
    flags = flag_values(model_args)
    hidden = int(flags["--hidden-size"])
    layers = int(flags["--num-layers"])
    ffn = int(flags["--ffn-hidden-size"])
    heads = int(flags["--num-attention-heads"])
    groups = int(flags.get("--num-query-groups") or heads)
    head_dim = int(flags.get("--kv-channels") or hidden // heads)
    vocab = int(flags["--vocab-size"])
    query = hidden * heads * head_dim * (2 if "--attention-output-gate" in flags else 1)
    attention = query + 2 * hidden * groups * head_dim + heads * head_dim * hidden
    mlp = (3 if "--swiglu" in flags else 2) * hidden * ffn
    return 2 * vocab * hidden + layers * (attention + mlp)


def params_from_hf(model_dir: str | Path) -> int | None:
    """bf16 parameters of an HF checkpoint from its weight files (None when absent)."""
    path = Path(model_dir)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
            return None
        return int(total) // 2
    single = path / "model.safetensors"
    return single.stat().st_size // 2 if single.is_file() else None


def disk_need(argv: Sequence[str], *, margin_gib: float) -> DiskNeed:
    """The disk a launch command (the launcher's `ray job submit ...` argv) will fill."""
    flags = flag_values(argv)
    hf_params = params_from_hf(flags["--hf-checkpoint"]) if "--hf-checkpoint" in flags else None
    if hf_params:
        params, source = hf_params, "the HF weights"
    else:
        params, source = params_from_flags(argv), "the architecture flags"
    interval = int(flags["--save-interval"]) if flags.get("--save-interval") else None
    ref = flags.get("--ref-load")
    converted = bool(ref) and Path(ref).is_dir()
    return DiskNeed(
        params=params,
        params_source=source,
        saves=saves_in_run(int(flags["--num-rollout"]), interval),
        convert_bytes=0 if converted else params * CONVERTED_BYTES_PER_PARAM,
        margin_bytes=int(margin_gib * GIB),
        hf_copy=bool(flags.get("--save-hf")),
    )

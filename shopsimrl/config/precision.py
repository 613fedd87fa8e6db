"""`ComputeDtype`: the precision of a local model's forwards (`model.compute_dtype` of a training,
`generator.compute_dtype` of the gate and evaluation, `trial.compute_dtype` of the Analyst's trials).

What each value runs is rollout/generators/precision.py's; this module holds only the config value,
so reading a config does not import torch.

`auto` is bfloat16 on a CPU that computes bfloat16 products natively and float32 elsewhere: on a CPU
without avx512_bf16 or amx_bf16, autocast emulates bfloat16 through float32, so it is slower than
float32 and changes the outputs anyway (docs/benchmarks.md, "bfloat16 on the CPU").
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

# The x86 flags of native bfloat16 dot products (Linux's names in /proc/cpuinfo): AVX512-BF16
# (AMD Zen 4 on, Intel Cooper Lake on) and AMX-BF16 (Intel Sapphire Rapids on).
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPUINFO = Path("/proc/cpuinfo")


class ComputeDtype(StrEnum):
    FLOAT32 = "float32"  # the default: every golden output
    BFLOAT16 = "bfloat16"  # autocast; the weights (and a training's optimizer state) stay float32
    AUTO = "auto"  # bfloat16 where this CPU has native bfloat16 products, else float32

    @property
    def resolved(self) -> ComputeDtype:
        """FLOAT32 or BFLOAT16: what this value runs on this machine."""
        if self is not ComputeDtype.AUTO:
            return self
        return ComputeDtype.BFLOAT16 if native_bfloat16(cpu_flags()) else ComputeDtype.FLOAT32

    @property
    def torch(self) -> Any:
        import torch  # here, not at import: reading a config does not load torch

        return torch.bfloat16 if self.resolved is ComputeDtype.BFLOAT16 else torch.float32


def native_bfloat16(flags: Iterable[str]) -> bool:
    return not NATIVE_BFLOAT16_FLAGS.isdisjoint(flags)


@cache
def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags from `cpuinfo` (Linux; its first `flags` line: every core of one machine
    has the same). Empty where the file is absent or has none (another OS, an ARM CPU's `Features`), so
    `auto` falls back to float32 there."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()

"""Resource metrics of a training process: host and accelerator memory, checkpoint size, time per batch.

docs/metrics.md, "Resources": what each key measures and which backend logs it. Memory is read where
it is cheap and exact, never estimated:

* host peak RSS: `getrusage(RUSAGE_SELF).ru_maxrss`, the kernel's high-water mark of this process's
  resident set since it started (KiB on Linux, bytes on macOS), and at least the current RSS;
* host current RSS: the second field of `/proc/self/statm` (pages); absent where there is no /proc;
* accelerator peak: `torch.cuda.max_memory_allocated` / `max_memory_reserved` of the device the
  policy runs on, since the process started; absent on a CPU device (never a made-up 0).
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from shopsimrl.metrics import names as m

GIB = 1024**3
_STATM = Path("/proc/self/statm")


def host_peak_rss_bytes() -> int:
    """High-water mark of this process's resident set since it started, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # getrusage(2): Linux reports ru_maxrss in KiB; macOS (darwin) in bytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def host_rss_bytes() -> int | None:
    """This process's resident set now, in bytes; None where the system has no /proc/self/statm."""
    if not _STATM.exists():
        return None
    resident_pages = int(_STATM.read_text(encoding="ascii").split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def accelerator_peak_bytes(device: torch.device) -> tuple[int, int] | None:
    """(peak allocated, peak reserved) bytes of a CUDA device since the process started; None elsewhere."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device))


def memory_metrics(device: torch.device) -> dict[str, float]:
    """The `perf/*` memory keys of this process, in GiB; accelerator keys only on a CUDA device."""
    current = host_rss_bytes()
    # The kernel's high-water mark is kept from its per-CPU approximate RSS counter, while recent
    # kernels' /proc/self/statm sums the counter exactly: the mark can trail the resident set by a few
    # hundred KiB (measured on Linux 6.18). A peak is never below a resident set seen at the same time.
    peak = host_peak_rss_bytes() if current is None else max(host_peak_rss_bytes(), current)
    out = {m.PERF_HOST_PEAK_RSS_GIB.name: peak / GIB}
    if current is not None:
        out[m.PERF_HOST_RSS_GIB.name] = current / GIB
    peaks = accelerator_peak_bytes(device)
    if peaks is not None:
        out[m.PERF_GPU_PEAK_ALLOCATED_GIB.name] = peaks[0] / GIB
        out[m.PERF_GPU_PEAK_RESERVED_GIB.name] = peaks[1] / GIB
    return out


def checkpoint_bytes(files: Mapping[str, int]) -> int:
    """Bytes of a saved checkpoint from its manifest's files (relative path -> size; `CheckpointInfo.files`,
    the manifest itself not among them)."""
    return sum(files.values())


def checkpoint_metrics(files: Mapping[str, int], rollout_id: int) -> dict[str, int]:
    """The row logged at a save: `perf/checkpoint_bytes` with the rollout it saved at."""
    return {m.PERF_CHECKPOINT_BYTES.name: checkpoint_bytes(files), m.ROLLOUT_STEP.name: rollout_id}


@dataclass
class StepTimes:
    """Wall times of one rollout's actor optimizer steps and of their micro-batches, in seconds."""

    steps: list[float] = field(default_factory=list)  # one per optimizer step: micro-batches + clip + step
    micro_batches: list[float] = field(default_factory=list)  # one per micro-batch: forward, loss, backward

    def extend(self, other: StepTimes) -> None:
        self.steps.extend(other.steps)
        self.micro_batches.extend(other.micro_batches)

    def perf_metrics(self) -> dict[str, float]:
        """Mean and max step time, mean micro-batch time; empty when no step ran (absent, never 0)."""
        if not self.steps:
            return {}
        return {
            m.PERF_ACTOR_STEP_TIME_MEAN.name: _mean(self.steps),
            m.PERF_ACTOR_STEP_TIME_MAX.name: max(self.steps),
            m.PERF_ACTOR_MICRO_BATCH_TIME_MEAN.name: _mean(self.micro_batches),
        }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)

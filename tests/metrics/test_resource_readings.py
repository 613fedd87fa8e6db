"""metrics/resources.py on this process: host memory read back, exact step-time aggregates, no GPU key on a CPU."""

from __future__ import annotations

import torch

from shopsimrl.metrics import names as m
from shopsimrl.metrics.resources import (
    GIB,
    StepTimes,
    accelerator_peak_bytes,
    host_peak_rss_bytes,
    memory_metrics,
)


def test_host_memory_is_read_and_a_cpu_device_has_no_accelerator_keys() -> None:
    before = host_peak_rss_bytes()
    assert before > 0
    row = memory_metrics(torch.device("cpu"))
    assert accelerator_peak_bytes(torch.device("cpu")) is None
    assert set(row) <= {m.PERF_HOST_PEAK_RSS_GIB.name, m.PERF_HOST_RSS_GIB.name}
    assert row[m.PERF_HOST_PEAK_RSS_GIB.name] >= before / GIB  # a high-water mark never falls
    assert row[m.PERF_HOST_PEAK_RSS_GIB.name] >= row.get(m.PERF_HOST_RSS_GIB.name, 0.0)


def test_step_times_aggregate_exactly_and_are_absent_without_a_step() -> None:
    assert StepTimes().perf_metrics() == {}
    times = StepTimes(steps=[0.5], micro_batches=[0.25, 0.125])
    times.extend(StepTimes(steps=[1.5], micro_batches=[0.5]))
    assert times.perf_metrics() == {
        m.PERF_ACTOR_STEP_TIME_MEAN.name: 1.0,
        m.PERF_ACTOR_STEP_TIME_MAX.name: 1.5,
        m.PERF_ACTOR_MICRO_BATCH_TIME_MEAN.name: 0.875 / 3,
    }

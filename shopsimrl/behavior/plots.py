"""PNG plots of the behaviour analysis (matplotlib, Agg backend), drawn from a `Tally`.

* episode_vs_sample.png: per rollout step, generated tokens per episode beside slime's per-Sample
  mean, and the episode turn-limit rate beside slime's Sample truncated ratio;
* turns_by_arm.png: distribution of model turns per episode, one line per (round, arm);
* failure_modes.png: share of each failure mode, one bar per (round, arm).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from shopsimrl.behavior.failure_mode import EPISODE_MODES, Ending
from shopsimrl.behavior.run_source import SlimeStep
from shopsimrl.behavior.tally import ALL_ARMS, Tally
from shopsimrl.storage import atomic_write_bytes

EPISODE_VS_SAMPLE_PNG = "episode_vs_sample.png"
TURNS_BY_ARM_PNG = "turns_by_arm.png"
FAILURE_MODES_PNG = "failure_modes.png"
_NAN = float("nan")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, figure: Any, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())


def _value(x: float | None) -> float:
    return _NAN if x is None else x


def _episode_vs_sample(plt: Any, tally: Tally, slime: dict[str, dict[int, SlimeStep]], path: Path) -> Path:
    figure, (tokens, ends) = plt.subplots(2, 1, figsize=(9, 6.5), dpi=100, sharex=True)
    for round_label in tally.rounds:
        steps = sorted(s for (r, s) in tally.by_step if r == round_label)
        cells = [tally.by_step[(round_label, s)] for s in steps]
        logged = [slime.get(round_label, {}).get(s, SlimeStep(None, None)) for s in steps]
        tag = f" ({round_label})" if len(tally.rounds) > 1 else ""
        tokens.plot(steps, [_value(c.generated_tokens_per_episode) for c in cells], marker=".",
                    label="per episode (all segments)" + tag)  # fmt: skip
        tokens.plot(steps, [_value(c.generated_tokens_per_sample) for c in cells], marker=".", linestyle="--",
                    label="per Sample, all completed" + tag)  # fmt: skip
        tokens.plot(steps, [_value(s.response_len_mean) for s in logged], marker="x", linestyle=":",
                    label="slime rollout/response_len/mean (accepted)" + tag)  # fmt: skip
        ends.plot(steps, [_value(c.ending_rate(Ending.TURN_LIMIT)) for c in cells], marker=".",
                  label="episodes ended by the turn limit" + tag)  # fmt: skip
        ends.plot(steps, [_value(c.sample_truncated_ratio) for c in cells], marker=".", linestyle="--",
                  label="Samples TRUNCATED, all completed" + tag)  # fmt: skip
        ends.plot(steps, [_value(s.truncated_ratio) for s in logged], marker="x", linestyle=":",
                  label="slime rollout/truncated_ratio (accepted)" + tag)  # fmt: skip
    tokens.set_ylabel("generated tokens")
    tokens.set_title("Episodes vs slime Samples")
    tokens.legend(fontsize=7)
    ends.set_ylabel("fraction")
    ends.set_xlabel("rollout step")
    ends.legend(fontsize=7)
    return _save(plt, figure, path)


def _turns_by_arm(plt: Any, tally: Tally, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
    for round_label in tally.rounds:
        for arm in tally.arms(round_label):
            if arm == ALL_ARMS:
                continue
            hist = tally.by_arm[(round_label, arm)].turns_hist
            total = sum(hist.values())
            if not total:
                continue
            xs = list(range(min(hist), max(hist) + 1))
            axes.plot(xs, [hist[x] / total for x in xs], marker=".", label=f"{round_label} {arm}")
    axes.set_xlabel("model turns per episode")
    axes.set_ylabel("share of episodes")
    axes.legend(fontsize=7)
    return _save(plt, figure, path)


def _failure_modes(plt: Any, tally: Tally, path: Path) -> Path:
    labels = [(r, a) for r in tally.rounds for a in tally.arms(r)]
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.6), dpi=100)
    left = [0.0] * len(labels)
    for mode in EPISODE_MODES:
        shares = []
        for r, a in labels:
            cell = tally.by_arm[(r, a)]
            shares.append(cell.failure_modes[mode] / cell.episodes if cell.episodes else 0.0)
        if not any(shares):
            continue
        axes.barh([f"{r} {a}" for r, a in labels], shares, left=left, label=mode)
        left = [x + y for x, y in zip(left, shares, strict=True)]
    axes.set_xlabel("share of episodes")
    axes.set_xlim(0, 1)
    axes.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return _save(plt, figure, path)


def render_plots(out_dir: Path, tally: Tally, slime: dict[str, dict[int, SlimeStep]]) -> list[Path]:
    if not tally.rounds:
        return []
    plt = _pyplot()
    return [
        _episode_vs_sample(plt, tally, slime, out_dir / EPISODE_VS_SAMPLE_PNG),
        _turns_by_arm(plt, tally, out_dir / TURNS_BY_ARM_PNG),
        _failure_modes(plt, tally, out_dir / FAILURE_MODES_PNG),
    ]

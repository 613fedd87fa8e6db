"""The human summary printed at the end of `shopsimrl training demo|run`."""

from __future__ import annotations

from shopsimrl.local.run import RunResult
from shopsimrl.metrics import names as m


def demo_summary(result: RunResult) -> str:
    lines = ["", "=== ShopSimRL local round: summary ==="]
    if result.warm_start is not None:
        ws = result.warm_start
        probes = ", ".join(f"step {p.step}: mean reward {p.mean_reward:.3f}" for p in ws.probes) or "none"
        lines.append(
            f"warm start: {ws.steps} supervised step(s), last loss {ws.losses[-1]:.3f}, "
            f"mixed outcomes reached: {'yes' if ws.reached_mixed_outcomes else 'no'} (probes: {probes})"
            + (f"; reused from {ws.cached_from}" if ws.cached_from is not None else "")
        )
    lines.append(
        # grad_norm, not loss: with whole GRPO groups in a step the first step's loss is ~0 by
        # construction (advantages sum to zero at ratio 1) while the gradient is not.
        "rollout step | reward_mean | success_rate | train_reward_mean | accepted groups | train/grad_norm"
    )
    for report in result.reports:
        row = report.rollout_row
        grad_norms = ", ".join(f"{r[m.TRAIN_GRAD_NORM.name]:.4f}" for r in report.train_rows)

        def fmt(key: str, row: dict = row) -> str:
            return f"{row[key]:.3f}" if key in row else "n/a"

        lines.append(
            f"{report.rollout_id:>12} | {fmt(m.REWARD_MEAN.name):>11} | {fmt(m.SUCCESS_RATE.name):>12} | "
            f"{fmt(m.TRAIN_REWARD_MEAN.name):>17} | {report.accepted_groups:>15} | {grad_norms}"
        )
    lines.append(f"run directory:   {result.stage_dir} (metrics.jsonl, traces/, triage.jsonl)")
    if result.wandb_run_file is not None:
        lines.append(f"W&B offline run: {result.wandb_run_file}")
        lines.append(f"  look at it:    shopsimrl wandb inspect {result.wandb_run_file}")
        lines.append("  upload later:  make wandb-sync")
    else:
        lines.append("W&B: off (USE_WANDB=0); metrics.jsonl is the full record")
    lines.append(f"elapsed: {result.elapsed_seconds:.0f} s (model load {result.model_load_seconds:.1f} s)")
    return "\n".join(lines)

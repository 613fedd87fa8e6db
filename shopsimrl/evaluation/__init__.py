"""Planned episodes on one fixed checkpoint, and `shopsimrl eval` (docs/evaluation.md).

    episode_config.py  generator, episode limits, catalog (shared with the gate's YAML)
    serving.py         the checkpoint's tokenizer and generator; the episode options
    runner.py          EpisodeRunner: planned episodes through the real agent loop, resumable JSONL
    plan.py            the evaluation's episodes: the first N tasks of a split x seeds
    stats.py           Wilson and cluster-bootstrap intervals; the paired comparison of two evaluations
    report.py          eval_report.json, the printed table, the comparison
    stage.py           run_eval: plan, episodes, report, one W&B run of job type eval
    commands.py        `shopsimrl eval`

The gate (shopsimrl/gate/) builds on this package; nothing here imports the gate.
"""

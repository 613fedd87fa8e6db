"""Every path under `runs/<group>/`, declared once: the stage directories and the files they hold.

    layout = RunLayout(Path("runs/demo-round-000"))
    layout.stage_dir("analysis") / SUMMARY_FILE        # runs/demo-round-000/analysis/analysis_summary.json
    layout.contributions                              # runs/demo-round-000/gate/contributions.json

Code that writes or reads a run file imports its name from here, the way metric names come from
`metrics/names.py`; no file name is spelled elsewhere. The names of the Analyst's and the gate's
artifacts (failure cards, proposal ledger, candidate pool, analysis summary, selected skillbank,
gate manifest, mask assignments, contributions: docs/analyst.md, docs/gate.md "Files") are fixed
names that rounds and tools read and are kept exactly. It lives in `storage`, the lowest layer that knows about files,
because every writer of the run record (metrics, tracking, the stages, the round) already imports
`storage` and nothing below it knows about runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Stage directories of a round, in run order (the round state's stage names are the same words).
TRAIN_DIR = "train"
ANALYSIS_DIR = "analysis"
GATE_DIR = "gate"
EVAL_DIR = "eval"

# Every stage directory.
METRICS_FILE = "metrics.jsonl"  # the stage's audit record: one JSON row per logged step
STATUS_FILE = "wandb_status.json"  # the stage's W&B run: mode, run file, failures

# The training stage (local backend and slime's plugin).
RUN_RECORD_FILE = "local_run.json"  # what a finished local training produced
SMOKE_REPORT_FILE = "smoke_report.json"
UNMERGED_METRICS_FILE = "unmerged_rollout_metrics.jsonl"  # slime's rollout rows not yet merged

# The analysis stage (fixed artifact names: docs/analyst.md).
FAILURE_CARDS_FILE = "failure_cards.jsonl"
PROPOSAL_LEDGER_FILE = "proposal_ledger.jsonl"
CANDIDATE_POOL_FILE = "candidate_pool.json"
SUMMARY_FILE = "analysis_summary.json"

# The gate stage (fixed artifact names first, docs/gate.md "Files"; then ours).
GATE_MANIFEST_FILE = "online_gate_manifest.json"
MASK_ASSIGNMENTS_FILE = "mask_assignments.json"
CONTRIBUTIONS_FILE = "contributions.json"
SELECTED_SKILLBANK_FILE = "selected_skillbank.json"
SELECTED_SKILL_FILE = "selected_skill.md"
EVALUATIONS_FILE = "evaluations.jsonl"
GATE_LOCK_FILE = "gate.lock"

# A standalone evaluation.
EVAL_PLAN_FILE = "eval_plan.json"
EPISODES_FILE = "episodes.jsonl"
EVAL_REPORT_FILE = "eval_report.json"

# The round directory itself.
ROUND_MANIFEST_FILE = "round_manifest.json"
ROUND_STATE_FILE = "round_state.json"
TRAIN_CONFIG_FILE = "train_config.yaml"  # the derived training config (the Analyst reads it)
SHOPSIM_CONFIG_FILE = "shopsim_config.yaml"  # docker: the derived slime plugin options
ANALYSIS_CONFIG_FILE = "analysis_config.yaml"  # docker: the derived configs the services read
GATE_CONFIG_FILE = "gate_config.yaml"
NEXT_ROUND_JSON = "next_round.json"
NEXT_ROUND_CONFIG = "next_round.yaml"
ROUND_REPORT_FILE = "round_report.md"
ROUND_CURVES_FILE = "round_curves.png"

# A chain of rounds: runs/<name>-rounds/.
ROUNDS_REPORT_FILE = "rounds_report.md"
ROUNDS_CURVES_FILE = "rounds_curves.png"
BOUNDARY_PLAN_FILE = "boundary_eval_plan.json"  # the chain's one held-out plan, written once
BOUNDARY_RESULTS_FILE = "boundary_eval.json"  # per round: held-out outcomes and paired differences
ROUNDS_HELDOUT_FILE = "rounds_heldout.png"  # held-out success per round with its interval
BOUNDARY_START_EVAL = "boundary-start"  # runs/<first group>/eval/<this>/: the chain's start policy
BOUNDARY_FINAL_EVAL = "boundary-final"  # runs/<group>/eval/<this>/: the round's final checkpoint


@dataclass(frozen=True)
class RunLayout:
    """The paths of one round's directory, `runs/<group>/`."""

    root: Path

    def stage_dir(self, stage: str) -> Path:
        return self.root / stage

    @property
    def train_dir(self) -> Path:
        return self.root / TRAIN_DIR

    @property
    def analysis_dir(self) -> Path:
        return self.root / ANALYSIS_DIR

    @property
    def gate_dir(self) -> Path:
        return self.root / GATE_DIR

    @property
    def train_metrics(self) -> Path:
        return self.train_dir / METRICS_FILE

    @property
    def analysis_summary(self) -> Path:
        return self.analysis_dir / SUMMARY_FILE

    @property
    def candidate_pool(self) -> Path:
        return self.analysis_dir / CANDIDATE_POOL_FILE

    @property
    def proposal_ledger(self) -> Path:
        return self.analysis_dir / PROPOSAL_LEDGER_FILE

    @property
    def failure_cards(self) -> Path:
        return self.analysis_dir / FAILURE_CARDS_FILE

    @property
    def contributions(self) -> Path:
        return self.gate_dir / CONTRIBUTIONS_FILE

    @property
    def selected_skillbank(self) -> Path:
        return self.gate_dir / SELECTED_SKILLBANK_FILE

    @property
    def manifest(self) -> Path:
        return self.root / ROUND_MANIFEST_FILE

    @property
    def state(self) -> Path:
        return self.root / ROUND_STATE_FILE

    def status(self, stage: str) -> Path:
        return self.stage_dir(stage) / STATUS_FILE

"""The Failure Analyst (round stage 2): failure cards, lessons, counterfactual trials, candidate skill edits.

docs/analyst.md describes the stage; `shopsimrl training analyze CONFIG` runs it and
`shopsimrl training analyze-sidecar CONFIG` writes failure cards while training runs.

    config = load_analysis_config("configs/local/analysis.yaml")  # the demo round's Analyst
    result = run_analysis(config, settings=WandbSettings.from_env())

torch is imported only by a trial on a local model, openai only by the llm lesson backend.
"""

from shopsimrl.analyst.cards import CardStatus, FailureCard, Lesson, TrialRecord, build_card, read_cards
from shopsimrl.analyst.compiler import compile_candidates
from shopsimrl.analyst.config import AnalysisConfig, load_analysis_config
from shopsimrl.analyst.firewall import Firewall, Verdict
from shopsimrl.analyst.ledger import LedgerHistory, read_ledger
from shopsimrl.analyst.lessons import LlmBackend, RulesBackend, make_backend
from shopsimrl.analyst.sidecar import CardsLockedError, Sidecar, ValidationTaskRefused, cards_lock
from shopsimrl.analyst.stage import AnalysisError, AnalysisResult, run_analysis
from shopsimrl.analyst.trial import TrialRunner
from shopsimrl.shop.failure_modes import FailureMode, classify_trajectory

__all__ = [
    "AnalysisConfig",
    "AnalysisError",
    "AnalysisResult",
    "CardStatus",
    "CardsLockedError",
    "FailureCard",
    "FailureMode",
    "Firewall",
    "LedgerHistory",
    "Lesson",
    "LlmBackend",
    "RulesBackend",
    "Sidecar",
    "TrialRecord",
    "TrialRunner",
    "ValidationTaskRefused",
    "Verdict",
    "build_card",
    "cards_lock",
    "classify_trajectory",
    "compile_candidates",
    "load_analysis_config",
    "make_backend",
    "read_cards",
    "read_ledger",
    "run_analysis",
]

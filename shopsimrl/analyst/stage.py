"""The analysis stage of a round: catch up the cards, lessons, trials, compile, ledger, summary, W&B.

    result = run_analysis(load_analysis_config("configs/local/analysis.yaml"),
                          settings=WandbSettings.from_env())

Writes under `runs/<group>/analysis/`: failure_cards.jsonl (final statuses), candidate_pool.json,
proposal_ledger.jsonl (appended), analysis_summary.json, and the StageLogger's metrics.jsonl and
wandb_status.json. W&B gets one row after the compile (the six `analysis/*` scalars) and the
artifact `shopsimrl-analysis` with those of the four files that exist. A W&B failure never
changes the local files.

A damaged triage journal is refused before any lesson or trial; a torn last line is skipped and
counted (`skipped_triage`). A run that leaves cards without a lesson or a trial, or all-wrong groups
without a readable trace, writes every file and then raises `StageIncomplete`: a re-run retries
exactly that work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shopsimrl.analyst.cards import (
    CardStatus,
    FailureCard,
    cards_path,
    count_by_status,
    read_cards,
    retry_outcome,
    retry_request_id,
    write_cards,
)
from shopsimrl.analyst.compiler import compile_candidates, screen_lessons
from shopsimrl.analyst.config import AnalysisConfig, load_round_options
from shopsimrl.analyst.firewall import Firewall
from shopsimrl.analyst.ledger import LedgerHistory, append_entries, count_records, ledger_path, utc_now
from shopsimrl.analyst.lessons import LessonBackend, make_backend
from shopsimrl.analyst.sidecar import Sidecar, ValidationTaskRefused, cards_lock, refuse_held_out
from shopsimrl.analyst.trial import TrialRunner, lesson_sha256, load_trial_policy
from shopsimrl.errors import StageIncomplete, StopsTheCommand, TornRecordError
from shopsimrl.metrics import names as m
from shopsimrl.records import TRIAGE_FILE, TriageReason, TriageRecord, read_retry_results, read_triage
from shopsimrl.skills.skillbank import Skillbank, empty_skillbank, load_skillbank
from shopsimrl.storage import atomic_write_json, file_sha256, json_bytes, read_jsonl
from shopsimrl.storage.jsonl import iter_jsonl_lines
from shopsimrl.storage.layout import CANDIDATE_POOL_FILE as POOL_FILE
from shopsimrl.storage.layout import SUMMARY_FILE
from shopsimrl.tracking import StageLogger, WandbSettings

ARTIFACT_NAME = "shopsimrl-analysis"
ARTIFACT_TYPE = "analysis"
SUMMARY_SCHEMA_VERSION = 1


class AnalysisError(StopsTheCommand, RuntimeError):
    """The stage cannot run (no training stage directory, ...); one line saying what and where."""


@dataclass
class AnalysisResult:
    analysis_dir: Path
    metrics: dict[str, int]
    summary: dict[str, Any]
    artifact_files: list[Path] = field(default_factory=list)
    wandb_run_file: Path | None = None


def skillbank_of(path: str | None) -> tuple[Skillbank, str]:
    """The round's skillbank and the sha256 the pool records (of the file's bytes; of the canonical
    JSON of the empty skillbank when the round has none)."""
    if not path:
        bank = empty_skillbank()
        return bank, hashlib.sha256(json_bytes(bank.model_dump(mode="json"))).hexdigest()
    return load_skillbank(path), file_sha256(path)


def check_wandb_group(config: AnalysisConfig, settings: WandbSettings) -> None:
    """One W&B group per round: an analysis run filed under another round is hard to find again."""
    if settings.enabled and settings.group not in (None, config.run.group):
        raise AnalysisError(
            f"W&B group {settings.group!r} (--wandb-group / WANDB_GROUP) is not the round {config.run.group!r} "
            "of the config (run.group); use the same name for both"
        )


def run_analysis(
    config: AnalysisConfig,
    *,
    settings: WandbSettings,
    echo: Callable[[str], None] = print,
    keep_cards_local: bool = False,
    policy: tuple[Any, Any] | None = None,
    lesson_backend: LessonBackend | None = None,
) -> AnalysisResult:
    """Run the stage. `policy` = (tokenizer, generator) replaces the configured trial policy."""
    train_dir, analysis_dir = config.train_dir, config.analysis_dir
    check_wandb_group(config, settings)
    if not train_dir.is_dir():
        raise AnalysisError(f"{train_dir}: no training stage directory; run the round's training first")
    options = load_round_options(config)
    skipped = check_triage(train_dir)  # before any lesson or trial: a damaged journal is refused here
    for item in skipped:
        echo(f"analysis: {item['where']}: {item['reason']}; skipped")
    catalog = options.catalog.build()
    skillbank, skillbank_sha = skillbank_of(options.skillbank)
    backend = lesson_backend or make_backend(config.lessons)

    with cards_lock(analysis_dir):
        sidecar = Sidecar(train_dir, analysis_dir, echo=echo)
        sidecar.process_new()
        unreadable = [{"where": f"{train_dir / TRIAGE_FILE} triage {triage_id}", "reason": f"trace {path}: {why}"}
                      for triage_id, (path, why) in sidecar.stats.unreadable_traces.items()]  # fmt: skip
        skipped += unreadable
        cards, problems = read_cards(analysis_dir)
        for problem in problems:
            echo(f"failure cards: {problem}")
        cards = _refresh_retries(cards, train_dir)
        cards = _add_lessons(cards, backend)
        firewall = Firewall.for_evidence(
            cards, catalog=catalog, banned_terms=config.firewall.banned_terms,
            shingle_words=config.firewall.shingle_words,
        )  # fmt: skip
        # The firewall before the trial: a leaky lesson is never tried (docs/analyst.md).
        cards, screened = screen_lessons(cards, firewall=firewall, skillbank=skillbank, round_name=config.run.group,
                                         settings=config.compiler, now=utc_now())  # fmt: skip
        cards = _run_trials(cards, config, options, catalog, skillbank, policy, echo, firewall)
        write_cards(analysis_dir, cards)

    skillbank_firewall = Firewall.for_evidence(
        [], catalog=catalog, banned_terms=config.firewall.banned_terms,
        shingle_words=config.firewall.shingle_words,
    )  # fmt: skip
    history, ledger_problems = LedgerHistory.load([ledger_path(analysis_dir), *config.ledger.history])
    for problem in ledger_problems:
        echo(f"ledger: {problem}")
    compiled = compile_candidates(
        cards,
        skillbank=skillbank,
        skillbank_sha256=skillbank_sha,
        round_name=config.run.group,
        firewall=firewall,
        skillbank_firewall=skillbank_firewall,
        history=history,
        settings=config.compiler,
        now=utc_now(),
    )
    atomic_write_json(analysis_dir / POOL_FILE, compiled.pool.model_dump(mode="json"))
    append_entries(analysis_dir, [*screened, *compiled.entries])

    triage = read_triage(train_dir).records
    statuses = count_by_status(cards)
    metrics = {
        m.ANALYSIS_TRIAGE_GROUPS.name: len(triage),
        m.ANALYSIS_ANALYZED_CARDS.name: sum(
            statuses[s.value]
            for s in (CardStatus.ANALYZED, CardStatus.TRIAL_ERROR, CardStatus.ELIGIBLE, CardStatus.EVIDENCE_ONLY)
        ),
        m.ANALYSIS_ELIGIBLE_CARDS.name: statuses[CardStatus.ELIGIBLE.value],
        m.ANALYSIS_CANDIDATES.name: len(compiled.pool.interventions),
        m.ANALYSIS_PROPOSAL_HISTORY_RECORDS.name: count_records(analysis_dir),
        m.ANALYSIS_EVIDENCE_ONLY_CARDS.name: statuses[CardStatus.EVIDENCE_ONLY.value],
    }
    summary = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "round": config.run.group,
        "train_dir": str(train_dir),
        "triage_groups": len(triage),
        "all_wrong_groups": sum(TriageReason.ALL_WRONG in r.reasons for r in triage),
        "cards": len(cards),
        "cards_by_status": statuses,
        "cards_by_failure_mode": _by_mode(cards),
        "analysis_errors": {c.card_id: c.analysis_error for c in cards if c.analysis_error},
        "refused_held_out_triage": sidecar.stats.refused,
        "skipped_triage": len(skipped),
        "skipped_triage_reasons": skipped,
        "lesson_backend": backend.name,
        "clusters": compiled.clusters,
        "ledger_events": _events([*screened, *compiled.entries]),
        "skillbank_sha256": skillbank_sha,
        "metrics": metrics,
        "finished_at": utc_now(),
    }
    atomic_write_json(analysis_dir / SUMMARY_FILE, summary)
    result = _log(config, settings, metrics, summary, keep_cards_local, echo)
    problem = incomplete_problem(cards, unreadable)
    if problem is not None:
        raise StageIncomplete("analysis", problem, result)
    return result


def check_triage(train_dir: Path) -> list[dict[str, str]]:
    """Read `train/triage.jsonl` as the gate reads its evaluations: a torn last line (a kill during an
    append) is returned as a skip to report and count; an unreadable or invalid line before the end is
    corruption, one `AnalysisError` naming the file and the line (guessing past it would lose a group
    silently)."""
    path = train_dir / TRIAGE_FILE
    if not path.exists():
        return []
    try:
        raw = read_jsonl(path, strict_middle=True)
    except TornRecordError as exc:
        raise AnalysisError(f"{exc}; the training's triage journal is damaged: repair or remove that line, "
                            "then re-run") from None  # fmt: skip
    lines = [number for number, text in iter_jsonl_lines(path) if text.strip()]
    for number, record in zip(lines, raw.records, strict=False):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise AnalysisError(f"{where}: not a JSON object; the training's triage journal is damaged")
        try:
            refuse_held_out(str(record.get("task_id")), record.get("split"), where)
        except ValidationTaskRefused:
            continue  # refused and counted by the sidecar (refused_held_out_triage)
        try:
            TriageRecord.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise AnalysisError(f"{where}: invalid triage record ({'.'.join(map(str, first['loc']))}: "
                                f"{first['msg']}); the training's triage journal is damaged") from None  # fmt: skip
    torn = raw.torn_tail
    return [] if torn is None else [{"where": f"{torn.path}:{torn.line_number}", "reason": torn.reason}]


def incomplete_problem(cards: list[FailureCard], unreadable: list[dict[str, str]]) -> str | None:
    """One line on the work this run could not do (a re-run retries it), or None when it did all of it."""
    parts = []
    failed = [c for c in cards if c.status in (CardStatus.ANALYSIS_ERROR, CardStatus.TRIAL_ERROR)]
    if failed:
        first = failed[0]
        cause = first.analysis_error if first.status is CardStatus.ANALYSIS_ERROR else (
            f"every trial episode failed: {(first.trial.last_technical_error if first.trial else None)}")
        errors = sum(c.status is CardStatus.ANALYSIS_ERROR for c in failed)
        parts.append(f"{errors} of {len(cards)} card(s) without a lesson, {len(failed) - errors} without a trial "
                     f"(first, {first.card_id}: {cause})")  # fmt: skip
    if unreadable:
        parts.append(f"{len(unreadable)} all-wrong group(s) skipped, their trace unreadable "
                     f"(first: {unreadable[0]['reason']})")  # fmt: skip
    return "; ".join(parts) or None


def artifact_files(analysis_dir: Path, *, keep_cards_local: bool) -> list[Path]:
    names = [SUMMARY_FILE, POOL_FILE, *([] if keep_cards_local else [cards_path(analysis_dir).name]),
             ledger_path(analysis_dir).name]  # fmt: skip
    return [analysis_dir / name for name in names if (analysis_dir / name).exists()]


def _log(
    config: AnalysisConfig,
    settings: WandbSettings,
    metrics: dict[str, int],
    summary: dict[str, Any],
    keep_cards_local: bool,
    echo: Callable[[str], None],
) -> AnalysisResult:
    analysis_dir = config.analysis_dir
    if settings.group is None:
        settings = replace(settings, group=config.run.group)
    files = artifact_files(analysis_dir, keep_cards_local=keep_cards_local)
    with StageLogger(
        analysis_dir, stage="analysis", settings=settings, config=config.model_dump(mode="json"),
        tags=[f"lessons:{config.lessons.backend.value}"],
    ) as logger:  # fmt: skip
        logger.log(metrics)
        logger.log_artifact(ARTIFACT_NAME, ARTIFACT_TYPE, files, metadata={"round": config.run.group})
        run_file = logger.wandb_run_file
    return AnalysisResult(analysis_dir=analysis_dir, metrics=metrics, summary=summary, artifact_files=files,
                          wandb_run_file=run_file)  # fmt: skip


def _refresh_retries(cards: list[FailureCard], train_dir: Path) -> list[FailureCard]:
    """Full-skill retries that finished after their card was written."""
    results = {r.request_id: r for r in read_retry_results(train_dir).records}
    out = []
    for card in cards:
        result = results.get(retry_request_id(card.triage_id))
        if card.full_skill_retry is None and result is not None:
            card = card.model_copy(update={"full_skill_retry": retry_outcome(result)})
        out.append(card)
    return out


def _add_lessons(cards: list[FailureCard], backend: LessonBackend) -> list[FailureCard]:
    todo = [c for c in cards if c.status in (CardStatus.PENDING, CardStatus.ANALYSIS_ERROR)]
    results = {r.card_id: r for r in backend.lessons(todo)}
    out = []
    for card in cards:
        result = results.get(card.card_id)
        if result is not None:
            if result.lesson is not None:
                update = {"lesson": result.lesson, "analysis_error": None, "status": CardStatus.ANALYZED}
            else:
                update = {"lesson": None, "analysis_error": result.error, "status": CardStatus.ANALYSIS_ERROR}
            card = card.model_copy(update=update)
        out.append(card)
    return out


def _run_trials(
    cards: list[FailureCard],
    config: AnalysisConfig,
    options: Any,
    catalog: Any,
    skillbank: Skillbank,
    policy: tuple[Any, Any] | None,
    echo: Callable[[str], None],
    firewall: Firewall | None = None,
) -> list[FailureCard]:
    if not config.trial.enabled:
        return cards
    todo = [
        c for c in cards
        if c.lesson is not None
        and (c.status in (CardStatus.ANALYZED, CardStatus.TRIAL_ERROR)
             or c.trial is None or c.trial.lesson_sha256 != lesson_sha256(c.lesson.text))
    ]  # fmt: skip
    if config.trial.max_cards is not None:
        todo = todo[: config.trial.max_cards]
    if not todo:
        return cards
    tokenizer, generator = policy if policy is not None else load_trial_policy(config.trial, options)
    runner = TrialRunner(config.trial, options, catalog, skillbank, tokenizer, generator, firewall)
    records = runner.run_many([(c, c.lesson.text if c.lesson else "") for c in todo], config.trial.concurrency)
    done: dict[str, FailureCard] = {}
    for card, record in zip(todo, records, strict=True):
        if record.attempts == 0:
            status = CardStatus.TRIAL_ERROR
        elif record.successes >= config.trial.min_successes:
            status = CardStatus.ELIGIBLE
        else:
            status = CardStatus.EVIDENCE_ONLY
        done[card.card_id] = card.model_copy(update={"trial": record, "status": status})
        echo(f"trial {card.card_id} ({card.failure_mode.value}): {record.successes}/{record.attempts} "
             f"succeeded, {record.technical_failures} technical -> {status.value}")  # fmt: skip
    return [done.get(card.card_id, card) for card in cards]


def _by_mode(cards: list[FailureCard]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for card in cards:
        counts[card.failure_mode.value] = counts.get(card.failure_mode.value, 0) + 1
    return dict(sorted(counts.items()))


def _events(entries: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.event.value] = counts.get(entry.event.value, 0) + 1
    return counts

"""The proposal ledger: `analysis/proposal_ledger.jsonl`, append-only history of every proposal.

One `LedgerEntry` line (shopsimrl.skills.candidates) per event: proposed, firewall_rejected,
trial_failed, duplicate_rejected, and later the gate's verdicts (in gate/proposal_ledger.jsonl).
Never twice the same (event, proposal, evidence): a re-run of a finished analysis appends nothing.
`LedgerHistory` reads this round's ledger and earlier rounds' (`ledger.history`) and refuses an
edit the gate rejected before unless new evidence supports it: a failure card, identified by
(round, card id), that none of that proposal's earlier entries cited. A rejection is conditional on
the pool it was measured in (`LedgerEntry.pool`): one measured alone bars the edit; one measured
beside others bars it only from exactly that pool again (docs/gate.md, "Ledger verdicts").
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from shopsimrl.skills.candidates import LedgerEntry, LedgerEvent
from shopsimrl.storage import append_jsonl, read_jsonl
from shopsimrl.storage.layout import PROPOSAL_LEDGER_FILE as LEDGER_FILE


def ledger_path(analysis_dir: str | os.PathLike[str]) -> Path:
    return Path(analysis_dir) / LEDGER_FILE


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_ledger(path: str | os.PathLike[str]) -> tuple[list[LedgerEntry], list[str]]:
    """Every valid entry and the problems (torn last line, invalid entries) with file and line."""
    if not Path(path).exists():
        return [], []
    raw = read_jsonl(path, strict_middle=False)
    problems = [str(problem) for problem in raw.problems]
    entries = []
    for number, record in enumerate(raw.records, start=1):
        try:
            entries.append(LedgerEntry.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problems.append(f"{path}: record {number}: invalid ledger entry ({where}: {first['msg']})")
    return entries, problems


def entry_key(entry: LedgerEntry) -> tuple[str, str, tuple[str, ...]]:
    """What makes two entries the same fact: (event, proposal, evidence); the time is not part of it."""
    return entry.event.value, entry.proposal_id, tuple(entry.evidence_card_ids)


def append_entries(analysis_dir: str | os.PathLike[str], entries: Iterable[LedgerEntry]) -> int:
    """Append the entries the ledger does not hold yet (by `entry_key`); returns how many were appended.

    A re-run of a finished analysis compiles the same entries again: appending them would double the
    history (and `analysis/proposal_history_records`) without a new fact.
    """
    path = ledger_path(analysis_dir)
    if not path.exists():  # an analysis that proposed nothing still hands the gate its (empty) ledger
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    seen = {entry_key(entry) for entry in read_ledger(path)[0]}
    count = 0
    for entry in entries:
        key = entry_key(entry)
        if key in seen:
            continue
        seen.add(key)
        append_jsonl(path, entry.model_dump(mode="json"), fsync=True)
        count += 1
    return count


def count_records(analysis_dir: str | os.PathLike[str]) -> int:
    entries, _ = read_ledger(ledger_path(analysis_dir))
    return len(entries)


class LedgerHistory:
    """What earlier entries say about a proposal."""

    def __init__(self, entries: Sequence[LedgerEntry]) -> None:
        self._by_proposal: dict[str, list[LedgerEntry]] = {}
        for entry in entries:
            self._by_proposal.setdefault(entry.proposal_id, []).append(entry)

    @classmethod
    def load(cls, paths: Iterable[str | os.PathLike[str]]) -> tuple[LedgerHistory, list[str]]:
        entries: list[LedgerEntry] = []
        problems: list[str] = []
        for path in paths:
            found, trouble = read_ledger(path)
            entries.extend(found)
            problems.extend(trouble)
        return cls(entries), problems

    def entries_for(self, proposal_id: str) -> list[LedgerEntry]:
        return list(self._by_proposal.get(proposal_id, ()))

    def duplicate_reason(self, proposal_id: str, round_name: str, card_ids: Sequence[str],
                         pool: Collection[str] | None = None) -> str | None:
        """Why a re-proposal is refused, or None when it may be proposed.

        `pool`: the proposal ids of the pool being compiled, once it is known. Without it only the
        rejections that bar the edit in any pool count (measured alone, or recorded without a pool).
        """
        entries = self.entries_for(proposal_id)
        rejected = [e for e in entries if e.event is LedgerEvent.GATE_REJECTED and _bars(e, pool)]
        if not rejected:
            return None
        seen = {(e.round, card) for e in entries for card in e.evidence_card_ids}
        new = {(round_name, card) for card in card_ids} - seen
        if new:
            return None
        rounds = ", ".join(sorted({e.round for e in rejected}))
        if all(e.pool is not None and e.pool.size > 1 for e in rejected):
            size = len(pool or ())
            return f"rejected by the gate in round(s) {rounds} in this same pool of {size}; no new evidence card since"
        return f"rejected by the gate in round(s) {rounds}; no new evidence card since"


def _bars(verdict: LedgerEntry, pool: Collection[str] | None) -> bool:
    """Whether a `gate_rejected` verdict bars its edit from `pool` (None: from every pool).

    The gate estimates an edit's effect averaged over random backgrounds of the other candidates, so
    an edit rejected beside others may help alone or beside different ones (two edits that help
    alone and hurt together are both rejected together); only the same pool again would repeat that
    measurement. Alone, the verdict is about the edit itself. A verdict written before pools were
    recorded (ledger schema 1) bars as it always did: its pool is unknown.
    """
    if verdict.pool is None or verdict.pool.size == 1:
        return True
    return pool is not None and frozenset(verdict.pool.proposal_ids) == frozenset(pool)

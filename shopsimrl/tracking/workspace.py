"""Panels as code: the five panel sections of docs/metrics.md ("Recommended W&B panels") for one W&B group.

    sections = panel_sections(chunk_ids=["read-the-constraints", ...])   # plain, library-free spec
    check_sections(sections)                       # every key in shopsimrl.metrics.names, else ValueError
    workspace = build_workspace(sections, group="qwen35-4b-round-000", entity="me", project="shopsimrl")
    workspace.save()                               # wandb-workspaces: upserts the saved view (online)
    write_workspace_file(path, sections, ...)      # without a server: the same spec as JSON

The sections are declared here once, as plain dataclasses; `build_workspace` turns them into W&B's own
workspace objects (`wandb-workspaces`, pinned in pyproject.toml). The file written without a server
holds the plain spec and, when the library is importable, the saved-view model it would upload, so
`shopsimrl behavior panels --from-file` can save it later from a machine that can reach W&B.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.storage import atomic_write_json
from shopsimrl.tracking.settings import WandbMode, WandbSettings

WORKSPACE_SCHEMA_VERSION = 1
# The gate's Table (its columns: intervention_id, logical_chunk_id, operation, coefficient, rank,
# status). Not a scalar metric, so not in the metric registry; the gate stage logs it under this key.
GATE_CONTRIBUTIONS_TABLE = m.GATE_CHUNK_CONTRIBUTIONS_TABLE
TABLE_KEYS = frozenset({GATE_CONTRIBUTIONS_TABLE})
_ID = "<id>"


class PanelKind(StrEnum):
    LINE = "line"  # curves against `x`
    BAR = "bar"  # last (summary) value per run: metrics logged once per stage (gate/*)
    TABLE = "table"  # a W&B Table from the run summary


@dataclass(frozen=True)
class Panel:
    title: str
    kind: PanelKind
    keys: tuple[str, ...] = ()  # logged metric keys (templated chunk keys expanded)
    regex: str | None = None  # y-axis regex instead of keys (chunks unknown when the spec was built)
    table: str | None = None
    x: str = m.ROLLOUT_STEP.name


@dataclass(frozen=True)
class Section:
    name: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _line(title: str, *specs: m.MetricSpec, x: str = m.ROLLOUT_STEP.name) -> Panel:
    return Panel(title, PanelKind.LINE, keys=tuple(s.name for s in specs), x=x)


def _template_regex(spec: m.MetricSpec) -> str:
    prefix, _, suffix = spec.name.partition(_ID)
    return re.escape(prefix) + "[^/]+" + re.escape(suffix)


def _curriculum_chunk_panels(chunk_ids: Sequence[str]) -> tuple[Panel, ...]:
    if not chunk_ids:
        # Chunk ids unknown: one panel that matches every chunk's two curves.
        regex = f"({_template_regex(m.CHUNK_INCLUSION_RATE)}|{_template_regex(m.CHUNK_TARGET_RHO)})"
        return (Panel("chunk inclusion_rate vs target_rho", PanelKind.LINE, regex=regex),)
    return tuple(
        Panel(
            f"chunk {chunk_id}: inclusion_rate vs target_rho",
            PanelKind.LINE,
            keys=(m.chunk_inclusion_rate_key(chunk_id), m.chunk_target_rho_key(chunk_id)),
        )
        for chunk_id in chunk_ids
    )


def panel_sections(chunk_ids: Sequence[str] = ()) -> list[Section]:
    """The five sections, in the order of docs/metrics.md, "Recommended W&B panels"."""
    return [
        Section(
            "1 learning outcome",
            (
                _line("reward_mean (all completed vs accepted)", m.REWARD_MEAN, m.TRAIN_REWARD_MEAN),
                _line("strict_reward_mean", m.STRICT_REWARD_MEAN, m.TRAIN_STRICT_REWARD_MEAN),
                _line("success_rate", m.SUCCESS_RATE, m.TRAIN_SUCCESS_RATE),
            ),
        ),  # fmt: skip
        Section(
            "2 curriculum",
            (
                _line("skill_free_group_rate vs q", m.SKILL_FREE_GROUP_RATE, m.Q),
                *_curriculum_chunk_panels(chunk_ids),
            ),
        ),  # fmt: skip
        Section(
            "3 failure frontier",
            (
                _line("all_wrong_group_rate", m.ALL_WRONG_GROUP_RATE),
                _line("full_skill_retry_success_rate", m.FULL_SKILL_RETRY_SUCCESS_RATE),
                _line("pending_analysis_rate", m.PENDING_ANALYSIS_RATE),
                Panel(
                    "Analyst: eligible cards, candidates",
                    PanelKind.BAR,
                    keys=(m.ANALYSIS_ELIGIBLE_CARDS.name, m.ANALYSIS_CANDIDATES.name),
                ),
            ),
        ),  # fmt: skip
        Section(
            "4 run health",
            (
                _line("scored_rate", m.SCORED_RATE),
                _line("technical_group_drop_count", m.TECHNICAL_GROUP_DROP_COUNT),
                _line("technical_group_drop_rate", m.TECHNICAL_GROUP_DROP_RATE),
                _line("zero_std: occurrence vs drop", m.ZERO_STD_GROUP_RATE, m.ZERO_STD_GROUP_DROP_RATE),
                _line("source_all_samples", m.SOURCE_ALL_SAMPLES),
                _line("slime rollout time", m.PERF_ROLLOUT_TIME),
                _line("slime throughput", m.PERF_TOKENS_PER_GPU_PER_SEC, m.PERF_ACTOR_TRAIN_TOK_PER_S),
            ),
        ),  # fmt: skip
        Section(
            "5 round gate",
            (
                Panel(
                    "gate reward: bare / masked / delta",
                    PanelKind.BAR,
                    keys=(m.GATE_BARE_REWARD.name, m.GATE_MASKED_REWARD.name, m.GATE_DELTA_REWARD.name),
                ),
                Panel(
                    "gate success: bare / masked / delta",
                    PanelKind.BAR,
                    keys=(
                        m.GATE_BARE_SUCCESS_RATE.name,
                        m.GATE_MASKED_SUCCESS_RATE.name,
                        m.GATE_DELTA_SUCCESS_RATE.name,
                    ),
                ),
                Panel(
                    "gate selected count / candidates",
                    PanelKind.BAR,
                    keys=(m.GATE_SELECTED_COUNT.name, m.GATE_CANDIDATES.name),
                ),
                Panel(
                    "gate coverage / complete (read selected count only at coverage 1)",
                    PanelKind.BAR,
                    keys=(m.GATE_COVERAGE.name, m.GATE_COMPLETE.name),
                ),
                Panel(GATE_CONTRIBUTIONS_TABLE, PanelKind.TABLE, table=GATE_CONTRIBUTIONS_TABLE),
            ),
        ),  # fmt: skip
    ]


def unknown_keys(sections: Iterable[Section]) -> list[str]:
    """`"<section> / <panel>: <key>"` for every key, regex or table the registry does not declare."""
    templates = [s for s in m.REGISTRY.values() if _ID in s.name]
    problems = []
    for section in sections:
        for panel in section.panels:
            where = f"{section.name} / {panel.title}"
            for key in (*panel.keys, panel.x):
                if m.spec_for_key(key) is None:
                    problems.append(f"{where}: {key}")
            if panel.regex is not None and not any(
                re.fullmatch(panel.regex, p) for p in _regex_probes(templates)
            ):
                problems.append(f"{where}: regex {panel.regex} matches no declared metric")
            if panel.kind is PanelKind.TABLE and panel.table not in TABLE_KEYS:
                problems.append(f"{where}: table {panel.table}")
    return problems


def _regex_probes(templates: Sequence[m.MetricSpec]) -> list[str]:
    """Keys a regex panel could meet: every templated name with a sample id."""
    return [spec.key("probe-chunk") for spec in templates if spec.name.count(_ID) == 1]


def check_sections(sections: Sequence[Section]) -> None:
    """Raise ValueError naming every panel key the metric registry does not know (an empty panel)."""
    problems = unknown_keys(sections)
    if problems:
        raise ValueError("panels name metrics the registry does not declare: " + "; ".join(problems))


def build_workspace(sections: Sequence[Section], *, group: str, entity: str, project: str) -> Any:
    """W&B's own workspace object (`wandb_workspaces.workspaces.Workspace`), runs filtered to `group`."""
    check_sections(sections)
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def panel(p: Panel) -> Any:
        if p.kind is PanelKind.TABLE:
            return wr.WeavePanelSummaryTable(table_name=p.table)
        if p.kind is PanelKind.BAR:
            return wr.BarPlot(title=p.title, metrics=list(p.keys), orientation="v")
        if p.regex is not None:
            return wr.LinePlot(title=p.title, x=p.x, metric_regex=p.regex)
        return wr.LinePlot(title=p.title, x=p.x, y=list(p.keys))

    return ws.Workspace(
        entity=entity,
        project=project,
        name=f"ShopSimRL {group}",
        sections=[
            ws.Section(name=s.name, panels=[panel(p) for p in s.panels], is_open=True) for s in sections
        ],
        runset_settings=ws.RunsetSettings(filters=ws.And(ws.Metric("Group") == group)),
    )


def workspace_document(
    sections: Sequence[Section], *, group: str, entity: str | None, project: str
) -> dict[str, Any]:
    """The JSON written without a server: the plain spec, plus the saved-view model when available."""
    document: dict[str, Any] = {
        "schema_version": WORKSPACE_SCHEMA_VERSION,
        "kind": "wandb_workspace",
        "created_at": time.time(),
        "group": group,
        "entity": entity,
        "project": project,
        "sections": [asdict(s) for s in sections],
        "wandb_view": None,
    }
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        document["wandb_view_missing"] = "wandb-workspaces is not installed: plain spec only"
        return document
    workspace = build_workspace(sections, group=group, entity=entity or "", project=project)
    # What `Workspace.save()` uploads (its own `_to_model()`; wandb-workspaces is pinned for this).
    document["wandb_view"] = workspace._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
    return document


def write_workspace_file(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    return atomic_write_json(path, document)


@dataclass
class PublishResult:
    group: str
    sections: int
    path: Path | None  # the file written (None when saving a given file)
    url: str | None  # the saved view's URL (None without an online W&B)


def publish_workspace(
    settings: WandbSettings,
    *,
    skillbank: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    from_file: str | os.PathLike[str] | None = None,
) -> PublishResult:
    """Write the spec of `settings.group` to a file, and save it when W&B is on and online.

    With `from_file`, the file written earlier is rebuilt and saved instead. ValueError names what is missing.
    """
    path: Path | None
    if from_file is not None:
        document = json.loads(Path(from_file).read_text(encoding="utf-8"))
        workspace_source = lambda: workspace_from_document(document, entity=settings.entity)  # noqa: E731
        group, count, path = str(document.get("group")), len(document.get("sections") or ()), None
    else:
        if settings.group is None:
            raise ValueError("no W&B group: pass --group or set WANDB_GROUP")
        from shopsimrl.skills.skillbank import load_skillbank  # the rollout stack only when asked

        chunk_ids = load_skillbank(skillbank).active_ids if skillbank is not None else []
        sections = panel_sections(chunk_ids)
        document = workspace_document(
            sections, group=settings.group, entity=settings.entity, project=settings.project
        )
        path = write_workspace_file(
            out or Path(f"artifacts/analysis/workspace-{settings.group}.json"), document
        )
        group, count = settings.group, len(sections)
        workspace_source = lambda: build_workspace(  # noqa: E731
            sections, group=group, entity=settings.entity or "", project=settings.project
        )
    if not (settings.enabled and settings.mode is WandbMode.ONLINE):
        if from_file is not None:
            raise ValueError("saving a workspace file needs USE_WANDB=1 and WANDB_MODE=online")
        return PublishResult(group, count, path, None)
    if not (settings.entity or document.get("entity")):
        raise ValueError("saving a workspace needs an entity: pass --entity or set WANDB_ENTITY")
    workspace = workspace_source()
    try:
        workspace.save()
    except Exception as exc:  # the server's or the network's error, reported at the edge as one line
        where = f"; the spec is in {path}" if path is not None else ""
        raise ValueError(f"W&B did not save the workspace ({type(exc).__name__}: {exc}){where}") from None
    return PublishResult(group, count, path, str(workspace.url))


def workspace_from_document(document: dict[str, Any], *, entity: str | None = None) -> Any:
    """Rebuild W&B's workspace object from a written file (to save it from an online machine)."""
    if (
        document.get("schema_version") != WORKSPACE_SCHEMA_VERSION
        or document.get("kind") != "wandb_workspace"
    ):
        raise ValueError("not a ShopSimRL workspace file of schema_version 1")
    sections = [
        Section(s["name"], tuple(Panel(**{**p, "kind": PanelKind(p["kind"])}) for p in s["panels"]))
        for s in document["sections"]
    ]
    owner = entity or document.get("entity")
    if not owner:
        raise ValueError("the workspace file has no entity; pass --entity (or set WANDB_ENTITY)")
    return build_workspace(sections, group=document["group"], entity=owner, project=document["project"])

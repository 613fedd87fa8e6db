"""Panels as code: the five sections for a round group, checked against the metric registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from shopsimrl.cli import main
from shopsimrl.metrics import names as m
from shopsimrl.tracking.workspace import (
    GATE_CONTRIBUTIONS_TABLE,
    Panel,
    PanelKind,
    Section,
    build_workspace,
    check_sections,
    panel_sections,
    unknown_keys,
    workspace_from_document,
)

GROUP = "qwen35-4b-round-000"
SKILLBANK = Path(__file__).resolve().parents[2] / "configs" / "skillbank.example.json"
FIVE = ["1 learning outcome", "2 curriculum", "3 failure frontier", "4 run health", "5 round gate"]


def test_every_panel_key_is_a_declared_metric() -> None:
    for chunk_ids in ([], ["read-the-constraints", "search-with-filters"]):
        sections = panel_sections(chunk_ids)
        assert unknown_keys(sections) == []
        for section in sections:
            for panel in section.panels:
                assert panel.keys or panel.regex or panel.table, panel
                for key in panel.keys:
                    assert m.spec_for_key(key) is not None, key


def test_a_panel_naming_an_unknown_metric_is_refused() -> None:
    renamed = Section(
        "1 learning outcome", (Panel("reward", PanelKind.LINE, keys=("rollout/shopsim/reward_meen",)),)
    )
    regex = Section("2 curriculum", (Panel("chunks", PanelKind.LINE, regex=r"rollout/shopsim/chunks/.*"),))
    table = Section("5 round gate", (Panel("contributions", PanelKind.TABLE, table="gate/contributions"),))
    assert unknown_keys([renamed, regex, table]) == [
        "1 learning outcome / reward: rollout/shopsim/reward_meen",
        "2 curriculum / chunks: regex rollout/shopsim/chunks/.* matches no declared metric",
        "5 round gate / contributions: table gate/contributions",
    ]
    with pytest.raises(ValueError, match=r"^panels name metrics the registry does not declare: 1 learning"):
        check_sections([renamed])
    with pytest.raises(ValueError, match="reward_meen"):
        build_workspace([renamed], group=GROUP, entity="team", project="shopsimrl")


def test_the_regex_panel_matches_every_chunk_curve_and_nothing_else() -> None:
    [regex_panel] = [p for p in panel_sections()[1].panels if p.regex is not None]
    assert re.fullmatch(regex_panel.regex, m.chunk_inclusion_rate_key("verify-before-cart"))
    assert re.fullmatch(regex_panel.regex, m.chunk_target_rho_key("verify-before-cart"))
    assert not re.fullmatch(regex_panel.regex, m.SKILL_FREE_GROUP_RATE.name)


def test_workspace_spec_for_the_round_lists_the_five_sections(tmp_path: Path, monkeypatch) -> None:
    for name in (
        "USE_WANDB",
        "WANDB_GROUP",
        "WANDB_RUN_GROUP",
        "WANDB_ENTITY",
        "WANDB_PROJECT",
        "WANDB_MODE",
    ):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "workspace.json"
    result = CliRunner().invoke(
        main, ["behavior", "panels", "--group", GROUP, "--skillbank", str(SKILLBANK), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert result.output == f"workspace spec for {GROUP}: 5 sections -> {out}\n"
    document = json.loads(out.read_text())
    assert document["group"] == GROUP
    assert [s["name"] for s in document["sections"]] == FIVE
    gate = document["sections"][4]["panels"]
    assert [p["table"] for p in gate if p["kind"] == "table"] == [GATE_CONTRIBUTIONS_TABLE]
    gate_keys = {k for p in gate for k in p["keys"]}
    assert {"gate/bare_reward", "gate/masked_reward", "gate/delta_reward", "gate/selected_count"} <= gate_keys
    curriculum = document["sections"][1]["panels"]
    chunks = json.loads(SKILLBANK.read_text())["chunks"]
    chunk_ids = [c["logical_chunk_id"] for c in chunks if c.get("active", True)]  # inactive: no curve
    assert [p["keys"] for p in curriculum[1:]] == [
        [m.chunk_inclusion_rate_key(c), m.chunk_target_rho_key(c)] for c in chunk_ids
    ]

    # W&B's own saved-view model, as Workspace.save() would upload it: same sections, runs of the group
    view = document["wandb_view"]["spec"]["section"]
    assert [s["name"] for s in view["panelBankConfig"]["sections"]] == FIVE
    [run_set] = view["runSets"]
    assert run_set["filters"]["filters"] == [
        {"key": {"section": "run", "name": "group"}, "op": "=", "value": GROUP, "disabled": False}
    ]
    first = view["panelBankConfig"]["sections"][0]["panels"][0]["config"]
    assert first["xAxis"] == m.ROLLOUT_STEP.name
    assert first["metrics"] == [m.REWARD_MEAN.name, m.TRAIN_REWARD_MEAN.name]

    # the file rebuilds the workspace on a machine that can reach W&B
    workspace = workspace_from_document(document, entity="team")
    assert [s.name for s in workspace.sections] == FIVE
    assert workspace.entity == "team" and workspace.project == "shopsimrl"


def test_saving_a_file_without_online_wandb_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("USE_WANDB", "0")
    out = tmp_path / "workspace.json"
    assert (
        CliRunner().invoke(main, ["behavior", "panels", "--group", GROUP, "--out", str(out)]).exit_code == 0
    )
    result = CliRunner().invoke(main, ["behavior", "panels", "--from-file", str(out)])
    assert result.exit_code == 1
    assert result.output == "Error: saving a workspace file needs USE_WANDB=1 and WANDB_MODE=online\n"

"""slime's job log read back into metric rows: what slime v0.3.1 logs per optimizer step and rollout.

slime sends its training metrics only to W&B/TensorBoard (slime/utils/logging_utils.py `log`) and to
its Python log, one `logger.info` line per call site, formatted by `configure_logger`
(logging_utils.py:12, "[%(asctime)s{prefix}] %(filename)s:%(lineno)d - %(message)s"):

    model.py:909              f"{role_tag}step {accumulated_step_id}: {log_dict}"   role_tag "" | "critic-"
    data.py:193               f"{metric_name} {rollout_id}: {reduced_log_dict}"     rollout | multi_turn | passrate
    rollout.py:1306           f"perf {rollout_id}: {log_dict}"   the rollout side, our rollout/shopsim/* merged in
    rollout.py:1285           f"eval {rollout_id}: {log_dict}"
    train_metric_utils.py:50  f"perf {rollout_id}: {log_dict}"   the training timers

`ray job submit` streams them to the launcher, which keeps them in `<run_dir>/slime_job.log`; lines
of Ray actors carry Ray's `(MegatronTrainRayActor pid=...) ` prefix, sometimes coloured. A line is a
metric line when slime's header names one of those files and its message one of those kinds; its
dict (Python's repr: `nan` and `inf` included) is read with `ast.literal_eval`, never `eval`. A metric
line that cannot be read (a torn last line, a value that is no literal) becomes a problem naming its
line number; every other line is not ours to judge and is skipped.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m

LAUNCHER_SUMMARY_PREFIX = "run_shopsimrl_slime.sh: mode="  # the launcher's own summary line
# slime's metric call sites: the file named in the log header -> the message kinds it logs there.
METRIC_SITES: dict[str, frozenset[str]] = {
    "model.py": frozenset({"step"}),  # with a role tag: "critic-step"
    "data.py": frozenset({"rollout", "multi_turn", "passrate"}),
    "rollout.py": frozenset({"perf", "eval"}),
    "train_metric_utils.py": frozenset({"perf"}),
}
ROLLOUT_KINDS = ("rollout", "perf")  # merged into one rollout row per rollout id, as metrics.jsonl has it

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEADER = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\] (?P<file>[\w.-]+\.py):(?P<lineno>\d+) - (?P<msg>.*)")
_MESSAGE = re.compile(r"(?:(?P<role>[a-z_]+)-)?(?P<kind>[a-z_]+) (?P<index>-?\d+): (?P<body>.*)")
_NON_FINITE = {"nan": math.nan, "inf": math.inf}
_LITERAL_NODES = (ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.UnaryOp, ast.BinOp, ast.operator,
                  ast.unaryop, ast.expr_context)  # fmt: skip


@dataclass(frozen=True)
class MetricLine:
    line: int  # 1-based line number in the log
    site: str  # slime's "file.py:lineno"
    kind: str  # "step", "critic-step", "rollout", "perf", "eval", "multi_turn", "passrate"
    index: int  # the optimizer step or the rollout id
    values: dict[str, Any]


@dataclass(frozen=True)
class SlimeLog:
    metric_lines: list[MetricLine]
    problems: list[str]  # "line N: ..." for every metric line that could not be read
    summary_line: str | None  # the launcher's summary line, if the log has one
    line_count: int


class _NonFinite(ast.NodeTransformer):
    """`nan` and `inf` as Python's float repr writes them: names to literal_eval, constants here."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _NON_FINITE:
            return ast.copy_location(ast.Constant(_NON_FINITE[node.id]), node)
        return node


def literal_dict(text: str) -> dict[str, Any]:
    """A dict written by Python's repr; raises ValueError (with the reason) when it is not one."""
    source = text.strip()
    try:
        tree = _NonFinite().visit(ast.parse(source, mode="eval"))
    except SyntaxError as exc:
        raise ValueError(f"not a Python literal ({exc.msg})") from None
    try:
        value = ast.literal_eval(tree)
    except ValueError:
        bad = next((n for n in ast.walk(tree.body) if not isinstance(n, _LITERAL_NODES)), tree.body)
        raise ValueError(f"not a Python literal: {ast.get_source_segment(source, bad)}") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"not a dict with string keys: {type(value).__name__}")
    return value


def parse_slime_log(text: str) -> SlimeLog:
    lines = text.split("\n")
    torn = lines[-1] != ""  # the writer stopped mid-line: the last line has no newline
    if not torn:
        lines.pop()
    metric_lines: list[MetricLine] = []
    problems: list[str] = []
    summary = None
    for number, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw).rstrip("\r")
        if summary is None and line.startswith(LAUNCHER_SUMMARY_PREFIX):
            summary = line
            continue
        header = _HEADER.search(line)
        if header is None:
            continue
        message = _MESSAGE.fullmatch(header["msg"])
        if message is None or message["kind"] not in METRIC_SITES.get(header["file"], ()):
            continue
        if message["role"] is not None and message["kind"] != "step":
            continue
        kind = f"{message['role']}-step" if message["role"] else message["kind"]
        site = f"{header['file']}:{header['lineno']}"
        try:
            values = literal_dict(message["body"])
        except ValueError as exc:
            tail = " (the last line, without a newline: torn)" if torn and number == len(lines) else ""
            problems.append(f"line {number}: {site} {kind} {message['index']}: {exc}{tail}")
            continue
        metric_lines.append(MetricLine(number, site, kind, int(message["index"]), values))
    return SlimeLog(metric_lines, problems, summary, len(lines))


def read_slime_log(path: Path) -> SlimeLog:
    return parse_slime_log(path.read_text(encoding="utf-8", errors="replace"))


def metric_rows(log: SlimeLog) -> list[dict[str, Any]]:
    """The rows metrics.jsonl would hold: one per optimizer step as slime logged it (with `train/step`),
    one per rollout id with its `rollout` and `perf` lines merged and `rollout/step` = the rollout id
    (slime's `compute_rollout_step` without --wandb-always-use-train-step, which the launcher never
    passes). eval, multi_turn and passrate lines are not rows of the smoke."""
    rows: list[dict[str, Any]] = []
    rollouts: dict[int, dict[str, Any]] = {}
    for metric in log.metric_lines:
        if metric.kind.endswith("step"):
            rows.append(dict(metric.values))
        elif metric.kind in ROLLOUT_KINDS:
            if metric.index not in rollouts:
                rollouts[metric.index] = {}
                rows.append(rollouts[metric.index])
            rollouts[metric.index].update(metric.values)
            rollouts[metric.index][m.ROLLOUT_STEP.name] = metric.index
    return rows

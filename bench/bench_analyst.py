"""Benchmark: the Failure Analyst's throughput on one core.

1. rules analysis of N synthetic cards (trials excluded): rules lesson per card, the firewall on
   every lesson, and the compile; cards/s (target >= 1,000/s).
2. card building: the sidecar turning N triage records and their traces into cards; cards/s.
3. peer, same cards, same run: a JSON round trip of every card (`json.dumps` + `json.loads`), the
   floor any card-processing step pays.
4. counterfactual trials on the local model (`--trial-model tiny|smollm2`): episodes/s.

The synthetic cards come from real ShopEnv episodes of a noisy scripted expert (ExpertPolicy with
noise), so the failure modes and gold audits have the real distribution; episodes are replicated
with distinct triage ids up to N.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_analyst.py --cards 10000 --trials 4 --trial-model smollm2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from shopsimrl.analyst.cards import CardStatus, FailureCard, build_card
from shopsimrl.analyst.compiler import compile_candidates
from shopsimrl.analyst.config import CompilerSettings, TrialSettings
from shopsimrl.analyst.firewall import Firewall
from shopsimrl.analyst.ledger import LedgerHistory
from shopsimrl.analyst.lessons import RulesBackend
from shopsimrl.analyst.sidecar import Sidecar
from shopsimrl.analyst.trial import TrialRunner, load_trial_policy
from shopsimrl.config.options import validate_options
from shopsimrl.records import (
    GroupTrace,
    OutcomeRecord,
    SegmentTrace,
    TrajectoryTrace,
    TriageRecord,
    append_triage,
    write_group_traces,
)
from shopsimrl.shop import (
    ExpertPolicy,
    ShopEnv,
    ToolCallFormat,
    format_tool_call,
    generate_catalog,
    load_split,
)
from shopsimrl.skills.skillbank import load_skillbank

SKILLBANK = Path(__file__).resolve().parents[1] / "configs" / "skillbank.example.json"


def failed_episodes(catalog, tasks, wanted: int, seed: int = 0) -> list[tuple]:
    """(task, gold audit, messages) of failed episodes of a noisy expert."""
    out = []
    attempt = 0
    while len(out) < wanted:
        task = tasks[attempt % len(tasks)]
        policy = ExpertPolicy(noise=0.6, seed=seed + attempt)
        env = ShopEnv(catalog, max_turns=10)
        instruction, _ = env.reset(task=task, seed=0)
        messages = [{"role": "system", "content": "..."}, {"role": "user", "content": instruction}]
        done = False
        while not done:
            text = format_tool_call(policy.next_action(env), ToolCallFormat.XML)
            observation, _, terminated, truncated, _ = env.step(text)
            messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": observation}]
            done = terminated or truncated
        audit = env.gold_audit()
        if not audit["success"]:
            out.append((task, audit, messages))
        attempt += 1
    return out


def group_records(episodes, n: int) -> list[tuple[TriageRecord, GroupTrace]]:
    records = []
    for index in range(n):
        task, audit, messages = episodes[index % len(episodes)]
        _, audit2, messages2 = episodes[(index * 7 + 3) % len(episodes)]
        if audit2["task_id"] != task.task_id:
            audit2, messages2 = audit, messages
        trajectories = []
        for rid, (a, msgs) in enumerate([(audit, messages), (audit2, messages2)]):
            outcome = OutcomeRecord(reward=a["reward"], strict_reward=0.0, success=False, scorable=True)
            segment = SegmentTrace(segment_index=0, segment_count=1, sample_index=rid, status="completed",
                                   total_tokens=1, response_tokens=1, trained_tokens=1, messages=msgs)  # fmt: skip
            trajectories.append(TrajectoryTrace(rollout_id=rid, outcome=outcome, gold_audit=a, segments=[segment]))
        step = index // 64
        key = f"{task.task_id}#g{index}"
        trace = GroupTrace(rollout_step=step, group_index=index, group_key=key, task_id=task.task_id, split="train",
                           arm="skill_free", mask=[], q=1.0, rho={}, technical_error=False, all_wrong=True,
                           zero_std=True, trajectories=trajectories)  # fmt: skip
        triage = TriageRecord(triage_id=f"{step}-{index}", rollout_step=step, group_index=index, group_key=key,
                              task_id=task.task_id, split="train", arm="skill_free", mask=[], reasons=["all_wrong"],
                              outcomes=[t.outcome for t in trajectories], rollout_ids=[0, 1], technical_errors=[],
                              trace_path=f"traces/step-{step}/group-{index}.json")  # fmt: skip
        records.append((triage, trace))
    return records


def bench_rules(cards: list[FailureCard], catalog) -> dict:
    skillbank = load_skillbank(SKILLBANK)
    start, cpu = time.perf_counter(), time.process_time()
    results = RulesBackend().lessons(cards)
    analysed = [c.model_copy(update={"lesson": r.lesson, "status": CardStatus.ELIGIBLE})
                for c, r in zip(cards, results, strict=True)]  # fmt: skip
    firewall = Firewall.for_evidence(analysed, catalog=catalog)
    rejected = sum(not firewall.check(c.lesson.text, evidence=(c.card_id,)).ok for c in analysed)  # as the stage does
    compiled = compile_candidates(analysed, skillbank=skillbank, skillbank_sha256="0" * 64, round_name="bench",
                                  firewall=firewall, skillbank_firewall=Firewall.for_evidence([], catalog=catalog),
                                  history=LedgerHistory([]), settings=CompilerSettings(),
                                  now="2026-01-01T00:00:00+00:00")  # fmt: skip
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"cards": len(cards), "seconds": seconds, "cards_per_s": len(cards) / seconds,
            "cards_per_cpu_s": len(cards) / cpu, "firewall_rejected": rejected,
            "candidates": len(compiled.pool.interventions)}  # fmt: skip


def bench_sidecar(records) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        train, analysis = Path(scratch) / "train", Path(scratch) / "analysis"
        write_group_traces(train, [trace for _, trace in records])
        for triage, _ in records:
            append_triage(train, triage)
        start, cpu = time.perf_counter(), time.process_time()
        written = Sidecar(train, analysis).process_new()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"cards": len(written), "seconds": seconds, "cards_per_s": len(written) / seconds,
            "cards_per_cpu_s": len(written) / cpu}  # fmt: skip


def bench_peer(cards: list[FailureCard]) -> dict:
    lines = [c.model_dump(mode="json") for c in cards]
    start, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        json.loads(json.dumps(line))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"cards": len(cards), "seconds": seconds, "cards_per_s": len(cards) / seconds,
            "cards_per_cpu_s": len(cards) / cpu}  # fmt: skip


def bench_trials(cards: list[FailureCard], catalog, model: str, count: int) -> dict:
    options = validate_options({"run_dir": "unused", "max_turns": 8, "max_new_tokens_per_turn": 64,
                                "tool_call_format": "json", "skillbank": str(SKILLBANK),
                                "catalog": {"seed": 0, "num_products": catalog.num_products}}, "bench")  # fmt: skip
    settings = TrialSettings(model=model, attempts=1)
    start = time.perf_counter()
    tokenizer, generator = load_trial_policy(settings, options)
    load_s = time.perf_counter() - start
    runner = TrialRunner(settings, options, catalog, load_skillbank(SKILLBANK), tokenizer, generator)
    lesson = "Compare the product's price with the customer's price limit before adding it to the cart."
    start = time.perf_counter()
    records = [runner.run(card, lesson) for card in cards[:count]]
    seconds = time.perf_counter() - start
    return {"model": model, "episodes": sum(r.attempts for r in records), "seconds": seconds, "load_s": load_s,
            "episodes_per_s": sum(r.attempts for r in records) / seconds,
            "successes": sum(r.successes for r in records)}  # fmt: skip


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--sidecar-cards", type=int, default=2_000)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--trial-model", default="tiny")
    parser.add_argument("--num-products", type=int, default=2000)
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    catalog = generate_catalog(seed=0, num_products=args.num_products)
    episodes = failed_episodes(catalog, load_split(catalog, "train"), wanted=300)
    records = group_records(episodes, max(args.cards, args.sidecar_cards))
    cards = [build_card(triage, trace, None) for triage, trace in records[: args.cards]]
    report = {
        "machine": _cpu_model(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "rules_analysis": bench_rules(cards, catalog),
        "sidecar_card_building": bench_sidecar(records[: args.sidecar_cards]),
        "peer_json_round_trip": bench_peer(cards),
        "modes": {m: sum(c.failure_mode.value == m for c in cards) for m in sorted({c.failure_mode.value for c in cards})},
    }
    if args.trials:
        report["trials"] = bench_trials(cards, catalog, args.trial_model, args.trials)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

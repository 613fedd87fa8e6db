"""ShopSim environment benchmarks (results go to docs/benchmarks.md, "ShopSim environment").

Measures, on one core:
- step throughput in tool calls per second through the same path an agent's call takes:
  assistant text -> parse_tool_call -> schema validation -> tool -> JSON observation -> info;
  reported per wall-clock second and per CPU second of this thread (the development VM is shared
  with other jobs, so wall-clock rates vary with their load; CPU time varies much less), each the
  best of several repeats. Every repeat uses a fresh catalog, so no search ranking, title
  encoding or product page cached by a previous repeat is reused;
- reset time and state-hash time;
- search latency p50/p99 on 10k and 100k catalogs (uncached: each query once per catalog);
- peak memory of generating and indexing a 100k catalog (tracemalloc; numpy reports to it).

Run: .venv/bin/python bench/bench_shop.py            (about a minute)
     .venv/bin/python bench/bench_shop.py --quick    (smaller, for a smoke check)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import tracemalloc

from shopsimrl.shop import ExpertPolicy, ShopEnv, format_tool_call, generate_catalog, load_split


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]

    return {"p50_us": pct(50) * 1e6, "p99_us": pct(99) * 1e6, "max_us": ordered[-1] * 1e6}


def _expert_scripts(env: ShopEnv, tasks, noise: float, fmt: str = "json") -> list[tuple[object, list[str]]]:
    """The assistant texts of expert episodes (recorded once, replayed in the timed loop)."""
    scripts = []
    for i, task in enumerate(tasks):
        expert = ExpertPolicy(noise=noise, seed=i)
        env.reset(task=task, seed=0)
        texts: list[str] = []
        done = False
        while not done:
            call = expert.next_action(env)
            text = format_tool_call(call, fmt)
            texts.append(text)
            _, _, terminated, truncated, _ = env.step(text)
            done = terminated or truncated
        scripts.append((task, texts))
    return scripts


def bench_steps(
    num_products: int,
    num_tasks: int,
    noise: float,
    repeats: int,
    group: int = 1,
    fmt: str = "json",
    fresh_catalog: bool = True,
) -> dict:
    """`group` > 1 replays each episode that many times in a row, as the siblings of a GRPO group
    do (same task, same searches); group = 1 is the cold case where every search is new.

    `fresh_catalog=False` is a training run's steady state: one catalog for all repeats, whose
    search-result cache is emptied before each repeat (every search is ranked anew) while its
    bounded caches of serialised rows and pages stay filled from earlier repeats."""
    catalog = generate_catalog(seed=0, num_products=num_products)
    tasks = load_split(catalog, "train", limit=num_tasks)
    env = ShopEnv(catalog)
    scripts = _expert_scripts(env, tasks, noise, fmt)
    best = best_cpu = 0.0
    for _ in range(repeats):
        if fresh_catalog:
            # A fresh catalog object per repeat: nothing is served from a cache filled by a previous pass.
            catalog = generate_catalog(seed=0, num_products=num_products)
        catalog.index.clear_cache()  # builds the index outside the timed loop; no cached rankings
        env = ShopEnv(catalog)
        calls = 0
        start, start_cpu = time.perf_counter(), time.thread_time()
        for task, texts in scripts:
            for _ in range(group):
                env.reset(task=task, seed=0)
                for text in texts:
                    env.step(text)
                calls += len(texts)
        elapsed, elapsed_cpu = time.perf_counter() - start, time.thread_time() - start_cpu
        best, best_cpu = max(best, calls / elapsed), max(best_cpu, calls / elapsed_cpu)
    return {"catalog": num_products, "episodes": len(scripts) * group, "group": group, "noise": noise, "format": fmt,
            "fresh_catalog": fresh_catalog, "tool_calls": calls, "calls_per_s": best,
            "calls_per_cpu_s": best_cpu}  # fmt: skip


def bench_reset_and_hash(num_products: int, n: int) -> dict:
    catalog = generate_catalog(seed=0, num_products=num_products)
    tasks = load_split(catalog, "train", limit=50)
    env = ShopEnv(catalog)
    resets, hashes = [], []
    expert = ExpertPolicy()
    for i in range(n):
        task = tasks[i % len(tasks)]
        t0 = time.perf_counter()
        env.reset(task=task, seed=i)
        resets.append(time.perf_counter() - t0)
        for _ in range(4):  # hash a state with a search, a viewed product and selections
            env.step(expert.next_action(env))
        t0 = time.perf_counter()
        env.state_hash()
        hashes.append(time.perf_counter() - t0)
    return {"reset": _percentiles(resets), "state_hash": _percentiles(hashes)}


def bench_search(num_products: int, num_queries: int) -> dict:
    catalog = generate_catalog(seed=0, num_products=num_products)
    catalog.index.clear_cache()  # build the index now
    tasks = load_split(catalog, "train", limit=num_queries)
    queries = []
    for task in tasks:  # the instruction's words, with and without the price filter
        words = " ".join([*task.gold.attributes.values(), task.gold.product_type])
        queries.append((words, None))
        queries.append((words, task.gold.price_ceiling))
        queries.append((task.gold.product_type, None))
    latencies = []
    for words, max_price in queries:
        catalog.index.clear_cache()  # latency of the search itself, not of the result cache
        t0 = time.perf_counter()
        catalog.search(words, max_price=max_price)
        latencies.append(time.perf_counter() - t0)
    return {"catalog": num_products, "queries": len(queries), **_percentiles(latencies)}


def bench_memory(num_products: int) -> dict:
    tracemalloc.start()
    catalog = generate_catalog(seed=0, num_products=num_products)
    catalog.index.clear_cache()  # build the index now
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"catalog": num_products, "peak_mib": peak / 2**20, "retained_mib": current / 2**20,
            "catalog_nbytes_mib": catalog.nbytes() / 2**20}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer tasks and queries")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    pinned = _pin_one_core()
    tasks = 200 if args.quick else 1000
    repeats = 3 if args.quick else 5
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {pinned}",
        "steps_2k_cold": bench_steps(2_000, 300, 0.0, repeats),
        "steps_10k_cold": bench_steps(10_000, tasks, 0.0, repeats),
        "steps_10k_noisy_cold": bench_steps(10_000, tasks, 0.3, repeats),
        "steps_10k_xml_noisy_cold": bench_steps(10_000, tasks, 0.3, repeats, fmt="xml"),
        "steps_10k_new_queries_warm_rows": bench_steps(10_000, tasks, 0.0, repeats, fresh_catalog=False),
        "steps_10k_group8": bench_steps(10_000, tasks // 4, 0.0, repeats, group=8),
        "steps_100k_cold": bench_steps(100_000, tasks, 0.0, repeats),
        "steps_100k_group8": bench_steps(100_000, tasks // 4, 0.0, repeats, group=8),
        "reset_and_hash": bench_reset_and_hash(10_000, 500 if args.quick else 2000),
        "search_10k": bench_search(10_000, 300 if args.quick else 1000),
        "search_100k": bench_search(100_000, 300 if args.quick else 1000),
        "memory_100k": bench_memory(100_000),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(results["machine"], f"load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "")
    for key in [k for k in results if k.startswith("steps_")]:
        r = results[key]
        print(
            f"{key}: {r['calls_per_s']:,.0f} tool calls/s wall, {r['calls_per_cpu_s']:,.0f} per CPU s "
            f"({r['tool_calls']} calls, {r['episodes']} episodes, group {r['group']}, noise {r['noise']}, {r['format']}"
            f"{'' if r['fresh_catalog'] else ', catalog shared across repeats'})"
        )
    rh = results["reset_and_hash"]
    print(f"reset: p50 {rh['reset']['p50_us']:.1f} us, p99 {rh['reset']['p99_us']:.1f} us")
    print(f"state_hash: p50 {rh['state_hash']['p50_us']:.1f} us, p99 {rh['state_hash']['p99_us']:.1f} us")
    for key in ("search_10k", "search_100k"):
        r = results[key]
        print(
            f"{key}: p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, max {r['max_us']:.0f} us ({r['queries']} queries)"
        )
    m = results["memory_100k"]
    print(
        f"memory_100k: peak {m['peak_mib']:.1f} MiB while generating+indexing, retained {m['retained_mib']:.1f} MiB, "
        f"columns+index {m['catalog_nbytes_mib']:.1f} MiB"
    )


if __name__ == "__main__":
    main()

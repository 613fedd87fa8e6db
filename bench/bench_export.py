"""Benchmark: `shopsimrl wandb export` of a 1M-row history from an offline run file.

Writes a seed-shaped history (five log events per rollout batch) of N rows as an offline W&B
transaction log in a scratch dir, then runs the export in a fresh process and reports its wall time
and peak RSS, next to the peak RSS of a process that only imports the same modules (the baseline).

    .venv/bin/python bench/bench_export.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

_EXPORT = """
import sys, time
from pathlib import Path
from shopsimrl.tracking.export import OfflineHistorySource, export_history
start = time.perf_counter()
result = export_history(["bench"], OfflineHistorySource([sys.argv[1]]), Path(sys.argv[2]), plots=sys.argv[3] == "1")
print(time.perf_counter() - start, result.manifest["row_counts"])
"""
_BLOCK = 32768
_BASELINE = "import shopsimrl.tracking.export, shopsimrl.tracking.offline_reader, wandb.proto.wandb_internal_pb2"


def _frame(payloads, path: Path) -> None:
    """Write payloads as a W&B v0 transaction log (LevelDB-log framing, 32 KiB blocks)."""
    with open(path, "wb") as out:
        out.write(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
        pos = 7
        for payload in payloads:
            first = True
            while True:
                room = _BLOCK - pos % _BLOCK
                if room < 7:
                    out.write(b"\0" * room)
                    pos += room
                    continue
                take = min(len(payload), room - 7)
                last = take == len(payload)
                kind = (1 if last else 2) if first else (4 if last else 3)
                chunk = payload[:take]
                crc = zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
                out.write(struct.pack("<IHB", crc, take, kind) + chunk)
                pos += 7 + take
                payload, first = payload[take:], False
                if last:
                    break


def _write_history(root: Path, rows: int) -> Path:
    """A seed-shaped offline run of `rows` history records, encoded with wandb's own protobuf classes.

    wandb's writer manages about 1,000-1,500 rows/s on this machine (a million rows would take longer
    than the export itself), so the bench frames the records directly; the canary test checks the
    format against `wandb leet inspect`.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    from shopsimrl.tracking.export.synthetic import seed_shaped_events

    def records():
        run = pb.Record()
        run.run.run_id, run.run.project, run.run.run_group = "benchrun", "bench", "bench"
        yield run.SerializeToString()
        for step, event in enumerate(seed_shaped_events(0, rollouts_per_round=rows // 5)):
            record = pb.Record()
            record.history.step.num = step
            for key, value in {
                **event,
                "_step": step,
                "_runtime": step * 0.01,
                "_timestamp": 1.8e9 + step,
            }.items():
                item = record.history.item.add()
                item.nested_key.append(key)
                item.value_json = json.dumps(value)
            yield record.SerializeToString()
        done = pb.Record()
        done.exit.exit_code = 0
        yield done.SerializeToString()

    run_dir = root / "wandb" / "offline-run-20260101_000000-benchrun"
    run_dir.mkdir(parents=True)
    path = run_dir / "run-benchrun.wandb"
    _frame(records(), path)
    return path


def _child(code: str, *args: str) -> tuple[str, int]:
    """Run `code` in a fresh interpreter; returns (stdout, peak RSS in KiB of that child)."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    # RUSAGE_CHILDREN holds the max over all waited-for children, so run the baseline first.
    return out.stdout, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--plots", action="store_true", help="also draw the PNG plots")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        root = Path(scratch)
        start = time.perf_counter()
        run_file = _write_history(root, args.rows)
        write_s = time.perf_counter() - start
        _, baseline_kib = _child(_BASELINE)
        stdout, export_kib = _child(_EXPORT, str(root), str(root / "out"), "1" if args.plots else "0")
        seconds, counts = stdout.split(" ", 1)
        print(
            json.dumps(
                {
                    "rows": args.rows,
                    "run_file_mb": round(run_file.stat().st_size / 1e6, 1),
                    "write_history_s (not the export)": round(write_s, 1),
                    "export_s": round(float(seconds), 1),
                    "rows_per_s": round(args.rows / float(seconds)),
                    "export_peak_rss_mb": round(export_kib / 1024, 1),
                    "import_only_peak_rss_mb": round(baseline_kib / 1024, 1),
                    "plots": args.plots,
                    "row_counts": counts.strip(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()

"""Run every benchmark of logferry in one go (`make bench`), one after the other.

Each script runs as its own process, with its own figures printed as they come; at
the end a summary says which ran, how long each took and which failed. The scripts
are run one at a time on purpose: on a 2-core machine two benchmarks side by side
would measure each other.

    .venv/bin/python benchmarks/run_all.py                 # every benchmark, full sizes
    .venv/bin/python benchmarks/run_all.py --quick         # small sizes, a few minutes
    .venv/bin/python benchmarks/run_all.py --only replication,broker

The exit code is 0 when every selected benchmark exited 0, 1 otherwise, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, arguments for a full run, arguments for --quick)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "paper": (
        "paper_experiment.py",
        [],
        ["--messages", "20000", "--runs", "1", "--warmup", "5000", "--latency-seconds", "3"],
    ),
    "kafka": (
        "vs_kafka.py",
        [],
        ["--messages", "20000", "--rounds", "1", "--warmup", "5000", "--latency-seconds", "3"],
    ),
    "broker": ("broker_throughput.py", [], ["--messages", "100000", "--runs", "1"]),
    "replication": ("replication_throughput.py", [], ["--messages", "50000", "--runs", "1"]),
    "latency": ("latency.py", [], ["--duration", "3", "--runs", "1"]),
    "agent": ("agent_throughput.py", [], ["--lines", "100000", "--runs", "1"]),
    "groups": ("group_consumer.py", [], ["--messages", "100000", "--runs", "1", "--rebalances", "2"]),
    "mirror": ("mirror_throughput.py", [], ["--messages", "100000"]),
    "compression": ("compression.py", [], ["--messages", "50000", "--runs", "1"]),
    "loader": ("loader_throughput.py", [], ["--messages", "100000"]),
    "loader-verify": ("loader_verify.py", [], ["--files", "2000", "--repeat", "1"]),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and one run each: checks that every benchmark works, the figures are rough",
    )
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of: {', '.join(BENCHMARKS)}"
    )
    args = parser.parse_args(argv)
    args.selected = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in args.selected if name not in BENCHMARKS]
    if unknown:
        parser.error(f"--only: unknown benchmark {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: list[tuple[str, int, float]] = []
    try:
        for i, name in enumerate(args.selected, 1):
            script, full, quick = BENCHMARKS[name]
            command = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
            print(f"\n=== [{i}/{len(args.selected)}] {name}: {' '.join(command[1:])}", flush=True)
            began = time.monotonic()
            code = subprocess.run(command, cwd=HERE.parent).returncode
            results.append((name, code, time.monotonic() - began))
    except KeyboardInterrupt:
        print("\nrun_all: interrupted", file=sys.stderr)
        return 130
    print("\n=== summary")
    for name, code, seconds in results:
        print(f"{name:12} {'ok' if code == 0 else f'FAILED (exit {code})':18} {seconds:7.0f} s")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Old against new in one sitting: a benchmark script run from two checkouts, interleaved.

Runs ``SCRIPT ARGS... --runs 1`` alternately in checkout A and checkout B (each with its
own ``.venv/bin/python``), ``--rounds`` times, so that both see the same machine over
the same minutes. Collects every ``run N: <case> <rate> msgs/s`` line the script prints
(broker_throughput.py and replication_throughput.py print them) and prints, per case,
the median of each side and B / A. ``latency.py``'s ``run N: <case>  end-to-end p50 X
p99 Y p99.9 Z max W ms; ack p50 X p99 Y ms`` lines count too: one case per figure, in
ms (lower is better there), and so do broker_throughput.py's broker and client CPU per
message (and kafka_clients.py's, given in us/msg). A
checkout is a directory (for example a
``git worktree add --detach ../old <rev>`` with ``make venv`` run in it).

    .venv/bin/python benchmarks/ab_compare.py --a ../old --b . --rounds 5 \\
        benchmarks/broker_throughput.py --messages 1000000
    .venv/bin/python benchmarks/ab_compare.py --a ../old --b . --rounds 5 \\
        benchmarks/latency.py --rates 10000 --acks 1 --rf 1 --duration 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUN_LINE = re.compile(r"run \d+: (?P<case>.+?)\s+(?P<rate>[\d,]+) msgs/s")
LATENCY_LINE = re.compile(
    r"run \d+: (?P<case>.+?)\s+end-to-end p50 (?P<p50>[\d.]+) p99 (?P<p99>[\d.]+) "
    r"p99\.9 (?P<p999>[\d.]+) max (?P<max>[\d.]+) ms; ack p50 (?P<ack50>[\d.]+) "
    r"p99 (?P<ack99>[\d.]+) ms"
)
CPU_PART = re.compile(r"CPU ns/msg client\s+(?P<client>[\d,]+) broker\s+(?P<broker>[\d,]+)")
CPU_US_PART = re.compile(r"\(broker CPU (?P<broker>[\d.]+) us/msg, client CPU (?P<client>[\d.]+) us/msg\)")
"""kafka_clients.py's form of the same figures."""
LATENCY_FIGURES = (
    ("p50", "e2e p50 ms"),
    ("p99", "e2e p99 ms"),
    ("p999", "e2e p99.9 ms"),
    ("max", "e2e max ms"),
    ("ack50", "ack p50 ms"),
    ("ack99", "ack p99 ms"),
)


def rates_of(output: str) -> dict[str, float]:
    """The msgs/s figure of every case a benchmark printed (the last one per case), or
    for latency.py each percentile of each case (ms)."""
    rates: dict[str, float] = {}
    for line in output.splitlines():
        latency = LATENCY_LINE.search(line)
        if latency:
            case = " ".join(latency["case"].split())
            for group, name in LATENCY_FIGURES:
                rates[f"{case} {name}"] = float(latency[group])
            continue
        match = RUN_LINE.search(line)
        if match:
            case = match["case"].strip()
            rates[case] = float(match["rate"].replace(",", ""))
            cpu = CPU_PART.search(line, match.end())
            if cpu:  # broker_throughput.py: steadier under load than msgs/s
                rates[f"{case} broker CPU ns/msg"] = float(cpu["broker"].replace(",", ""))
                rates[f"{case} client CPU ns/msg"] = float(cpu["client"].replace(",", ""))
            cpu_us = CPU_US_PART.search(line, match.end())
            if cpu_us:  # kafka_clients.py
                rates[f"{case} broker CPU ns/msg"] = float(cpu_us["broker"]) * 1000
                rates[f"{case} client CPU ns/msg"] = float(cpu_us["client"]) * 1000
    return rates


def run_once(checkout: Path, script: str, args: list[str], timeout: float) -> dict[str, float]:
    """One ``--runs 1`` invocation of the script in ``checkout``; its figures per case."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"ab_compare: {python} does not exist: run `make venv` in {checkout}")
    cmd = [str(python), str(checkout / script), *args, "--runs", "1"]
    done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(
            f"ab_compare: {' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    rates = rates_of(done.stdout)
    if not rates:
        raise SystemExit(f"ab_compare: no 'run N: <case> <rate> msgs/s' lines from {cmd}")
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the old code)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (the new code)")
    parser.add_argument("--rounds", type=int, default=5, help="A/B pairs; figures are medians")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per invocation")
    parser.add_argument("script", help="benchmark script, relative to each checkout")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    opts = parser.parse_args()
    sides = {"A": opts.a.resolve(), "B": opts.b.resolve()}
    results: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    for round_no in range(1, opts.rounds + 1):
        # alternate which side goes first, so neither always gets the warmer machine
        order = ("A", "B") if round_no % 2 else ("B", "A")
        for side in order:
            t0 = time.monotonic()
            rates = run_once(sides[side], opts.script, opts.args, opts.timeout)
            for case, rate in rates.items():
                results[side].setdefault(case, []).append(rate)
            shown = ", ".join(f"{case} {rate:,.2f}" for case, rate in rates.items())
            print(f"round {round_no}/{opts.rounds} {side} ({time.monotonic() - t0:.0f} s): {shown}", flush=True)
    print()
    print(f"A = {sides['A']}\nB = {sides['B']}\n{opts.script} {' '.join(opts.args)}")
    print(
        f"{'case':<30} {'A':>12} {'B':>12} {'B/A':>6}   (medians of {opts.rounds}; msgs/s, or ms where the case says)"
    )
    for case, a_rates in results["A"].items():
        b_rates = results["B"].get(case)
        a = statistics.median(a_rates)
        if not b_rates:
            print(f"{case:<30} {a:>12,.2f} {'-':>12}")
            continue
        b = statistics.median(b_rates)
        print(f"{case:<30} {a:>12,.2f} {b:>12,.2f} {b / a:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

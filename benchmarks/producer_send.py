"""The producer's side alone: one ``send()`` per 200-byte message, default batching.

The case "produce default batching" of broker_throughput.py, with the CPU it costs
split by thread: the caller's thread (``send()`` itself) and the others (the sender
thread encoding and writing, the connection's reader), and the broker process's
(from /proc: appending, checking CRCs and producer sequences). CPU seconds per message are
what a busy shared machine disturbs least; msgs/s is the wall clock from the first
send to the end of ``flush()``. One broker (and ZooKeeper) run as separate processes
on 127.0.0.1 (benchmarks/harness.py); the producer is this process.

``--checkout DIR`` imports the producer from another checkout (for example the
worktree of the branch before a change), so both are measured by the same script:

    .venv/bin/python benchmarks/producer_send.py --messages 1000000 --runs 5
    .venv/bin/python benchmarks/producer_send.py --checkout ../old --runs 5

``--vs DIR`` measures this checkout (B) against the checkout DIR (A, with its own
``.venv``) alternated run by run, each run a fresh process with its own cluster, and
prints both sides' medians (msgs/s and the CPU figures) and B / A. That is the way to
compare old and new on a shared machine:

    .venv/bin/python benchmarks/producer_send.py --vs ../old --runs 5

``--idempotence both`` measures the idempotent producer against the plain one side by
side (runs alternate on, off, on, ...; medians of each), with ``--acks -1`` (idempotence
needs acks 1 or all):

    .venv/bin/python benchmarks/producer_send.py --acks -1 --idempotence both --runs 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VALUE = b"x" * 200
_TICK = os.sysconf("SC_CLK_TCK")


def broker_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the broker processes used so far (/proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
        except (OSError, IndexError, ValueError):
            pass
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--acks", type=int, default=0, choices=(0, 1, -1))
    parser.add_argument(
        "--idempotence",
        choices=("default", "on", "off", "both"),
        default="default",
        help="the producer's idempotence option; both: alternate on and off, medians side by side",
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the checkout whose producer and broker are measured",
    )
    parser.add_argument(
        "--vs",
        type=Path,
        metavar="DIR",
        help="alternate runs of this checkout with runs of checkout DIR (each "
        "with its own .venv) and print both medians and new / old",
    )
    args = parser.parse_args()
    if args.vs is not None:
        return compare(args)
    sys.path.insert(0, str(args.checkout.resolve()))
    from benchmarks.harness import LocalCluster
    from broker.client import Producer

    n = args.messages
    modes = {"default": [None], "on": [True], "off": [False], "both": [True, False]}[args.idempotence]
    results: dict[bool | None, tuple[list[float], list[float], list[float], list[float]]] = {
        m: ([], [], [], []) for m in modes
    }
    with (
        tempfile.TemporaryDirectory(prefix="logferry-bench-") as tmp,
        LocalCluster(Path(tmp), log={"flush_messages": 50000, "flush_ms": 200}) as cluster,
    ):
        print(
            f"producer from {args.checkout.resolve()}; broker on {cluster.bootstrap[0]}; "
            f"{n:,} messages of {len(VALUE)} bytes, acks={args.acks}",
            flush=True,
        )
        # both: on, off, then off, on, ... so neither always follows the other's run
        for run, mode in ((r, m) for r in range(args.runs) for m in modes[:: 1 - 2 * (r % 2)]):
            rates, main_cpu, other_cpu, broker = results[mode]
            pids = getattr(cluster, "broker_pids", lambda: [])()
            topic = f"send-{run}-{mode}"
            chunk = [VALUE]  # as broker_throughput.py sends it
            options = {} if mode is None else {"idempotence": mode}
            with Producer(
                brokers=cluster.bootstrap, acks=args.acks, linger_ms=5, buffer_bytes=256 << 20, **options
            ) as producer:
                producer.send(topic, chunk, partition=0).wait(60)  # metadata, connection
                send = producer.send
                t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
                b0 = broker_cpu(pids)
                for _ in range(n):
                    send(topic, chunk, partition=0)
                producer.flush()
                t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
                b1 = broker_cpu(pids)
            rates.append(n / (t1 - t0))
            main_cpu.append((m1 - m0) / n)
            other_cpu.append(((c1 - c0) - (m1 - m0)) / n)
            broker.append((b1 - b0) / n)
            name = "" if mode is None else f" idempotence {'on' if mode else 'off'}"
            print(
                f"  run {run + 1}:{name} produce default batching {rates[-1]:>12,.0f} msgs/s "
                f"(CPU per message: send() {main_cpu[-1] * 1e9:.0f} ns, other threads "
                f"{other_cpu[-1] * 1e9:.0f} ns, broker {broker[-1] * 1e9:.0f} ns)",
                flush=True,
            )
    for mode, (rates, main_cpu, other_cpu, broker) in results.items():
        name = "" if mode is None else f" (idempotence {'on' if mode else 'off'})"
        print(
            f"\nmedian of {args.runs}{name}: {statistics.median(rates):,.0f} msgs/s; CPU per "
            f"message: send() {statistics.median(main_cpu) * 1e9:.0f} ns, other threads "
            f"{statistics.median(other_cpu) * 1e9:.0f} ns, broker "
            f"{statistics.median(broker) * 1e9:.0f} ns (the machine may be shared: CPU "
            f"figures are the steadier ones)"
        )
    return 0


RUN_LINE = re.compile(
    r"run \d+: produce default batching\s+(?P<rate>[\d,]+) msgs/s \(CPU per "
    r"message: send\(\) (?P<send>\d+) ns, other threads (?P<other>\d+) ns, "
    r"broker (?P<broker>\d+) ns\)"
)
FIGURES = ("rate", "send", "other", "broker")


def compare(args: argparse.Namespace) -> int:
    """``--vs``: this checkout (B) against ``args.vs`` (A), one run each in turn (A
    first in odd rounds, B first in even ones), each a fresh ``--runs 1`` process of
    this script under the checkout's own interpreter."""
    sides = {"A": args.vs.resolve(), "B": args.checkout.resolve()}
    for checkout in sides.values():
        if not (checkout / ".venv" / "bin" / "python").exists():
            raise SystemExit(f"producer_send: {checkout}/.venv/bin/python does not exist (run `make venv` there)")
    figures: dict[str, dict[str, list[float]]] = {s: {f: [] for f in FIGURES} for s in sides}
    print(
        f"A = {sides['A']}\nB = {sides['B']}\n{args.messages:,} messages, acks={args.acks}, "
        f"{args.runs} rounds, alternated",
        flush=True,
    )
    for round_ in range(args.runs):
        for side in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
            checkout = sides[side]
            cmd = [
                str(checkout / ".venv" / "bin" / "python"),
                str(Path(__file__).resolve()),
                "--checkout",
                str(checkout),
                "--runs",
                "1",
                "--messages",
                str(args.messages),
                "--acks",
                str(args.acks),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            match = RUN_LINE.search(done.stdout)
            if done.returncode != 0 or match is None:
                raise SystemExit(
                    f"producer_send: {' '.join(cmd)} exited {done.returncode}:\n"
                    f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
                )
            for name in FIGURES:
                figures[side][name].append(float(match[name].replace(",", "")))
            print(f"  round {round_ + 1} {side}: {match[0].split(': ', 1)[1]}", flush=True)
    medians = {s: {f: statistics.median(v) for f, v in figs.items()} for s, figs in figures.items()}
    print(f"\nmedians of {args.runs}      {'A (old)':>12} {'B (new)':>12}   B / A")
    for name, label, unit in (
        ("rate", "msgs/s", ""),
        ("send", "send() CPU", " ns"),
        ("other", "other threads", " ns"),
        ("broker", "broker CPU", " ns"),
    ):
        a, b = medians["A"][name], medians["B"][name]
        print(f"  {label + unit:<20} {a:>12,.0f} {b:>12,.0f}   {b / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

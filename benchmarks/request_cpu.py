"""The brokers' CPU time per message at a fixed rate, one message per produce request:
the per-request cost of the broker (issue 18), robust on a shared machine where
wall-clock figures swing.

The cluster, topic, producer and following consumer are ``benchmarks/latency.py``'s
(brokers as ``etc/live/broker-N.toml`` ship, a consumer in its own process): at a low
rate with ``linger_ms = 0`` every message is its own produce request, its own
group-commit round and its own long-poll answer. Each broker's CPU time (user +
system, from /proc, the event loop's thread and the others apart) is read before and
after the run; the idle rate measured before is taken off. Prints microseconds of CPU
per message per broker, the median of ``--runs`` runs, and the end-to-end latency.

    .venv/bin/python benchmarks/request_cpu.py --rate 1000 --rf 1 --duration 8 --runs 3
    .venv/bin/python benchmarks/request_cpu.py --rate 1000 --rf 2
    .venv/bin/python benchmarks/request_cpu.py --checkout ../old     # the code before
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(event loop thread, other threads) CPU seconds of process ``pid`` so far."""
    main = others = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        used = (int(fields[11]) + int(fields[12])) / TICK
        if int(tid) == pid:
            main += used
        else:
            others += used
    return main, others


def one_run(cluster, topic: str, rate: int, seconds: float, rf: int) -> tuple[list, dict]:
    """Per broker (loop us/msg, other threads us/msg), and the end-to-end percentiles."""
    from benchmarks.e2e import counted, percentiles
    from benchmarks.latency import SHIPPED, ConsumerProcess, create_topic, produce

    create_topic(cluster, topic, rf, SHIPPED)
    pids = cluster.broker_pids()
    time.sleep(0.5)
    before = [cpu_seconds(p) for p in pids]
    t0 = time.monotonic()
    time.sleep(2.0)
    idle = [sum(cpu_seconds(p)) - sum(b) for p, b in zip(pids, before, strict=True)]
    idle_s = time.monotonic() - t0
    count = int(rate * seconds)
    with ConsumerProcess(cluster.zk_connect, topic, count) as consumer:
        before = [cpu_seconds(p) for p in pids]
        t0 = time.monotonic()
        produce(cluster.zk_connect, topic, rate, count, 200, 1, 0.0)
        elapsed = time.monotonic() - t0
        after = [cpu_seconds(p) for p in pids]
        _, raw = consumer.result()
    per_broker = []
    for (m0, o0), (m1, o1), quiet in zip(before, after, idle, strict=True):
        idle_part = quiet / idle_s * elapsed / 2  # split evenly: it is small
        per_broker.append(((m1 - m0 - idle_part) / count * 1e6, (o1 - o0 - idle_part) / count * 1e6))
    latencies = array("q")
    latencies.frombytes(raw)
    return per_broker, percentiles(counted(latencies, rate))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="msgs/s (low: one per request)")
    parser.add_argument("--rf", type=int, default=1, help="replication factor (brokers)")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--checkout",
        type=Path,
        default=ROOT,
        help="measure the brokers of another checkout (one that has "
        "benchmarks/latency.py), e.g. the code before a change",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))
    from benchmarks.latency import load_average, start_cluster

    print(f"brokers of {args.checkout.resolve()}")
    print(f"load average at start: {load_average()}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="logferry-request-cpu-") as tmp:
        cluster = start_cluster(Path(tmp), args.rf)
        try:
            for run in range(1, args.runs + 1):
                per_broker, e2e = one_run(cluster, f"cpu-{run}", args.rate, args.duration, args.rf)
                runs.append(per_broker)
                cells = "; ".join(
                    f"broker {i + 1} {m + o:.0f} us (loop {m:.0f}, other threads {o:.0f})"
                    for i, (m, o) in enumerate(per_broker)
                )
                print(
                    f"run {run}: {args.rate:,} msgs/s RF {args.rf}: CPU per message {cells}; "
                    f"end-to-end p50 {e2e['p50']:.2f} p99 {e2e['p99']:.2f} ms",
                    flush=True,
                )
        finally:
            cluster.__exit__(None, None, None)
    for i in range(args.rf):
        loop = statistics.median(r[i][0] for r in runs)
        other = statistics.median(r[i][1] for r in runs)
        print(
            f"median of {args.runs}: broker {i + 1}: {loop + other:.0f} us of CPU per message "
            f"(event loop {loop:.0f}, other threads {other:.0f})"
        )
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

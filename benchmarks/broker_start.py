"""A broker's start, exec'd against forked from a fork server (broker.testing.prefork).

The test suite starts some 370 brokers; since this session each starts from its pytest
worker's fork server instead of a fresh ``python -m broker broker``. This starts
``--runs`` brokers each way, alternated, against one local ZooKeeper (each broker in its
own chroot, with a Kafka listener, as the suite's Kafka tests start them), and prints
per way the median CPU of the broker process once it serves (``/proc/<pid>/stat``) and
the median wall time from the start to its port accepting.

    .venv/bin/python benchmarks/broker_start.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.testing import prefork  # noqa: E402
from broker.testing.localrun import BrokerProcess, free_port  # noqa: E402
from broker.testing.zkserver import LocalZooKeeper  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_one(zk: str, workdir: Path) -> tuple[float, float]:
    """(wall seconds to serving, CPU seconds of the broker by then)."""
    broker = BrokerProcess(1, zk, workdir, kafka={"listen": "127.0.0.1:0"})
    started = time.monotonic()
    broker.start()
    wall = time.monotonic() - started
    assert broker.proc is not None
    cpu = cpu_seconds(broker.proc.pid)
    broker.stop()
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="brokers started each way (default 10)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="broker-start-"))
    port = free_port()
    zookeeper = LocalZooKeeper(base / "zookeeper", port)
    zookeeper.start()
    server = prefork.ForkServer(base / "prefork")
    figures: dict[str, list[tuple[float, float]]] = {"exec": [], "fork": []}
    try:
        for run in range(args.runs):
            for way in ("exec", "fork"):
                prefork.install(server if way == "fork" else None)
                zk = f"127.0.0.1:{port}/{way}-{run}"
                figures[way].append(start_one(zk, base / f"{way}-{run}"))
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    finally:
        prefork.install(None)
        server.stop()
        zookeeper.stop()
    print(f"{'way':<6} {'CPU to serving (median)':>24} {'wall to serving (median)':>25}")
    for way, runs in figures.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{way:<6} {cpu:>22.3f} s {wall:>23.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

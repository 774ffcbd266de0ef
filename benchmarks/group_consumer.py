"""Consumer-group figures: throughput with 1, 2 and 3 members, and rebalance time.

Everything runs on this machine: ZooKeeper and one broker as separate processes (the
harness), each group member as its own process (this script with ``--member``),
driven over its stdin/stdout. Messages are 200 bytes, produced in batches of 50 to
one topic of 12 partitions before the throughput runs.

Throughput. For k = 1, 2, 3 members of a fresh group (start=earliest): the members
join, and once ZooKeeper shows all 12 partitions owned by k members, all are told to
go and iterate with ``for msg in consumer``. The figure is the rate between 10 % and
90 % of the backlog (summed member counts sampled every 10 ms), which leaves out the
batches fetched before the start signal; "overall" is start signal to last message
(up to 60 ms late: members publish exact counts after 50 ms without a message).

Rebalance time. A group of two members reads a topic that a producer feeds at about
5,000 messages/s (or nothing, with ``--idle``). A third member joins, then leaves
(``close()``), ``--rebalances`` times each. Measured from the join (or close) command
to the moment ZooKeeper shows every partition owned by the member the range
assignment gives it (polled every 5 ms); the members' own ``last_rebalance_ms``
(first watch event to STABLE) is printed alongside. Medians of the runs.

    .venv/bin/python benchmarks/group_consumer.py
    .venv/bin/python benchmarks/group_consumer.py --messages 1000000 --runs 5 --rebalances 9
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VALUE = b"x" * 200
PARTITIONS = 12


# -- the member process ------------------------------------------------------------------------


def member_main(args: argparse.Namespace) -> int:
    """Commands on stdin (join, go, status, close); JSON lines on stdout."""
    from broker.client import GroupConsumer

    out_lock = threading.Lock()

    def say(**fields) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(fields) + "\n")
            sys.stdout.flush()

    consumer = None
    go = threading.Event()
    closing = threading.Event()
    counter = {"n": 0}

    def consume() -> None:
        go.wait()
        n = 0
        while not closing.is_set():
            for _ in consumer:  # type: ignore[union-attr]
                n += 1
                if not n & 255:
                    counter["n"] = n
            counter["n"] = n  # idle for 50 ms (iter_timeout): publish the exact count

    def report() -> None:
        go.wait()
        while True:
            say(count=counter["n"])
            time.sleep(0.01)

    for line in sys.stdin:
        command = line.strip()
        if command == "join":
            consumer = GroupConsumer(args.group, [args.topic], zk=args.zk, consumer_id=args.name, iter_timeout=0.05)
            threading.Thread(target=consume, daemon=True).start()
            if args.report:
                threading.Thread(target=report, daemon=True).start()
            say(joined=True)
        elif command == "go":
            go.set()
        elif command == "status":
            m = consumer.metrics() if consumer is not None else {}
            say(
                status=True,
                state=m.get("state"),
                owned=len(m.get("partitions", {})),
                count=counter["n"],
                last_rebalance_ms=m.get("last_rebalance_ms"),
            )
        elif command == "close":
            closing.set()
            if consumer is not None:
                consumer.close()
            say(closed=True, count=counter["n"])
            return 0
    return 0


class Member:
    """A member process seen from the driver."""

    def __init__(self, zk: str, group: str, topic: str, name: str, report: bool, workdir: Path):
        self.name = name
        log = (workdir / f"member-{name}.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--member", "--zk", zk, "--group", group, "--topic", topic, "--name", name]
            + (["--report"] if report else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=str(ROOT),
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        log.close()
        self.count = 0
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if set(msg) == {"count"}:
                self.count = msg["count"]
            else:
                self.replies.put(msg)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str, timeout: float = 30.0) -> dict:
        self.send(command)
        try:
            return self.replies.get(timeout=timeout)
        except queue.Empty:
            raise SystemExit(f"member {self.name} did not answer {command!r}") from None

    def close(self) -> dict:
        reply = self.ask("close")
        self.proc.wait(30)
        return reply


# -- the driver ----------------------------------------------------------------------------------


def wait_owned(client, group: str, topic: str, expected: dict[int, str], timeout: float = 60.0) -> float:
    """Poll the owner znodes until they are exactly ``expected``; returns the time seen."""
    from broker.client.group.offsets import read_owners

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owners = read_owners(client, group, [topic])
        if {p: o for (_, p), o in owners.items()} == expected:
            return time.monotonic()
        time.sleep(0.005)
    raise SystemExit(f"ownership never became {expected}")


def expected_owners(members: list[str], topic: str) -> dict[int, str]:
    from broker.client.group.assignment import range_assign

    result = range_assign({topic: range(PARTITIONS)}, {m: {topic: 1} for m in members})
    return {p: thread[0] for (_, p), thread in result.items()}


def produce_backlog(zk: str, topic: str, n: int) -> float:
    from broker.client import Producer

    chunk = [VALUE] * 50
    started = time.perf_counter()
    with Producer(zk=zk, linger_ms=5, buffer_bytes=256 << 20) as producer:
        for i in range(n // 50):
            producer.send(topic, chunk, partition=i % PARTITIONS)
        producer.flush()
    return time.perf_counter() - started


def throughput_run(zk: str, client, workdir: Path, k: int, run: int, n: int) -> tuple[float, float]:
    group = f"tp{k}-{run}"
    names = [f"m{i}" for i in range(k)]
    members = [Member(zk, group, "bench", name, True, workdir) for name in names]
    try:
        for m in members:
            m.ask("join")
        wait_owned(client, group, "bench", expected_owners(names, "bench"))
        go = time.monotonic()
        for m in members:
            m.send("go")
        samples: list[tuple[float, int]] = []
        deadline = go + 600
        while time.monotonic() < deadline:
            total = sum(m.count for m in members)
            samples.append((time.monotonic(), total))
            if total >= n:
                break
            time.sleep(0.01)
        else:
            raise SystemExit(f"{k} member(s) consumed only {samples[-1][1]} of {n}")
    finally:
        for m in members:
            m.close()

    def crossing(x: float) -> float:
        for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
            if c1 >= x:
                return t0 + (t1 - t0) * ((x - c0) / (c1 - c0) if c1 > c0 else 1.0)
        return samples[-1][0]

    steady = 0.8 * n / (crossing(0.9 * n) - crossing(0.1 * n))
    overall = n / (samples[-1][0] - go)
    return steady, overall


def rebalance_runs(zk: str, client, workdir: Path, runs: int, idle: bool) -> dict[str, list[float]]:
    from broker.client import Admin, Producer

    topic = "rb-idle" if idle else "rb-load"
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, PARTITIONS)
    stop = threading.Event()

    def feed() -> None:
        with Producer(zk=zk, linger_ms=5) as producer:
            while not stop.is_set():
                for p in range(PARTITIONS):
                    producer.send(topic, [VALUE] * 4, partition=p)
                time.sleep(0.01)  # ~12 * 4 / 10 ms = 4,800 msgs/s

    feeder = threading.Thread(target=feed, daemon=True)
    if not idle:
        feeder.start()
    group = f"rb-{topic}"
    base = [Member(zk, group, topic, name, False, workdir) for name in ("a", "b")]
    results: dict[str, list[float]] = {"join": [], "leave": [], "join (member's view)": [], "leave (members' view)": []}
    try:
        for m in base:
            m.ask("join")
            m.send("go")
        wait_owned(client, group, topic, expected_owners(["a", "b"], topic))
        time.sleep(0.5)
        for run in range(runs):
            extra = Member(zk, group, topic, "c", False, workdir)
            time.sleep(0.5)  # interpreter start-up is not part of the rebalance
            t0 = time.monotonic()
            extra.ask("join")
            extra.send("go")
            t1 = wait_owned(client, group, topic, expected_owners(["a", "b", "c"], topic))
            results["join"].append((t1 - t0) * 1000)
            time.sleep(0.3)
            views = [m.ask("status")["last_rebalance_ms"] or 0 for m in (*base, extra)]
            results["join (member's view)"].append(max(views))
            time.sleep(0.5)
            t0 = time.monotonic()
            extra.send("close")
            t1 = wait_owned(client, group, topic, expected_owners(["a", "b"], topic))
            results["leave"].append((t1 - t0) * 1000)
            extra.replies.get(timeout=30)
            extra.proc.wait(30)
            time.sleep(0.3)
            views = [m.ask("status")["last_rebalance_ms"] or 0 for m in base]
            results["leave (members' view)"].append(max(views))
            print(
                f"  {'idle' if idle else 'load'} run {run + 1}: join {results['join'][-1]:.0f} ms, "
                f"leave {results['leave'][-1]:.0f} ms",
                flush=True,
            )
            time.sleep(0.5)
    finally:
        stop.set()
        for m in base:
            m.close()
        if feeder.is_alive():
            feeder.join(10)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600_000, help="backlog for throughput runs")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per member count")
    parser.add_argument("--rebalances", type=int, default=5, help="joins and leaves per mode")
    parser.add_argument("--members", default="1,2,3", help="member counts to measure")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-rebalance", action="store_true")
    # member mode (internal)
    parser.add_argument("--member", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--zk", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.member:
        return member_main(args)

    import logging

    from benchmarks.harness import LocalCluster
    from broker.client import Admin
    from broker.coordination import zk as zkmod

    logging.basicConfig(level=logging.WARNING)
    n = args.messages - args.messages % 50
    counts = [int(k) for k in args.members.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="logferry-groupbench-") as tmp,
        LocalCluster(Path(tmp), log={"flush_messages": 50000, "flush_ms": 200}) as cluster,
    ):
        workdir = Path(tmp)
        zk = cluster.zk_connect
        client = zkmod.connect(zk, create=False)
        print(
            f"broker {cluster.bootstrap[0]}, ZooKeeper {zk}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        try:
            throughput: dict[int, list[tuple[float, float]]] = {}
            if not args.skip_throughput:
                with Admin(zk=zk) as admin:
                    admin.create_topic("bench", PARTITIONS)
                seconds = produce_backlog(zk, "bench", n)
                print(
                    f"backlog: {n:,} messages of {len(VALUE)} bytes in {PARTITIONS} partitions "
                    f"({n / seconds:,.0f} msgs/s produced)",
                    flush=True,
                )
                time.sleep(1.0)  # let the last flush land
                for k in counts:
                    for run in range(args.runs):
                        steady, overall = throughput_run(zk, client, workdir, k, run, n)
                        throughput.setdefault(k, []).append((steady, overall))
                        print(
                            f"  {k} member(s) run {run + 1}: {steady:,.0f} msgs/s steady, {overall:,.0f} overall",
                            flush=True,
                        )
            rebalance: dict[str, dict[str, list[float]]] = {}
            if not args.skip_rebalance:
                rebalance["under load"] = rebalance_runs(zk, client, workdir, args.rebalances, idle=False)
                rebalance["idle"] = rebalance_runs(zk, client, workdir, args.rebalances, idle=True)
        finally:
            zkmod.close(client)
    print()
    if throughput:
        print(f"{'members':<8} {'msgs/s (steady)':>16} {'MB/s':>7} {'msgs/s (overall)':>17}   median of {args.runs}")
        for k, values in throughput.items():
            steady = statistics.median(v[0] for v in values)
            overall = statistics.median(v[1] for v in values)
            print(f"{k:<8} {steady:>16,.0f} {steady * len(VALUE) / 1e6:>7.1f} {overall:>17,.0f}")
        print()
    for mode, results in rebalance.items():
        print(f"rebalance, {mode} (ms, median of {args.rebalances}; min-max)")
        for case, values in results.items():
            if values:
                print(f"  {case:<24} {statistics.median(values):>7.0f}   ({min(values):.0f}-{max(values):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

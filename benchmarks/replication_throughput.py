"""Producer throughput without replication, with 3x asynchronous and 3x synchronous replication.

The cases of LinkedIn's 2014 Kafka benchmark ("single producer thread, no replication /
3x asynchronous replication / 3x synchronous replication"), in one run on one 3-broker
cluster on this machine (ZooKeeper and the brokers are separate processes on 127.0.0.1;
the producer is this process):

(a) replication factor 1, acks=1;
(b) replication factor 3, acks=1 (the leader acknowledges, followers copy behind it);
(c) replication factor 3, acks="all" with min_insync_replicas 2 (every in-sync replica
    has the batch before it is acknowledged).

Each case and run gets a fresh topic of ``--partitions`` partitions. One Producer
thread sends ``--messages`` values of ``--size`` bytes as lists of ``--batch``
(``producer.send(topic, values)``, partitions round robin), timed from the first send
until ``flush()`` returns. Prints msgs/s and MB/s (payload bytes) per case, the median
of ``--runs`` runs, and the ratio of each case to (a).

After every acks=all run it checks that the replication is real: once the followers
caught up (bounded wait), each partition's segment files are read on each of its
replicas' log dirs and must be byte-identical. In the first run the acks=all topic is
also read back with a SimpleConsumer and must hold exactly ``--messages`` messages.
The exit code is 1 if a check fails. The machine may be shared: the load average is
printed at the start and the end, and figures are provisional.

    .venv/bin/python benchmarks/replication_throughput.py --runs 3
    .venv/bin/python benchmarks/replication_throughput.py --messages 20000 --runs 1
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer  # noqa: E402
from broker.testing.localrun import BrokerProcess  # noqa: E402

# (label, replication factor, acks, min_insync_replicas)
CASES = (
    ("(a) RF 1, acks=1", 1, 1, 1),
    ("(b) RF 3, acks=1", 3, 1, 1),
    ("(c) RF 3, acks=all", 3, "all", 2),
)
LEGEND = {
    "(a) RF 1, acks=1": "no replication",
    "(b) RF 3, acks=1": "3x asynchronous replication",
    "(c) RF 3, acks=all": "3x synchronous replication",
}


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # metadata not there yet, a broker still electing: poll again
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f}s")
        time.sleep(0.05)


def create_topic(cluster: LocalCluster, topic: str, partitions: int, rf: int, min_isr: int) -> dict[int, list[int]]:
    """Create the topic and wait (untimed) until every partition has a leader and a full ISR."""
    with Admin(zk=cluster.zk_connect) as admin:
        replicas = admin.create_topic(topic, partitions, replication_factor=rf, min_insync_replicas=min_isr)

        def ready() -> bool:
            info = admin.describe_partitions(topic)
            return len(info) == partitions and all(
                i.leader >= 0 and len(i.replicas) == rf and not i.under_replicated for i in info.values()
            )

        wait_until(ready, 30, f"leaders and full ISR for {topic}")
    return replicas


def produce(cluster: LocalCluster, topic: str, n: int, value: bytes, per_send: int, acks: int | str) -> float:
    """One producer thread sends ``n`` values in lists of ``per_send``; seconds to flush()."""
    chunk = [value] * per_send
    with Producer(zk=cluster.zk_connect, acks=acks, linger_ms=5, buffer_bytes=256 << 20) as producer:
        producer.partitions(topic)  # metadata before the clock starts
        t0 = time.perf_counter()
        send = producer.send
        for _ in range(n // per_send):
            send(topic, chunk)
        if n % per_send:
            send(topic, chunk[: n % per_send])
        producer.flush(timeout=600)
        seconds = time.perf_counter() - t0
        stats = producer.metrics()
    if stats["messages_failed"] or stats["messages_acked"] != n:
        raise RuntimeError(
            f"{topic}: {stats['messages_acked']:,} of {n:,} messages acknowledged, {stats['messages_failed']:,} failed"
        )
    return seconds


def replica_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """A partition's segment files on one broker, concatenated in name (= offset) order."""
    directory = broker.log_dir / f"{topic}-{partition}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def replica_size(broker: BrokerProcess, topic: str, partition: int) -> int:
    directory = broker.log_dir / f"{topic}-{partition}"
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def check_replicas(
    cluster: LocalCluster, topic: str, replicas: dict[int, list[int]], timeout: float
) -> tuple[bool, str]:
    """Wait (bounded) until every replica of every partition holds the same bytes."""
    by_id = {b.id: b for b in cluster.brokers}
    deadline = time.monotonic() + timeout
    problems = []
    total = 0
    for p, ids in sorted(replicas.items()):
        holders = [by_id[i] for i in ids]
        while True:
            sizes = {replica_size(b, topic, p) for b in holders}
            if len(sizes) == 1 and sizes != {0}:
                logs = {replica_bytes(b, topic, p) for b in holders}
                if len(logs) == 1:
                    total += sizes.pop()
                    break
            if time.monotonic() > deadline:
                problems.append(
                    f"partition {p}: sizes "
                    + ", ".join(f"broker {b.id} {replica_size(b, topic, p):,}" for b in holders)
                )
                break
            time.sleep(0.1)
    if problems:
        return False, "; ".join(problems)
    count = len(next(iter(replicas.values())))
    return True, (f"{len(replicas)} partitions x {count} replicas, {total / 1e6:.1f} MB of log on each replica")


def count_messages(
    cluster: LocalCluster, topic: str, partitions: dict[int, list[int]], sizes: dict[int, int], timeout: float
) -> int:
    """Read every partition back from the start and count its messages."""
    count = 0
    with SimpleConsumer(zk=cluster.zk_connect, max_bytes=4 << 20) as consumer:
        for p in sorted(partitions):
            # the visible end (flushed and high watermark) reaches the log's end shortly
            wait_until(
                lambda p=p: consumer.offsets(topic, p).end >= sizes[p],
                timeout,
                f"visible end {sizes[p]:,} of {topic}-{p}",
            )
            for _ in consumer.messages(topic, p, "earliest"):
                count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 3M: at 500,000 a case took 0.2 s here, short enough that the producer finished
    # before the followers had copied much, which made replication look free.
    parser.add_argument("--messages", type=int, default=3_000_000, help="messages per case and run")
    parser.add_argument("--runs", type=int, default=3, help="runs per case; figures are medians")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of each topic")
    parser.add_argument("--size", type=int, default=100, help="bytes per message value")
    parser.add_argument("--batch", type=int, default=500, help="values per send() call")
    parser.add_argument(
        "--replica-wait", type=float, default=60.0, help="seconds to wait for followers to catch up before comparing"
    )
    args = parser.parse_args()
    n, value = args.messages, b"x" * args.size
    logging.basicConfig(level=logging.WARNING)
    # SIGTERM unwinds like Ctrl-C: the cluster is stopped and the work dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    print(f"load average at start: {load_average()}", flush=True)
    results: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    checks_ok = True
    broker_settings = {"num_partitions": args.partitions, "default_replication_factor": 1, "zk_session_timeout_s": 10}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="logferry-repl-bench-") as tmp,
            LocalCluster(Path(tmp), brokers=3, broker=broker_settings) as cluster,
        ):
            print(
                f"3 brokers on {', '.join(cluster.bootstrap)}; {n:,} messages of "
                f"{args.size} bytes in lists of {args.batch}, {args.partitions} partitions, "
                f"{args.runs} run(s)",
                flush=True,
            )
            # warm up (untimed): connections, page cache, the followers' fetch loops
            create_topic(cluster, "warmup", args.partitions, 3, 2)
            produce(cluster, "warmup", min(n, 50_000), value, args.batch, "all")
            for run in range(args.runs):
                for label, rf, acks, min_isr in CASES:
                    topic = f"bench-rf{rf}-acks{acks}-run{run + 1}"
                    replicas = create_topic(cluster, topic, args.partitions, rf, min_isr)
                    seconds = produce(cluster, topic, n, value, args.batch, acks)
                    results[label].append(seconds)
                    print(
                        f"  run {run + 1}: {label:<20} {n / seconds:>10,.0f} msgs/s "
                        f"{n * args.size / seconds / 1e6:>7.1f} MB/s  ({seconds:.2f} s)",
                        flush=True,
                    )
                    if acks != "all":
                        continue
                    same, detail = check_replicas(cluster, topic, replicas, args.replica_wait)
                    checks_ok &= same
                    print(f"         replicas identical: {'yes' if same else 'no'} ({detail})", flush=True)
                    if run == 0 and same:
                        by_id = {b.id: b for b in cluster.brokers}
                        sizes = {p: replica_size(by_id[ids[0]], topic, p) for p, ids in replicas.items()}
                        got = count_messages(cluster, topic, replicas, sizes, args.replica_wait)
                        checks_ok &= got == n
                        print(
                            f"         read back with SimpleConsumer: {got:,} of {n:,} "
                            f"messages ({'ok' if got == n else 'MISMATCH'})",
                            flush=True,
                        )
    except KeyboardInterrupt:
        print("interrupted; cluster stopped", file=sys.stderr)
        return 130

    base = statistics.median(results[CASES[0][0]])
    print()
    print(f"{'case':<20} {'':<28} {'msgs/s':>10} {'MB/s':>7} {'vs (a)':>7}   (median of {args.runs})")
    for label, times in results.items():
        median = statistics.median(times)
        print(
            f"{label:<20} {LEGEND[label]:<28} {n / median:>10,.0f} "
            f"{n * args.size / median / 1e6:>7.1f} {base / median:>7.2f}"
        )
    print(f"checks: {'passed' if checks_ok else 'FAILED'}")
    print(f"load average at end: {load_average()}")
    return 0 if checks_ok else 1


if __name__ == "__main__":
    sys.exit(main())

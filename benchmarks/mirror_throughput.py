"""Mirror throughput between two clusters vs a plain consumer reading the same topic.

Two throwaway clusters on this machine (each its own ZooKeeper and one broker, all on
127.0.0.1). A topic of ``--partitions`` partitions is filled on the source with
``--messages`` messages of ``--size`` bytes in producer batches of ``--batch``; then,
in the same run:

1. plain consumer: one ``SimpleConsumer`` reads every partition from the start to the
   end, decoding every message (``messages_of``) as an application would;
2. mirror: a :class:`mirror.core.Mirror` (in this process, its own thread, fresh
   group) copies the topic to the target; timed from the start of its loop (group
   already joined) until the target's ends equal the source's.

Figures are messages/s and MB/s of stored batch bytes; the mirror's rate is also
given as a percentage of the consumer's (target: >= 80 %). The machine is shared, so
figures are provisional; ``--runs`` repeats both and prints the medians.

    .venv/bin/python benchmarks/mirror_throughput.py
    .venv/bin/python benchmarks/mirror_throughput.py --messages 2000000 --runs 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer, messages_of  # noqa: E402
from mirror.config import MirrorConfig  # noqa: E402
from mirror.core import Mirror  # noqa: E402

TOPIC = "bench-mirror"


def fill(zk: str, messages: int, size: int, batch: int, partitions: int) -> None:
    """Create the topic and produce the backlog (untimed)."""
    with Admin(zk=zk) as admin:
        admin.create_topic(TOPIC, partitions=partitions)
    value = b"x" * size
    with Producer(zk=zk, linger_ms=5, batch_messages=batch, batch_bytes=batch * size + 1) as producer:
        for i in range(0, messages, batch):
            producer.send(TOPIC, [value] * min(batch, messages - i), partition=(i // batch) % partitions)
        producer.flush()


def ends(consumer: SimpleConsumer) -> dict[int, int]:
    return {p: consumer.offsets(TOPIC, p).end for p in consumer.partitions(TOPIC)}


def plain_consumer(zk: str) -> tuple[float, int, int]:
    """Seconds, messages, bytes for one consumer reading everything once."""
    with SimpleConsumer(zk=zk, max_bytes=4 * 1024 * 1024) as consumer:
        targets = ends(consumer)
        count = nbytes = 0
        start = time.perf_counter()
        for p, end in targets.items():
            offset = 0
            while offset < end:
                result = consumer.fetch(TOPIC, p, offset)
                for batch in result.batches:
                    for _ in messages_of(TOPIC, p, batch):
                        count += 1
                nbytes += result.next_offset - offset
                offset = result.next_offset
        return time.perf_counter() - start, count, nbytes


def mirror_once(source_zk: str, target_zk: str, run: int) -> tuple[float, int, int]:
    """Seconds, messages, bytes for the mirror copying the whole topic to the target."""
    config = MirrorConfig(source_zk=source_zk, target_zk=target_zk, group=f"bench-{run}",
                          topics=(TOPIC,), commit_interval_ms=1000)
    with SimpleConsumer(zk=source_zk) as source:
        wanted = ends(source)
    # a fresh target topic per run: the target's ends then measure this run's copy
    mirror = Mirror(config)
    mirror.start()
    thread = threading.Thread(target=mirror.run, name="bench-mirror")
    start = time.perf_counter()
    thread.start()
    with SimpleConsumer(zk=target_zk) as target:
        while True:
            try:
                if ends(target) == wanted:
                    break
            except Exception:
                pass  # the target topic is not created yet
            time.sleep(0.01)
    elapsed = time.perf_counter() - start
    messages = int(sum(mirror.metrics.messages.values()))
    mirror.stop()
    thread.join(60)
    return elapsed, messages, sum(wanted.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="logferry-mirror-bench-") as tmp:
        base = Path(tmp)
        log_settings = {"flush_messages": 100_000, "flush_ms": 50}
        with LocalCluster(base / "source", chroot="/live", log=log_settings) as source, \
                LocalCluster(base / "target", chroot="/analysis", log=log_settings) as target:
            fill(source.zk_connect, args.messages, args.size, args.batch, args.partitions)
            consumer_rates, mirror_rates = [], []
            for run in range(args.runs):
                if run:
                    with Admin(zk=target.zk_connect) as admin:
                        admin.delete_topic(TOPIC)
                seconds, count, nbytes = plain_consumer(source.zk_connect)
                consumer_rates.append((count / seconds, nbytes / seconds / 1e6))
                print(f"run {run + 1}: plain consumer {count:,} msgs in {seconds:.2f}s: "
                      f"{count / seconds:,.0f} msgs/s, {nbytes / seconds / 1e6:.1f} MB/s", flush=True)
                seconds, count, nbytes = mirror_once(source.zk_connect, target.zk_connect, run)
                mirror_rates.append((count / seconds, nbytes / seconds / 1e6))
                print(f"run {run + 1}: mirror         {count:,} msgs in {seconds:.2f}s: "
                      f"{count / seconds:,.0f} msgs/s, {nbytes / seconds / 1e6:.1f} MB/s", flush=True)
    c_msgs = statistics.median(r[0] for r in consumer_rates)
    c_mb = statistics.median(r[1] for r in consumer_rates)
    m_msgs = statistics.median(r[0] for r in mirror_rates)
    m_mb = statistics.median(r[1] for r in mirror_rates)
    print(f"\n{args.messages:,} messages of {args.size} B, batches of {args.batch}, "
          f"{args.partitions} partitions, median of {args.runs} run(s) (shared machine: provisional)")
    print(f"plain consumer: {c_msgs:>12,.0f} msgs/s {c_mb:8.1f} MB/s")
    print(f"mirror:         {m_msgs:>12,.0f} msgs/s {m_mb:8.1f} MB/s  "
          f"= {100 * m_msgs / c_msgs:.0f}% of the consumer (target >= 80%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end and produce-acknowledgement latency at fixed rates, like the OpenMessaging
Benchmark reports it.

A cluster of ZooKeeper and ``max(--rf)`` broker processes on 127.0.0.1, configured as
``etc/live/broker-N.toml`` ship (only ports, directories and the metrics port
changed). For every case (rate x acks x replication factor) and run, a fresh topic of
one partition; a consumer in its own process (a ``SimpleConsumer`` following the
partition: a thread in the producer's process would share its GIL and measure that)
and a producer in this process, which sends ``--size``-byte messages one ``send()``
each at ``--rate`` msgs/s for ``--duration`` seconds. Each message carries its send
time from ``time.monotonic_ns()``: CLOCK_MONOTONIC is one clock for the whole machine
on Linux, so the consumer's receive time minus it is the end-to-end latency. The
produce-acknowledgement latency is the time from ``send()`` to its delivery future
resolving. The first second of every run is a warm-up and is not counted.

Prints p50, p99, p99.9 and max (ms) of both, per case, the median of ``--runs`` runs.
The machine may be shared: the load average is printed at the start and the end.

    .venv/bin/python benchmarks/latency.py                       # 1,000 and 10,000 msgs/s
    .venv/bin/python benchmarks/latency.py --rates 1000 --acks 1 --rf 1 --duration 5 --runs 1
    .venv/bin/python benchmarks/latency.py --rates 1000 --acks 1 --rf 1 --preload 300000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import tomllib
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.e2e import (  # noqa: E402
    PERCENTILES,
    STAMP,
    WARMUP_S,
    LatencyRecorder,
    StampedMessages,
    counted,
    percentiles,
)
from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer  # noqa: E402
from broker.testing.localrun import BrokerProcess  # noqa: E402

# Keys of etc/live/broker-N.toml that name this deployment's ports and places.
LOCAL_KEYS = {"id", "host", "port", "log_dirs", "zk_connect", "metrics_port"}


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def shipped_config(broker_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The [broker] and [log] tables of etc/live/broker-<id>.toml, minus ports and dirs."""
    with open(ROOT / "etc" / "live" / f"broker-{broker_id}.toml", "rb") as f:
        config = tomllib.load(f)
    broker = {k: v for k, v in config["broker"].items() if k not in LOCAL_KEYS}
    return {**broker, "metrics_port": 0}, dict(config.get("log", {}))


def start_cluster(workdir: Path, brokers: int) -> LocalCluster:
    """ZooKeeper plus ``brokers`` brokers, each with its shipped config."""
    cluster = LocalCluster(workdir, brokers=0)
    for i in range(1, brokers + 1):
        broker, log = shipped_config(i)
        cluster.brokers.append(BrokerProcess(i, cluster.zk_connect, workdir, broker=broker, log=log))
    return cluster.__enter__()


def create_topic(cluster: LocalCluster, topic: str, rf: int, visibility: str) -> None:
    """One partition with ``rf`` replicas and the ``visibility`` topic setting (unset:
    the broker's own); waits until it has a leader and a full ISR."""
    config = {} if visibility == SHIPPED else {"visibility": visibility}
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 1, replication_factor=rf, min_insync_replicas=1, config=config)
        deadline = time.monotonic() + 30
        while True:
            try:
                info = admin.describe_partitions(topic).get(0)
                if info is not None and info.leader >= 0 and not info.under_replicated:
                    return
            except Exception:  # metadata not there yet: poll again
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: no leader with a full ISR within 30s")
            time.sleep(0.05)


def consume(zk: str, topic: str, count: int, ready: Any, out: Any) -> None:
    """The consumer process: receive ``count`` messages from the partition's visible end
    (after any preloaded ones), send back their latencies (ns)."""
    recorder = LatencyRecorder(count)
    with SimpleConsumer(zk=zk, max_wait_ms=500) as consumer:
        start = consumer.offsets(topic, 0).end  # connected, metadata known
        ready.set()
        for message in consumer.messages(topic, 0, start, follow=True, limit=count, timeout=30):
            recorder.record(message.value)
    out.send((recorder.seen, recorder.latencies.tobytes()))


def preload(zk: str, topic: str, count: int, size: int, batch_messages: int = 1) -> None:
    """Fill the partition with ``count`` unstamped ``size``-byte messages as fast as
    they go, ``batch_messages`` per batch, before a run: latency must not grow with the
    data a broker holds (issue 18), and a fresh topic per run would hide it if it did."""
    value = b"p" * size
    with Producer(zk=zk, acks=1, batch_messages=batch_messages, linger_ms=0) as producer:
        producer.partitions(topic)
        for _ in range(count):
            producer.send(topic, value, partition=0)
        producer.flush(timeout=300)


def produce(zk: str, topic: str, rate: int, count: int, size: int, acks: int | str, linger_ms: float) -> array:
    """Send ``count`` messages at ``rate`` msgs/s; the acknowledgement latency of each."""
    acked = array("q", bytes(8 * count))
    clock = time.monotonic_ns
    with Producer(zk=zk, acks=acks, linger_ms=linger_ms) as producer:
        producer.partitions(topic)
        send = producer.send
        for seq, sent, value in StampedMessages(rate, count, size):
            future = send(topic, value, partition=0)
            future.add_callback(lambda f, seq=seq, sent=sent: acked.__setitem__(seq, clock() - sent))
        producer.flush(timeout=120)
        stats = producer.metrics()
    if stats["messages_failed"] or stats["messages_acked"] != count:
        raise RuntimeError(
            f"{topic}: {stats['messages_acked']:,} of {count:,} messages "
            f"acknowledged, {stats['messages_failed']:,} failed"
        )
    return acked


class ConsumerProcess:
    """The measuring consumer (:func:`consume`) in its own process, started on entry and
    ready to receive ``count`` messages; :meth:`result` waits for what it saw."""

    def __init__(self, zk: str, topic: str, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._ready = ctx.Event()
        self._receive, send = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=consume, args=(zk, topic, count, self._ready, send), daemon=True)

    def __enter__(self) -> ConsumerProcess:
        self._process.start()
        if not self._ready.wait(60):
            self.__exit__()
            raise TimeoutError("the consumer process did not start within 60s")
        return self

    def result(self) -> tuple[int, bytes]:
        """(messages seen, their end-to-end latencies as packed int64 ns)."""
        if not self._receive.poll(120):
            raise TimeoutError("the consumer did not receive every message within 120s")
        return self._receive.recv()

    def __exit__(self, *exc: object) -> None:
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def run_case(
    cluster: LocalCluster, topic: str, rate: int, acks: int | str, rf: int, visibility: str, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, float]]:
    """One run of one case: (end-to-end percentiles, acknowledgement percentiles)."""
    create_topic(cluster, topic, rf, visibility)
    if args.preload:
        preload(cluster.zk_connect, topic, args.preload, args.size, args.preload_batch)
    count = int(rate * args.duration)
    with ConsumerProcess(cluster.zk_connect, topic, count) as consumer:
        acked = produce(cluster.zk_connect, topic, rate, count, args.size, acks, args.linger_ms)
        seen, raw = consumer.result()
    if seen != count:
        raise RuntimeError(f"{topic}: the consumer received {seen:,} of {count:,} messages")
    end_to_end = array("q")
    end_to_end.frombytes(raw)
    return percentiles(counted(end_to_end, rate)), percentiles(counted(acked, rate))


SHIPPED = "shipped"
"""``--visibility`` for the broker's own setting (etc/live/broker-N.toml's)."""


def label(rate: int, acks: int | str, rf: int, visibility: str = SHIPPED) -> str:
    shown = "" if visibility == SHIPPED else f" {visibility}"
    return f"{rate:>6,} msgs/s acks={acks:<3} RF {rf}{shown}"


def row(name: str, e2e: dict[str, float], ack: dict[str, float]) -> str:
    cells = [f"{e2e[p]:8.2f}" for p, _ in PERCENTILES] + [f"{ack[p]:8.2f}" for p, _ in PERCENTILES]
    return f"{name:<36} |" + "".join(cells[:4]) + " |" + "".join(cells[4:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000", help="msgs/s, comma separated")
    parser.add_argument("--acks", default="1,all", help="1 and/or all, comma separated")
    parser.add_argument("--rf", default="1,2", help="replication factors, comma separated")
    parser.add_argument("--size", type=int, default=200, help="message bytes (>= 16)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=0.0, help="the producer's linger_ms (0: send at once)")
    parser.add_argument(
        "--preload",
        type=int,
        default=0,
        help="messages to put in each run's topic before measuring (latency "
        "must not grow with the data the broker holds)",
    )
    parser.add_argument(
        "--visibility",
        default=SHIPPED,
        help="the topics' visibility setting, comma separated: shipped (the "
        "broker's, as etc/ ships it), flushed and/or written",
    )
    parser.add_argument(
        "--preload-batch", type=int, default=1, help="messages per batch when preloading (1: the most batches)"
    )
    args = parser.parse_args()
    if args.size < STAMP.size:
        parser.error(f"--size must be at least {STAMP.size}")
    if args.duration <= WARMUP_S:
        parser.error(f"--duration must exceed the {WARMUP_S:g}s warm-up")
    rates = [int(r) for r in args.rates.split(",")]
    acks_list: list[int | str] = ["all" if a == "all" else int(a) for a in args.acks.split(",")]
    rfs = [int(r) for r in args.rf.split(",")]
    visibilities = args.visibility.split(",")
    for visibility in visibilities:
        if visibility not in (SHIPPED, "flushed", "written"):
            parser.error(f"--visibility {visibility!r}: use shipped, flushed or written")
    cases = [
        (rate, acks, rf, v)
        for rf in rfs
        for acks in acks_list
        for rate in rates
        for v in visibilities
        if not (acks == "all" and rf == 1 and 1 in acks_list)
    ]  # same as acks=1 there
    print(f"load average at start: {load_average()}")
    print(
        f"{args.size}-byte messages, {args.duration:g}s per run ({WARMUP_S:g}s warm-up), "
        f"linger_ms={args.linger_ms:g}, {args.preload:,} messages preloaded, brokers as etc/live/broker-N.toml ship"
    )
    results: dict[tuple, list[tuple[dict[str, float], dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="logferry-latency-") as tmp:
        cluster = start_cluster(Path(tmp), max(rfs))
        try:
            for run in range(1, args.runs + 1):
                for n, (rate, acks, rf, visibility) in enumerate(cases):
                    topic = f"latency-{run}-{n}"
                    e2e, ack = run_case(cluster, topic, rate, acks, rf, visibility, args)
                    results.setdefault((rate, acks, rf, visibility), []).append((e2e, ack))
                    print(
                        f"run {run}: {label(rate, acks, rf, visibility)}  end-to-end p50 "
                        f"{e2e['p50']:.2f} p99 {e2e['p99']:.2f} p99.9 {e2e['p99.9']:.2f} "
                        f"max {e2e['max']:.2f} ms; ack p50 {ack['p50']:.2f} p99 "
                        f"{ack['p99']:.2f} ms",
                        flush=True,
                    )
        finally:
            cluster.__exit__(None, None, None)
    print(f"\nmedian of {args.runs} runs, ms     |{'end to end':^32} |{'produce acknowledgement':^32}")
    print(
        f"{'case':<36} |"
        + "".join(f"{p:>8}" for p, _ in PERCENTILES) * 1
        + " |"
        + "".join(f"{p:>8}" for p, _ in PERCENTILES)
    )
    for case, runs in results.items():
        e2e = {p: statistics.median(r[0][p] for r in runs) for p, _ in PERCENTILES}
        ack = {p: statistics.median(r[1][p] for r in runs) for p, _ in PERCENTILES}
        print(row(label(*case), e2e, ack))
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

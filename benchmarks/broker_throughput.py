"""The paper's producer/consumer experiment against one logferry broker on this machine.

One producer sends N messages of 200 bytes (batch 1 without acks, 50 per batch, the
producer's default batching, and default batching round robin over a topic of 100
partitions receiving at once), then one consumer reads them back. Prints msgs/s and
MB/s, the median of --runs runs. ZooKeeper and the broker run as separate processes
on 127.0.0.1, as in a deployment; the client is this process.

    .venv/bin/python benchmarks/broker_throughput.py --messages 1000000 --runs 3

``--tls`` starts a plaintext broker and a TLS broker (certificates from ``logferry
certs``' builders), runs each case on one and then the other, and prints them side by
side with the time to open a connection (TCP connect + TLS handshake) each way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import LocalCluster, wait_for_last_flush  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer  # noqa: E402
from broker.common.tls import TlsConfig, client_tls  # noqa: E402
from broker.net import transport  # noqa: E402

VALUE = b"x" * 200
MANY = 100  # partitions of the "many partitions" case


def produce_batch1(cluster: LocalCluster, topic: str, n: int) -> float:
    """Batch 1, no acks: one send per message; the clock stops at the last ack."""
    with Producer(
        brokers=cluster.bootstrap, tls=cluster.client_tls, acks=0, batch_messages=1, linger_ms=0, buffer_bytes=256 << 20
    ) as producer:
        t0 = time.perf_counter()
        send = producer.send
        for _ in range(n):
            send(topic, VALUE, partition=0)
        producer.flush()
    with Producer(brokers=cluster.bootstrap, tls=cluster.client_tls, acks=1) as closer:
        closer.send(topic, b"end", partition=0).wait(60)
    return time.perf_counter() - t0


def produce_batched(cluster: LocalCluster, topic: str, n: int, per_send: int, acks: int = 0) -> float:
    """``per_send`` messages per send() call (the paper's message set of 50)."""
    chunk = [VALUE] * per_send
    with Producer(
        brokers=cluster.bootstrap, tls=cluster.client_tls, acks=acks, linger_ms=5, buffer_bytes=256 << 20
    ) as producer:
        t0 = time.perf_counter()
        send = producer.send
        for _ in range(n // per_send):
            send(topic, chunk, partition=0)
        producer.flush()
    with Producer(brokers=cluster.bootstrap, tls=cluster.client_tls, acks=1) as closer:
        closer.send(topic, b"end", partition=0).wait(60)
    return time.perf_counter() - t0


def produce_many_partitions(cluster: LocalCluster, topic: str, n: int) -> float:
    """Default batching, partitions round robin over a topic of ``MANY`` partitions, all
    receiving at once: what a broker's flushing costs with many partitions."""
    with Admin(zk=cluster.zk_connect, tls=cluster.client_tls) as admin:
        admin.create_topic(topic, MANY, replication_factor=1)
    with Producer(
        brokers=cluster.bootstrap, tls=cluster.client_tls, acks=1, linger_ms=5, buffer_bytes=256 << 20
    ) as producer:
        deadline = time.monotonic() + 30
        while len(producer.partitions(topic)) < MANY:  # metadata before the clock starts
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: {MANY} partitions not there within 30s")
            time.sleep(0.05)
        t0 = time.perf_counter()
        send = producer.send
        for _ in range(n):
            send(topic, VALUE)
        producer.flush()
        stats = producer.metrics()
    if stats["messages_acked"] != n:
        raise SystemExit(f"{topic}: {stats['messages_acked']:,} of {n:,} acknowledged")
    return time.perf_counter() - t0


def consume(cluster: LocalCluster, topic: str, expected: int) -> float:
    """Read everything back with 1 MiB fetches, iterating every message."""
    with SimpleConsumer(brokers=cluster.bootstrap, max_bytes=1 << 20, tls=cluster.client_tls) as consumer:
        wait_for_last_flush(consumer, topic)
        t0 = time.perf_counter()
        count = 0
        for _message in consumer.messages(topic, 0, "earliest"):
            count += 1
        elapsed = time.perf_counter() - t0
    if count < expected:
        raise SystemExit(f"consumer read {count} messages, expected at least {expected}")
    return elapsed


def connect_ms(cluster: LocalCluster, tries: int = 20) -> float:
    """Median time to open a connection to the broker (TCP, and the TLS handshake with
    TLS), in milliseconds."""
    context, hostname = client_tls(cluster.client_tls)
    host, port = cluster.bootstrap[0].rsplit(":", 1)
    times = []
    for _ in range(tries):
        t0 = time.perf_counter()
        stream = transport.connect(host, int(port), ssl_context=context, server_hostname=hostname)
        times.append(time.perf_counter() - t0)
        stream.close()
    return statistics.median(times) * 1000


def make_tls(directory: Path) -> tuple[dict, TlsConfig]:
    """A private CA and a broker certificate for 127.0.0.1: the broker's [tls] table
    and the clients' settings."""
    from broker.common import certs

    ca = certs.make_ca("bench CA")
    issued = certs.issue(ca.cert_pem, ca.key_pem, "broker", ["127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    (directory / "broker.pem").write_bytes(issued.cert_pem)
    (directory / "broker.key").write_bytes(issued.key_pem)
    broker = {"enabled": True, "cert_file": str(directory / "broker.pem"), "key_file": str(directory / "broker.key")}
    return broker, TlsConfig(ca_file=directory / "ca.pem")


CpuFigures = dict[str, dict[str, list[tuple[float, float]]]]
"""CPU nanoseconds per message (client, broker) per mode and case: steadier than msgs/s
on a shared machine."""


def broker_cpu(cluster: LocalCluster) -> float:
    """CPU seconds (user + system) the cluster's broker processes have used so far."""
    total = 0.0
    for pid in cluster.broker_pids():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_cases(
    clusters: dict[str, LocalCluster], n: int, runs: int, wanted: list[str], cpu: CpuFigures | None = None
) -> dict[str, dict[str, list[float]]]:
    """Every case ``runs`` times on each cluster; seconds per mode and case. With two
    clusters (plaintext and TLS) each case runs on one and then the other, so both see
    the same moment of a shared machine, the first one in odd runs, the other in even
    ones. ``cpu`` receives the CPU time per message."""
    results: dict[str, dict[str, list[float]]] = {mode: {} for mode in clusters}
    if cpu is None:
        cpu = {}
    for mode in clusters:
        cpu.setdefault(mode, {})

    def label(mode: str) -> str:
        """The mode in front of a case only when there are several (``--tls``), so a
        plaintext run prints the case names ab_compare.py matches against older code."""
        return f"{mode:<9} " if len(clusters) > 1 else ""

    def timed(run: int, mode: str, case: str, cluster: LocalCluster, fn: Callable[[LocalCluster], float]) -> None:
        """Run one case; keep its seconds and its CPU time per message (this process,
        all its threads: the client; and the broker processes)."""
        client0, broker0 = time.process_time(), broker_cpu(cluster)
        seconds = fn(cluster)
        client_ns = (time.process_time() - client0) / n * 1e9
        broker_ns = (broker_cpu(cluster) - broker0) / n * 1e9
        results[mode].setdefault(case, []).append(seconds)
        cpu[mode].setdefault(case, []).append((client_ns, broker_ns))
        print(
            f"  run {run + 1}: {label(mode)}{case:<28} {n / seconds:>12,.0f} msgs/s"
            f"   CPU ns/msg client {client_ns:>5,.0f} broker {broker_ns:>5,.0f}",
            flush=True,
        )

    for cluster in clusters.values():  # warm up: page cache, connections, allocator
        produce_batched(cluster, "warmup", min(n, 200_000), 50)
    for run in range(runs):
        # Which mode goes first alternates from run to run, so that neither always runs
        # after the other (on this VM a run's page-cache writes are cheap or costly by
        # the pages it draws: docs/benchmarks.md, "Why one run is fast and the next slow").
        order = list(clusters.items())[:: -1 if run % 2 else 1]
        for case, fn in (
            ("produce batch 1 (acks=0)", lambda c, t: produce_batch1(c, t, n)),
            ("produce batch 50 (acks=0)", lambda c, t: produce_batched(c, t, n, 50)),
            ("produce batch 50 (acks=1)", lambda c, t: produce_batched(c, t, n, 50, acks=1)),
            ("produce default batching", lambda c, t: produce_batched(c, t, n, 1)),
            (f"produce {MANY} partitions (acks=1)", lambda c, t: produce_many_partitions(c, t, n)),
        ):
            if wanted and not any(w in case for w in wanted):
                continue
            topic = f"bench-{case.split()[1]}-{case.split()[2]}-{run}".replace("(", "").replace("=", "")
            for mode, cluster in order:
                timed(run, mode, case, cluster, lambda c, fn=fn, topic=topic: fn(c, topic))
            if case == "produce batch 50 (acks=0)":
                for mode, cluster in order:
                    timed(run, mode, "consume (1 MiB fetches)", cluster, lambda c, topic=topic: consume(c, topic, n))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--cases",
        default="",
        help="run only the cases whose name contains one of these words (comma separated), e.g. 'batch 50,partitions'",
    )
    parser.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [log] setting for the broker (TOML value), e.g. group_commit=false; repeatable",
    )
    parser.add_argument(
        "--tls", action="store_true", help="run every case on a plaintext and on a TLS broker, side by side"
    )
    args = parser.parse_args()
    n = args.messages
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    log_settings: dict = {"flush_messages": 50000, "flush_ms": 200}
    for item in args.log:
        key, _, value = item.partition("=")
        log_settings[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
    modes = ("plaintext", "TLS") if args.tls else ("plaintext",)
    connect: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="logferry-bench-") as tmp, ExitStack() as stack:
        clusters: dict[str, LocalCluster] = {}
        for mode in modes:
            broker_tls, clients = make_tls(Path(tmp) / "pki") if mode == "TLS" else (None, None)
            clusters[mode] = cluster = stack.enter_context(
                LocalCluster(Path(tmp) / mode, log=log_settings, tls=broker_tls, client_tls=clients)
            )
            print(
                f"{mode} broker on {cluster.bootstrap[0]}, {n:,} messages of {len(VALUE)} bytes, {args.runs} runs",
                flush=True,
            )
        cpu: CpuFigures = {}
        results = run_cases(clusters, n, args.runs, wanted, cpu)
        for mode, cluster in clusters.items():
            connect[mode] = connect_ms(cluster)
    print()
    if not args.tls:
        print(f"{'case':<30} {'msgs/s':>12} {'MB/s':>8}   (median of {args.runs})")
        for case, times in results["plaintext"].items():
            median = statistics.median(times)
            print(f"{case:<30} {n / median:>12,.0f} {n * len(VALUE) / median / 1e6:>8.1f}")
        return 0
    print(f"{'case':<30} {'plaintext msgs/s':>17} {'TLS msgs/s':>12} {'TLS/plain':>10}   (median of {args.runs})")
    for case, times in results["plaintext"].items():
        plain = n / statistics.median(times)
        tls = n / statistics.median(results["TLS"][case])
        print(f"{case:<30} {plain:>17,.0f} {tls:>12,.0f} {tls / plain:>9.0%}")
    print(f"{'connect (median of 20)':<30} {connect['plaintext']:>14.2f} ms {connect['TLS']:>9.2f} ms")
    print()
    print(
        f"{'CPU ns/msg (median)':<30} {'plain client':>12} {'TLS client':>11} {'plain broker':>13} {'TLS broker':>11}"
    )
    for case, pairs in cpu["plaintext"].items():
        tls_pairs = cpu["TLS"][case]
        print(
            f"{case:<30} {statistics.median(p[0] for p in pairs):>12,.0f} "
            f"{statistics.median(p[0] for p in tls_pairs):>11,.0f} "
            f"{statistics.median(p[1] for p in pairs):>13,.0f} "
            f"{statistics.median(p[1] for p in tls_pairs):>11,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

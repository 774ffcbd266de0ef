"""Mirror throughput between two clusters vs a plain consumer reading the same topic.

Two throwaway clusters on this machine (each its own ZooKeeper and one broker, all on
127.0.0.1). A topic of ``--partitions`` partitions is filled on the source with
``--messages`` messages of ``--size`` bytes in producer batches of ``--batch``; then,
in the same run:

1. plain consumer: one ``SimpleConsumer`` reads every partition from the start to the
   end, decoding every message (``messages_of``) as an application would;
2. mirror: a :class:`mirror.core.Mirror` (in this process, its own thread, fresh
   group, default config) copies the topic into a fresh target topic; timed from the
   first byte it fetched (joining the group and resolving positions are round trips
   paid once per start; in preserve mode, from when every partition's position was
   learnt from the target) to the target's last acknowledgement, by the mirror's own
   counter (polling the target from this process would take the GIL from the
   mirror); the target's ends are then checked to equal the source's;
2b. mirror preserve (``--modes``): the same copy in the offset-preserving mode
   (:class:`mirror.preserve.PreservingMirror`, append-at requests resumed from the
   target's log end), run right after the re-producing one on the same topic, so the
   two modes are compared side by side (target: within 10 %);
3. mirror through the proxy below without delay (what the proxy process itself costs:
   it relays every byte on the same cores, with splice(2) when there is no delay);
4. mirror over a WAN (``--delay-ms`` per direction, 25 by default: a 50 ms round
   trip; 0 skips this case and the one before): the same, with the source cluster reached through
   :mod:`benchmarks.delay_proxy` (a separate process), as LinkedIn ran it: the mirror
   lives in the analysis datacenter and consumes across the WAN from the live one, so
   its ZooKeeper session and its fetches pay the round trip, its produce requests not.
   Cases 3 and 4 run for each of ``--wan-modes`` (default: preserve, the default mode,
   then produce), each compared with the same mode without the proxy.

The broker has no "advertised address" setting, so the mirror's source clients (and
only they: they are the clients whose ZooKeeper connect string names the proxy) reach
the source broker's address through the proxy by an address map installed here.

Figures are messages/s and MB/s of stored batch bytes; the mirror's rate is also
given as a percentage of the consumer's (target: >= 80 %), the WAN case's as a
percentage of the same mode through the proxy without delay (target: >= 80 %) and of
the direct mirror. The target's baseline is the proxy without delay because the proxy
stands in for ``tc netem``, which delays in the kernel at no CPU cost to these two
cores: with the proxy on both sides of the comparison, only the delay differs, while
the direct case also saves the proxy's relaying of every byte (11-17 % of the rate). The machine is shared, so
figures are provisional; ``--runs`` repeats every case and prints the medians. Lines
``run N: <case> <rate> msgs/s`` are what ``benchmarks/ab_compare.py`` reads.

    .venv/bin/python benchmarks/mirror_throughput.py
    .venv/bin/python benchmarks/mirror_throughput.py --messages 2000000 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.delay_proxy import DelayProxy  # noqa: E402
from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer, messages_of  # noqa: E402
from broker.client.cluster import Cluster  # noqa: E402
from mirror.config import MirrorConfig  # noqa: E402
from mirror.core import Mirror  # noqa: E402
from mirror.preserve import PreservingMirror  # noqa: E402

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
    with SimpleConsumer(zk=zk) as consumer:  # acknowledged; visible once the broker flushed it
        last, now = None, ends(consumer)
        while now != last:
            time.sleep(0.3)
            last, now = now, ends(consumer)


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


@contextlib.contextmanager
def routed_through(zk_connect: str, addresses: dict[tuple[str, int], tuple[str, int]]):
    """Clients created with ``zk_connect`` connect to ``addresses[a]`` instead of broker ``a``."""
    original = Cluster.connection

    def connection(self: Cluster, address: tuple[str, int]):  # type: ignore[no-untyped-def]
        if getattr(self, "_zk_connect", None) == zk_connect:
            address = addresses.get(address, address)
        return original(self, address)

    Cluster.connection = connection  # type: ignore[method-assign]
    try:
        yield
    finally:
        Cluster.connection = original  # type: ignore[method-assign]


def cpu_seconds() -> float:
    """CPU time of this process so far (every thread: the mirror's and the benchmark's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pids: list[int]) -> float:
    """CPU seconds of other processes so far (user + system, from /proc)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def mirror_once(
    source: LocalCluster,
    target: LocalCluster,
    group: str,
    mirror_source_zk: str | None = None,
    mode: str = "produce",
    window: int | None = None,
    proxy_pid: int | None = None,
) -> tuple[float, int, int, tuple[float, ...], float]:
    """Seconds, messages, bytes, CPU seconds (mirror, source broker, target broker and,
    with ``proxy_pid``, the delay proxy) and the mean bytes per fetch request.

    ``mirror_source_zk``: the connect string the mirror uses for the source (the WAN
    case gives the proxy's); the benchmark itself always looks from the source's own.
    ``window``: ``fetch_window_bytes`` (None: the default config's).
    """
    source_zk, target_zk = source.zk_connect, target.zk_connect
    extra = {} if window is None else {"fetch_window_bytes": window}
    config = MirrorConfig(
        source_zk=mirror_source_zk or source_zk, target_zk=target_zk, group=group, topics=(TOPIC,), mode=mode, **extra
    )
    with SimpleConsumer(zk=source_zk) as reader:
        wanted = ends(reader)
    with Admin(zk=target_zk) as admin:  # a fresh target topic per run, created untimed
        with contextlib.suppress(Exception):
            admin.delete_topic(TOPIC)
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.create_topic(TOPIC, partitions=len(wanted))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the deletion is still under way
    mirror: Mirror | PreservingMirror = PreservingMirror(config) if mode == "preserve" else Mirror(config)
    mirror.start()
    thread = threading.Thread(target=mirror.run, name="bench-mirror")
    thread.start()
    total = sum(wanted.values())
    # Timed from the first fetched byte to the target's last acknowledgement: joining the
    # group and resolving positions cost round trips once per start, not per message (a
    # mirror runs for months). The end is the mirror's own counter: polling the target
    # from this process would take the GIL from the mirror; the target's ends are checked
    # below.
    assert mirror._consumer is not None
    consumer = mirror._consumer
    while not consumer.metrics().get("bytes_fetched") and thread.is_alive():
        time.sleep(0.002)
    if isinstance(mirror, PreservingMirror):
        # its positions are resolved on the target once the first batches arrive (one
        # query and a few source round trips per partition, then a seek that drops what
        # was fetched before it): the same once-per-start cost, so the clock starts after
        positions = mirror.positions
        while thread.is_alive() and not all(positions.state((TOPIC, p)) == "copying" for p in wanted):
            time.sleep(0.002)
    pids = [source.broker_pids(), target.broker_pids()]
    if proxy_pid is not None:
        pids.append([proxy_pid])

    def cpu_now() -> tuple[float, ...]:
        return (cpu_seconds(), *(process_cpu(p) for p in pids))

    start, cpu = time.perf_counter(), cpu_now()
    while sum(mirror.metrics.bytes.values()) < total and thread.is_alive():
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    cpu = tuple(b - a for a, b in zip(cpu, cpu_now(), strict=True))
    with SimpleConsumer(zk=target_zk) as copy:
        deadline = time.monotonic() + 30
        while ends(copy) != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"target ends {ends(copy)} != source ends {wanted}")
            time.sleep(0.05)  # acknowledged, becoming visible (flush_ms)
    messages = int(sum(mirror.metrics.messages.values()))
    stats = consumer.metrics()
    per_fetch = stats.get("bytes_fetched", 0) / max(stats.get("fetch_requests", 0), 1)
    mirror.stop()
    thread.join(60)
    return elapsed, messages, total, cpu, per_fetch


def report(
    run: int,
    case: str,
    seconds: float,
    count: int,
    nbytes: int,
    cpu: tuple[float, ...] | None = None,
    per_fetch: float = 0.0,
) -> tuple[float, float]:
    """Print one ``run N: <case> <rate> msgs/s`` line; returns (msgs/s, MB/s).

    ``cpu``: CPU seconds of the mirror's process, the source broker, the target
    broker and (proxy cases) the delay proxy, shown per million messages (on a shared
    machine steadier than the rate, and they show where the time goes).
    """
    rate, mbs = count / seconds, nbytes / seconds / 1e6
    extra = ""
    if cpu is not None:
        mirror_cpu, source_cpu, target_cpu, *proxy_cpu = (c / count * 1e6 for c in cpu)
        proxy = "".join(f", proxy {c:.2f}" for c in proxy_cpu)
        extra = (
            f"; cpu s per M msgs: mirror {mirror_cpu:.2f}, source broker {source_cpu:.2f}, "
            f"target broker {target_cpu:.2f}{proxy}; {per_fetch / 2**20:.1f} MiB per fetch request"
        )
    print(
        f"run {run}: {case:<16} {rate:>12,.0f} msgs/s {mbs:8.1f} MB/s  ({count:,} msgs in {seconds:.2f}s{extra})",
        flush=True,
    )
    return rate, mbs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--delay-ms", type=float, default=25.0, help="WAN case: delay per direction (0: no WAN case)")
    parser.add_argument("--modes", default="produce,preserve", help="mirror modes to time side by side without delay")
    parser.add_argument(
        "--wan-modes", default="preserve,produce", help="mirror modes of the proxy cases (preserve is the default mode)"
    )
    parser.add_argument(
        "--fetch-window-bytes",
        type=int,
        default=None,
        help="the mirror's fetch_window_bytes (default: the config's; 0: "
        "fixed fetch_max_bytes, as before the adaptive window)",
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    wan_modes = [m.strip() for m in args.wan_modes.split(",") if m.strip()]
    logging.basicConfig(level=logging.WARNING)
    rates: dict[str, list[tuple[float, float]]] = {}
    wan = f"wan-{2 * args.delay_ms:g}ms"
    proxy0 = "proxy-0ms"

    def name(mode: str, case: str = "") -> str:
        """ "mirror [preserve] [case]": "mirror" alone is the re-producing mode (ab_compare.py)."""
        return " ".join(p for p in ("mirror", "" if mode == "produce" else mode, case) if p)

    with tempfile.TemporaryDirectory(prefix="logferry-mirror-bench-") as tmp:
        base = Path(tmp)
        log_settings = {"flush_messages": 100_000, "flush_ms": 50}
        with (
            LocalCluster(base / "source", chroot="/live", log=log_settings) as source,
            LocalCluster(base / "target", chroot="/analysis", log=log_settings) as target,
            contextlib.ExitStack() as stack,
        ):
            fill(source.zk_connect, args.messages, args.size, args.batch, args.partitions)
            proxied: dict[str, str] = {}  # case -> the mirror's source connect string
            proxy_pids: dict[str, int] = {}
            if args.delay_ms > 0:
                broker = source.brokers[0].address.rpartition(":")
                broker_address = (broker[0], int(broker[2]))
                zk_address = ("127.0.0.1", source.zk_port)
                # the same proxy without delay first: what the proxy itself costs
                for case, delay in ((proxy0, 0.0), (wan, args.delay_ms)):
                    proxy = stack.enter_context(DelayProxy([zk_address, broker_address], delay))
                    proxied[case] = f"127.0.0.1:{proxy.ports[zk_address]}/live"
                    proxy_pids[case] = proxy.pid
                    stack.enter_context(
                        routed_through(proxied[case], {broker_address: ("127.0.0.1", proxy.ports[broker_address])})
                    )
            for run in range(1, args.runs + 1):
                seconds, count, nbytes = plain_consumer(source.zk_connect)
                rates.setdefault("plain consumer", []).append(report(run, "plain consumer", seconds, count, nbytes))
                # alternate which mode goes first, so neither always runs on a warmer machine;
                # "mirror" stays the re-producing mode's name (ab_compare.py)
                for mode in modes if run % 2 else modes[::-1]:
                    case = name(mode)
                    seconds, count, nbytes, cpu, per_fetch = mirror_once(
                        source, target, f"bench-{mode}-{run}", mode=mode, window=args.fetch_window_bytes
                    )
                    rates.setdefault(case, []).append(report(run, case, seconds, count, nbytes, cpu, per_fetch))
                for mode in wan_modes if run % 2 else wan_modes[::-1]:
                    for where, zk_connect in proxied.items():
                        case = name(mode, where)
                        seconds, count, nbytes, cpu, per_fetch = mirror_once(
                            source,
                            target,
                            f"bench-{mode}-{where}-{run}",
                            zk_connect,
                            mode=mode,
                            window=args.fetch_window_bytes,
                            proxy_pid=proxy_pids[where],
                        )
                        rates.setdefault(case, []).append(report(run, case, seconds, count, nbytes, cpu, per_fetch))
    medians = {
        case: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for case, rs in rates.items()
    }
    print(
        f"\n{args.messages:,} messages of {args.size} B, batches of {args.batch}, "
        f"{args.partitions} partitions, median of {args.runs} run(s) (shared machine: provisional)"
    )
    consumer = medians["plain consumer"][0]
    for case, (msgs, mbs) in medians.items():
        line = f"{case + ':':<18} {msgs:>12,.0f} msgs/s {mbs:8.1f} MB/s"
        if case == "mirror":
            line += f"  = {100 * msgs / consumer:.0f}% of the consumer (target >= 80%)"
        elif case == "mirror preserve" and "mirror" in medians:
            line += (
                f"  = {100 * msgs / medians['mirror'][0]:.0f}% of the re-producing mirror "
                f"(target >= 90%), {100 * msgs / consumer:.0f}% of the consumer"
            )
        for mode in wan_modes:
            direct, through = medians.get(name(mode)), medians.get(name(mode, proxy0))
            if case == name(mode, wan) and direct and through:
                line += (
                    f"  = {100 * msgs / through[0]:.0f}% of it through the proxy "
                    f"without delay (target >= 80%), {100 * msgs / direct[0]:.0f}% of the "
                    "direct mirror"
                )
            elif case == name(mode, proxy0) and direct:
                line += f"  = {100 * msgs / direct[0]:.0f}% of the direct mirror (the proxy's cost)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

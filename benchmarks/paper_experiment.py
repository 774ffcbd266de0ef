"""Reproduce section 5 of the Kafka paper: logferry against RabbitMQ and ActiveMQ (the
paper's peers) and NATS JetStream, Redis Streams and Apache Kafka itself (modern ones;
Apache Kafka from the jars scripts/install-kafka-jars.sh resolves, never installed here).

One run installs what is missing (Debian's rabbitmq-server, activemq, nats-server and
redis-server, the Python clients pika, stomp.py, nats-py and redis[hiredis],
matplotlib), starts each system itself on 127.0.0.1 with persistence on and
asynchronous flush, warms it up, and times the same cases on each, one system at a
time so they never share the CPU:

  produce, batch 1, no ack   one message per call, only the last one confirmed
  produce, 50 per ack        groups of 50 messages, the producer waits for each ack
  consume, ~1000 per pull    read back everything the 50-per-ack case wrote
  storage                    bytes on disk per message after each producer case
  end-to-end latency         a producer process and a consumer process, --latency-rate
                             msgs/s: receive time minus send time, p50/p99/p99.9/max
                             (benchmarks/e2e.py, the method of benchmarks/latency.py)

It prints a table (median of ``--runs``) with logferry's ratio to each peer, writes
results.json, results.md and the paper's two figures (producer.png, consumer.png) to
a results directory, stops every server it started and deletes their data, also on
Ctrl-C or an error. See benchmarks/README.md and docs/benchmarks.md.

    .venv/bin/python benchmarks/paper_experiment.py [--messages N] [--runs R]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (HERE, REPO):  # the peers package lives next to this script; benchmarks.e2e
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from peers.base import (  # noqa: E402
    PAYLOAD_SIZE,
    PER_ACK,
    CaseFailed,
    Deadline,
    PeerUnavailable,
    Stopwatch,
    System,
    make_payload,
    settled,
)
from peers.report import CONSUME, PRODUCE_1, PRODUCE_50, Results, report_lines  # noqa: E402

from benchmarks.e2e import WARMUP_S, run_end_to_end  # noqa: E402

DEFAULT_MESSAGES = 100_000
DEFAULT_WARMUP = 20_000
MIN_RATE = 300.0  # msgs/s below which a case is declared stuck (bounds every case)
DEFAULT_LATENCY_RATE = 1000
DEFAULT_LATENCY_SECONDS = 10.0
LATENCY_SLACK = 60.0  # seconds a latency run may take beyond its nominal duration
SYSTEMS = ("logferry", "rabbitmq", "activemq", "nats", "redis", "kafka")


def build_systems(names: list[str]) -> list[System]:
    """The systems to run, in the order given."""
    from peers.activemq import ActiveMQ
    from peers.apache_kafka_paper import ApacheKafkaPaper
    from peers.logferry import Logferry
    from peers.nats_jetstream import NatsJetStream
    from peers.rabbitmq import RabbitMQ
    from peers.redis_streams import RedisStreams

    known: dict[str, Callable[[], System]] = {
        "logferry": Logferry,
        "rabbitmq": RabbitMQ,
        "activemq": ActiveMQ,
        "nats": NatsJetStream,
        "redis": RedisStreams,
        "kafka": ApacheKafkaPaper,
    }
    return [known[name]() for name in names]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The Kafka paper's producer/consumer experiment: logferry, RabbitMQ, "
        "ActiveMQ, NATS JetStream, Redis Streams and Apache Kafka side by side on 127.0.0.1."
    )
    parser.add_argument(
        "--messages",
        type=int,
        default=DEFAULT_MESSAGES,
        help=f"messages per case and run (default {DEFAULT_MESSAGES:,}; the paper used 10 million)",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per case; the table shows the median (default 3)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP,
        help=f"untimed messages per case before the first run (default {DEFAULT_WARMUP:,}; the JVM needs them)",
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=DEFAULT_LATENCY_RATE,
        help=f"msgs/s of the end-to-end latency case (default {DEFAULT_LATENCY_RATE:,})",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=DEFAULT_LATENCY_SECONDS,
        help=f"seconds per latency run, the first not counted (default {DEFAULT_LATENCY_SECONDS:g}; 0 skips the case)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=HERE / "results",
        help="results go to a timestamped folder under this one (default benchmarks/results)",
    )
    parser.add_argument(
        "--docs", action="store_true", help="also copy the figures to docs/benchmarks-*.png for the README"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where servers keep their data during the run (default: the system's temp dir); always deleted afterwards",
    )
    args = parser.parse_args(argv)
    names = [n.strip().lower() for n in args.systems.split(",") if n.strip()]
    unknown = set(names) - set(SYSTEMS)
    if unknown or not names:
        parser.error(f"unknown systems: {', '.join(sorted(unknown)) or '(none given)'}")
    if args.messages < PER_ACK or args.runs < 1 or args.warmup < 0:
        parser.error(f"--messages must be >= {PER_ACK}, --runs >= 1, --warmup >= 0")
    if args.latency_seconds and (args.latency_seconds <= WARMUP_S or args.latency_rate < 1):
        parser.error(f"--latency-seconds must be 0 or above {WARMUP_S:g}, --latency-rate at least 1")
    args.system_names = names
    return args


# --- signals ---------------------------------------------------------------------------


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while servers are being stopped, so that cleanup is not
    cut short; a signal that arrived meanwhile is raised afterwards."""
    pending: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, _f: pending.append(s)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            raise KeyboardInterrupt(f"signal {pending[0]}")


# --- running ---------------------------------------------------------------------------


def say(text: str) -> None:
    """Progress on stdout, flushed (the run takes minutes)."""
    print(text, flush=True)


def timed_case(system: System, case: str, dest: str, count: int, label: str) -> float:
    """Run one case against ``system`` and return its seconds (bounded in time)."""
    payload = make_payload()
    deadline = Deadline(max(60.0, count / MIN_RATE), f"{system.name} {case} ({label})")
    clock = Stopwatch()
    if case == PRODUCE_1:
        system.produce_batch1(dest, payload, count, clock, deadline)
    elif case == PRODUCE_50:
        system.produce_per_ack(dest, payload, count, PER_ACK, clock, deadline)
    else:
        got = system.consume(dest, count, clock, deadline)
        if got != count:
            raise CaseFailed(f"{system.name} consumer read {got} messages, expected {count}")
    seconds = clock.seconds
    say(f"  {label:<8} {case:<26} {count:>10,} msgs {seconds:8.2f} s {count / seconds:>12,.0f} msgs/s")
    return seconds


def produce_and_measure(system: System, case: str, dest: str, count: int, label: str, results: Results | None) -> None:
    """A producer case plus the bytes on disk it added, per message."""
    before = system.storage_bytes(dest)
    seconds = timed_case(system, case, dest, count, label)
    after = settled(lambda: system.storage_bytes(dest))
    if results is not None:
        results.add_time(system.name, case, seconds)
        results.add_storage(system.name, case, (after - before) / count)


def latency_case(name: str, client: object, dest: str, args: argparse.Namespace, label: str, results: Results) -> None:
    """One end-to-end latency run (bounded: the consumer process is always ended),
    recorded under ``name`` (a system, or a system with another setting)."""
    try:
        points = run_end_to_end(
            client,
            dest,
            args.latency_rate,
            args.latency_seconds,
            PAYLOAD_SIZE,
            timeout=args.latency_seconds + LATENCY_SLACK,
        )
    except RuntimeError as exc:
        raise CaseFailed(f"{name} latency: {exc}") from None
    results.add_latency(name, points)
    shown = "end-to-end latency" if name == results.systems[-1] else name
    say(
        f"  {label:<8} {shown:<26} {args.latency_rate:>10,} msgs/s "
        + " ".join(f"{p} {value:.2f}" for p, value in points.items())
        + " ms"
    )


def run_system(system: System, workdir: Path, args: argparse.Namespace, results: Results) -> None:
    """Install, start, warm up, run every case ``--runs`` times, always stop."""
    say(f"\n== {system.name}")
    try:
        system.ensure_installed()
    except PeerUnavailable as exc:
        say(f"  SKIPPED {system.name}: {exc}")
        results.skipped[system.name] = str(exc)
        return
    results.systems.append(system.name)
    try:
        began = time.monotonic()
        system.start(workdir)
        say(f"  started in {time.monotonic() - began:.1f} s (load average {os.getloadavg()[0]:.2f})")
        if args.warmup:
            warm = max(args.warmup, PER_ACK)
            produce_and_measure(system, PRODUCE_1, "warmup-b1", warm, "warm-up", None)
            produce_and_measure(system, PRODUCE_50, "warmup-b50", warm, "warm-up", None)
            timed_case(system, CONSUME, "warmup-b50", warm, "warm-up")
            system.drop("warmup-b1")
            system.drop("warmup-b50")
        for run in range(args.runs):
            label = f"run {run + 1}"
            one, fifty = f"bench-r{run}-b1", f"bench-r{run}-b50"
            produce_and_measure(system, PRODUCE_1, one, args.messages, label, results)
            produce_and_measure(system, PRODUCE_50, fifty, args.messages, label, results)
            results.add_time(system.name, CONSUME, timed_case(system, CONSUME, fifty, args.messages, label))
            system.drop(one)
            system.drop(fifty)
        if args.latency_seconds:
            for run in range(args.runs):
                for variant, (name, client) in enumerate(system.latency_variants()):
                    dest = f"latency-r{run}" + (f"-v{variant}" if variant else "")
                    latency_case(name, client, dest, args, f"run {run + 1}", results)
                    system.drop(dest)
    except (PeerUnavailable, CaseFailed) as exc:
        say(f"  FAILED {system.name}: {exc}")
        results.failed[system.name] = str(exc)
    except Exception as exc:  # a client library error: report it, go on with the others
        say(f"  FAILED {system.name}: {type(exc).__name__}: {exc}")
        results.failed[system.name] = f"{type(exc).__name__}: {exc}"
    finally:
        with deferred_signals():
            say(f"  stopping {system.name}")
            try:
                system.stop()
            finally:
                shutil.rmtree(workdir, ignore_errors=True)


def write_outputs(results: Results, args: argparse.Namespace, lines: list[str]) -> Path:
    """results.json, results.md and the figures into a timestamped results folder."""
    out = args.results / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    data = results.to_json()
    data["environment"] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_end": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    try:
        from peers.figures import draw
        from peers.install import ensure_python_module

        ensure_python_module("matplotlib")
        figures = draw(results, out)
    except Exception as exc:  # figures are a bonus: the table is already printed
        say(f"no figures: {exc}")
        return out
    if not figures:
        say("no figures: nothing was measured")
    if args.docs:
        for figure in figures:
            shutil.copyfile(figure, REPO / "docs" / f"benchmarks-{figure.name}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    results = Results(
        messages=args.messages, runs=args.runs, latency_rate=args.latency_rate, latency_seconds=args.latency_seconds
    )
    say(
        f"paper experiment: {args.messages:,} messages x {args.runs} run(s), warm-up "
        f"{args.warmup:,}; systems: {', '.join(args.system_names)}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="logferry-paper-", dir=args.workdir))
    interrupted = False
    try:
        for system in build_systems(args.system_names):
            run_system(system, root / system.name.lower(), args, results)
    except KeyboardInterrupt:
        interrupted = True
        results.notes.append("interrupted: the figures below are partial")
        say("\ninterrupted: every server started so far is stopped")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if os.getloadavg()[0] > 1.0:
        results.notes.append(
            f"load average {os.getloadavg()[0]:.2f} at the end on {os.cpu_count()} CPUs: other work shared the machine"
        )
    lines = report_lines(results)
    say("\n" + "\n".join(lines))
    out = write_outputs(results, args, lines)
    say(f"\nresults in {out}")
    if interrupted:
        return 130
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())

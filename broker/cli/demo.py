"""``logferry demo``: a live cluster on this machine, fed real logs, watched live.

Starts one ZooKeeper and the live datacenter's two brokers from the example configs in
``etc/live/`` (ports and data dirs rewritten under ``.logferry/demo``), publishes the
loghub samples from ``../shared/data/loghub`` (or generated access-log lines) as web
hosts would, tails every topic with a dashboard consumer that prints per-topic rates,
then reports what was written, stored and read, and stops everything it started, also
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

from broker.errors import ConfigError, LogferryError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "data" / "loghub"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    p = sub.add_parser("demo", help="run the pipeline on this machine and report",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="how long the hosts publish (default 20)")
    p.add_argument("--rate", type=int, default=20_000, help="lines per second over all hosts")
    p.add_argument("--workdir", default=".logferry/demo", help="where data and logs go")
    p.add_argument("--keep-running", action="store_true",
                   help="leave ZooKeeper and the brokers up and print how to explore them")
    p.set_defaults(func=run_demo)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value) + '"'


def _sample_lines() -> dict[str, list[bytes]]:
    """Topic -> lines: the loghub samples when present, generated lines otherwise."""
    topics = {}
    if SAMPLES.is_dir():
        for path in sorted(SAMPLES.glob("*.log")):
            topic = path.stem.split("_")[0].lower()
            topics[topic] = path.read_bytes().splitlines()
    if not topics:
        topics["apache"] = [b'127.0.0.1 - - [21/Nov/2026:10:00:%02d +0000] "GET /page/%d HTTP/1.1" 200 512'
                            % (i % 60, i) for i in range(2000)]
    return topics


class Demo:
    """The processes of one demo run and how to stop them."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.zookeeper = None
        self.zk_connect = ""
        self.brokers: list[str] = []

    def start(self) -> None:
        from broker.zkserver import LocalZooKeeper

        self.workdir.mkdir(parents=True, exist_ok=True)
        zk_port = _free_port()
        print(f"[demo] starting ZooKeeper on 127.0.0.1:{zk_port}", flush=True)
        self.zookeeper = LocalZooKeeper(self.workdir / "zookeeper", zk_port)
        self.zookeeper.start()
        self.zk_connect = f"127.0.0.1:{zk_port}/logferry/live"
        for path in sorted((ROOT / "etc" / "live").glob("broker-*.toml")):
            self._start_broker(path)

    def _start_broker(self, template: Path) -> None:
        with template.open("rb") as f:
            config = tomllib.load(f)
        port = _free_port()
        name = template.stem
        config["broker"].update(port=port, zk_connect=self.zk_connect, metrics_port=0,
                                log_dirs=[str(self.workdir / "data" / f"live-{name}")])
        path = self.workdir / f"live-{name}.toml"
        text = ""
        for section, values in config.items():
            text += f"[{section}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in values.items())
        path.write_text(text)
        log = (self.workdir / f"live-{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "broker", "broker", "--config", str(path)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(ROOT), start_new_session=True)
        log.close()
        self.procs.append((name, proc))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LogferryError(f"{name} exited; see {self.workdir}/live-{name}.log")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise LogferryError(f"{name} did not start within 30 s")
        self.brokers.append(f"127.0.0.1:{port}")
        print(f"[demo] started live {name} on 127.0.0.1:{port} (config from {template.relative_to(ROOT)})",
              flush=True)

    def stop(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        print("[demo] stopped every process it started", flush=True)


def _publish(zk: str, lines: dict[str, list[bytes]], seconds: float, rate: int,
             sent: dict[str, int], stop: threading.Event) -> None:
    """Two simulated web hosts publishing their logs, keyed by host name."""
    from broker.client import Producer

    hosts = [b"web-1", b"web-2"]
    chunk = 200
    with Producer(zk=zk, linger_ms=20, compression="gzip") as producer:
        t0 = time.monotonic()
        i = 0
        while not stop.is_set() and time.monotonic() - t0 < seconds:
            for topic, topic_lines in lines.items():
                start = (i * chunk) % len(topic_lines)
                batch = (topic_lines[start:] + topic_lines)[:chunk]
                producer.send(topic, batch, key=hosts[i % 2])
                sent[topic] = sent.get(topic, 0) + len(batch)
            i += 1
            target = i * chunk * len(lines) / rate
            delay = target - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
        producer.flush(60)


def _dashboard(zk: str, topics: list[str], received: dict[str, int], stop: threading.Event) -> None:
    """A real-time consumer: tails every partition of every topic from the start."""
    from broker.client import SimpleConsumer

    with SimpleConsumer(zk=zk) as consumer:
        offsets = {(t, p): 0 for t in topics for p in consumer.partitions(t)}
        while not stop.is_set():
            got = 0
            for (topic, partition), offset in offsets.items():
                result = consumer.fetch(topic, partition, offset, max_wait_ms=0)
                n = sum(len(b) for b in result.batches)
                received[topic] = received.get(topic, 0) + n
                offsets[(topic, partition)] = result.next_offset
                got += n
            if not got:
                time.sleep(0.1)


def run_demo(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    if args.seconds <= 0 or args.rate <= 0:
        raise ConfigError("--seconds and --rate must be positive")
    demo = Demo(workdir)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        demo.start()
        lines = _sample_lines()
        topics = sorted(lines)
        from broker.client import Admin
        with Admin(zk=demo.zk_connect) as admin:
            for topic in topics:
                admin.create_topic(topic, 4)
        print(f"[demo] topics: {', '.join(topics)} (4 partitions each, spread over "
              f"{len(demo.brokers)} brokers)", flush=True)
        sent: dict[str, int] = {}
        received: dict[str, int] = {}
        publisher = threading.Thread(target=_publish, args=(demo.zk_connect, lines, args.seconds,
                                                            args.rate, sent, stop), daemon=True)
        dashboard = threading.Thread(target=_dashboard, args=(demo.zk_connect, topics, received, stop),
                                     daemon=True)
        t0 = time.monotonic()
        publisher.start()
        dashboard.start()
        last = dict(received)
        while publisher.is_alive() and not stop.is_set():
            time.sleep(2)
            rates = "  ".join(f"{t} {(received.get(t, 0) - last.get(t, 0)) / 2:,.0f}/s" for t in topics)
            print(f"[dashboard {time.monotonic() - t0:5.1f}s] {rates}", flush=True)
            last = dict(received)
        publisher.join()
        deadline = time.monotonic() + 15
        while sum(received.values()) < sum(sent.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        dashboard.join(10)
        elapsed = time.monotonic() - t0
        print("\n[demo] report")
        print(f"{'topic':<12} {'published':>10} {'read back':>10}")
        for topic in topics:
            print(f"{topic:<12} {sent.get(topic, 0):>10,} {received.get(topic, 0):>10,}")
        total_sent, total_read = sum(sent.values()), sum(received.values())
        print(f"{'total':<12} {total_sent:>10,} {total_read:>10,}   in {elapsed:.1f}s")
        ok = total_sent == total_read
        print("[demo] every published line was read back" if ok else
              "[demo] MISMATCH: some lines were not read back")
        if args.keep_running:
            print(f"\n[demo] still running. Explore with:\n"
                  f"  export LOGFERRY_ZK={demo.zk_connect}\n"
                  f"  .venv/bin/logferry topic list\n"
                  f"  .venv/bin/logferry topic describe {topics[0]}\n"
                  f"  .venv/bin/logferry consume {topics[0]} --from latest --follow\n"
                  f"Press Ctrl-C to stop everything.")
            stop.clear()
            try:
                while not stop.is_set():
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        return 0 if ok else 1
    except KeyboardInterrupt:
        print("\n[demo] interrupted", flush=True)
        return 130
    finally:
        stop.set()
        demo.stop()
        signal.signal(signal.SIGTERM, previous)

"""What the web console costs: the brokers' extra CPU from its polling, and the page's render time.

A 2-broker cluster holds one topic of ``--partitions`` partitions (replication factor
2), a producer sends a steady load and a consumer group reads it (committing every
second), so the console has brokers, ISRs, rates, lags and a group status to show.
Then, alternately for ``--rounds`` rounds, the brokers' CPU time (utime + stime from
/proc) is measured for ``--seconds`` without the console and with ``logferry console``
polling every ``--interval`` s. Last, Debian's Chromium (through Playwright) opens the
page and the script prints how long the first render took after navigation and how
long each view takes to render one snapshot.

    .venv/bin/python benchmarks/console_load.py                     # 500 partitions, 3 x 20 s
    .venv/bin/python benchmarks/console_load.py --partitions 100 --seconds 5 --rounds 1

The issue's bars: the page renders in under a second with 500 partitions, and the
console's polling adds under 5% to the brokers' CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, GroupConsumer, Producer  # noqa: E402
from broker.common.config import dumps  # noqa: E402
from broker.testing.localrun import free_port  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
TOPIC = "console-bench"


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def handling_seconds(metrics_urls: list[str]) -> float:
    """Seconds the brokers spent handling OFFSETS and METADATA requests so far (their
    ``logferry_request_seconds_total``): what the console's polling asks of them."""
    total = 0.0
    for url in metrics_urls:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "logferry_request_seconds_total" and s.labels.get("api") in ("offsets", "metadata"):
                    total += s.value
    return total


def measure(pids: list[int], metrics_urls: list[str], seconds: float) -> tuple[float, float]:
    """CPU used by ``pids`` over ``seconds`` of wall time, and the time they spent handling
    offsets and metadata requests, each as a fraction of one core."""
    start, handled, t0 = cpu_seconds(pids), handling_seconds(metrics_urls), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return (cpu_seconds(pids) - start) / wall, (handling_seconds(metrics_urls) - handled) / wall


class Load:
    """A producer sending ``rate`` messages/s over every partition, and a group reading them."""

    def __init__(self, zk: str, partitions: int, rate: int):
        self.zk, self.partitions, self.rate = zk, partitions, rate
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _produce(self) -> None:
        value = b"x" * 100
        per_round = max(self.rate // 10, 1)
        with Producer(zk=self.zk, linger_ms=5) as producer:
            p = 0
            while not self.stop.is_set():
                started = time.monotonic()
                for _ in range(per_round):
                    producer.send(TOPIC, [value], partition=p)
                    p = (p + 1) % self.partitions
                self.stop.wait(max(0.1 - (time.monotonic() - started), 0))

    def _consume(self) -> None:
        with GroupConsumer("console-bench-readers", [TOPIC], zk=self.zk, auto_commit_ms=1000) as consumer:
            while not self.stop.is_set():
                consumer.poll(0.2, max_messages=5000)


def start_console(zk: str, interval: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "broker", "console", "--zk", f"bench={zk}", "--port", "0",
                             "--interval", str(interval)], stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("console: "):
        proc.kill()
        raise SystemExit(f"the console did not start: {line!r}")
    url = line.split(" ", 1)[1].strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snap = json.load(urllib.request.urlopen(url + "api/snapshot", timeout=10))
        if snap["seq"] > 1 and snap["clusters"][0].get("ok"):
            return proc, url
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("the console never read the cluster")


def metrics_on(cluster: LocalCluster) -> LocalCluster:
    """Give each broker a metrics port (rewrites its config before it starts)."""
    for b in cluster.brokers:
        b.broker_settings["metrics_port"] = free_port()
        b.config_file.write_text(dumps({"broker": b.broker_settings, "log": b.log_settings}))
    return cluster


def render_times(url: str) -> dict[str, float]:
    """Milliseconds from navigation to the first rendered snapshot, and per view for one render."""
    from playwright.sync_api import sync_playwright

    out: dict[str, float] = {}
    profile = tempfile.mkdtemp(prefix="logferry-bench-chromium-")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path="/usr/bin/chromium", headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(url)  # warm-up: the browser's own start is not the page's render
        page.wait_for_function("document.body.dataset.seq > 0", timeout=30_000)
        for view in ("clusters", "topics", "groups"):
            page.goto(f"{url}?view={view}")
            page.wait_for_function("document.body.dataset.seq > 0", timeout=30_000)
            out[f"first render, {view} view (ms after navigation)"] = page.evaluate("performance.now()")
            samples = []
            for _ in range(3):
                seq = page.evaluate("document.body.dataset.seq")
                page.wait_for_function(f"document.body.dataset.seq != '{seq}'", timeout=10_000)
                samples.append(float(page.evaluate("document.body.dataset.renderMs")))
            out[f"render of one snapshot, {view} view (ms, median of 3)"] = statistics.median(samples)
        context.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0, help="each measurement window")
    parser.add_argument("--rounds", type=int, default=3, help="without/with pairs")
    parser.add_argument("--rate", type=int, default=2000, help="messages per second produced")
    parser.add_argument("--interval", type=float, default=1.0, help="the console's polling interval")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="logferry-console-bench-") as tmp, \
            metrics_on(LocalCluster(Path(tmp), brokers=2, broker={"default_replication_factor": 2})) as cluster:
        zk = cluster.zk_connect
        urls = [f"http://127.0.0.1:{b.broker_settings['metrics_port']}/metrics" for b in cluster.brokers]
        with Admin(zk=zk) as admin:
            admin.create_topic(TOPIC, args.partitions, 2)
        pids = cluster.broker_pids()
        print(f"{args.partitions} partitions x 2 replicas on 2 brokers, {args.rate} msgs/s produced "
              f"and consumed by one group; console polling every {args.interval:g} s", flush=True)
        without, with_console, console_cpu = [], [], []
        served_without, served_with = [], []
        with Load(zk, args.partitions, args.rate):
            time.sleep(5)  # the group settles, the load runs
            for r in range(args.rounds):
                cpu, served = measure(pids, urls, args.seconds)
                without.append(cpu)
                served_without.append(served)
                proc, url = start_console(zk, args.interval)
                try:
                    c0 = cpu_seconds([proc.pid])
                    t0 = time.monotonic()
                    cpu, served = measure(pids, urls, args.seconds)
                    with_console.append(cpu)
                    served_with.append(served)
                    console_cpu.append((cpu_seconds([proc.pid]) - c0) / (time.monotonic() - t0))
                    snap = json.load(urllib.request.urlopen(url + "api/snapshot", timeout=10))
                    if r == args.rounds - 1:
                        renders = render_times(url)
                finally:
                    proc.terminate()
                    proc.wait(30)
                print(f"round {r + 1}: brokers {without[-1] * 100:.1f}% of a core without the console, "
                      f"{with_console[-1] * 100:.1f}% with it", flush=True)
        base, loaded = statistics.mean(without), statistics.mean(with_console)
        print(f"brokers' CPU without the console: {base * 100:.1f}% of one core (mean of {args.rounds})")
        print(f"brokers' CPU with the console:    {loaded * 100:.1f}% of one core")
        print(f"added by the console's polling:   {(loaded - base) * 100:+.1f} points of a core, "
              f"{(loaded - base) / base * 100:+.1f}% of the brokers' CPU")
        handled = statistics.mean(served_with) - statistics.mean(served_without)
        print(f"brokers' time handling offsets + metadata requests: {statistics.mean(served_without) * 100:.2f}% "
              f"of a core without the console, {statistics.mean(served_with) * 100:.2f}% with it: "
              f"{handled * 100:+.2f} points, {handled / base * 100:+.1f}% of the brokers' CPU without it")
        print(f"the console process itself:       {statistics.mean(console_cpu) * 100:.1f}% of one core; "
              f"one reading of the cluster took {snap['poll_ms']:.0f} ms; snapshot "
              f"{len(json.dumps(snap)) / 1024:.0f} KiB of JSON")
        for name, ms in renders.items():
            print(f"page: {name}: {ms:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

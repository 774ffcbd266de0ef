"""What the web console costs: the brokers' extra CPU from its polling, and the page's render time.

A 2-broker cluster holds one topic of ``--partitions`` partitions (replication factor
2), a producer sends a steady load and a consumer group reads it (committing every
second), so the console has brokers, ISRs, rates, lags and a group status to show.

One ``logferry console`` runs through the whole measurement, polling every
``--interval`` s; for the windows "without" it is paused (SIGSTOP: its connections stay
open and idle, so starting it costs nothing in the windows; a window and the pause
before it stay shorter than its ZooKeeper session), for the windows "with" it runs
(SIGCONT). Windows alternate (with, without, with, ...), each paused one compared with
the mean of its two neighbours (which cancels a steady drift of the machine's load), and
in each window the brokers' whole-process CPU (utime + stime of both broker
processes from /proc/<pid>/stat) is read. First ``--idle-rounds`` pairs with no load:
the console's polling cost in points of a core, which the idle brokers measure with
little noise. Then ``--rounds`` pairs under the load: the median over the pairs of
(with - without) / without, raw and per message produced (the load generator runs on
the same machine, so how many messages a window got swings with the other work on it).
The brokers' time handling offsets + metadata requests (their own
``logferry_request_seconds_total``) is printed too, with the requests per second per api
both brokers handled (``logferry_requests_total``: what the console asks, and how the
load generator's produce and fetch requests shift when the console takes CPU from it),
ZooKeeper's CPU (the console reads the groups' znodes there) and the console's. Last, Debian's Chromium (through
Playwright) opens the page and the script prints how long the first render took after
navigation and how long each view takes to render one snapshot.

    .venv/bin/python benchmarks/console_load.py                # 500 partitions, 4 + 10 pairs of 6 s
    .venv/bin/python benchmarks/console_load.py --partitions 100 --rounds 2 --no-render
    .venv/bin/python benchmarks/console_load.py --no-render --console-from /work/bench  # the old console
    .venv/bin/python benchmarks/console_load.py --no-render --control 0.16   # contention alone

``--control SHARE`` alternates a process that only burns SHARE of a core instead of the
console (no requests, no ZooKeeper reads): what taking that CPU alone does to the
brokers' figures on a 2-core machine. ``--pin`` puts the brokers on CPU 0 and the rest
on CPU 1.

The issue's bars: the page renders in under a second with 500 partitions, and the
console's polling adds under 5% to the brokers' CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, GroupConsumer, Producer  # noqa: E402
from broker.common.config import dumps  # noqa: E402
from broker.testing.localrun import free_port  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
TOPIC = "console-bench"
ZOOKEEPER_PIDS: list[int] = []
"""The ZooKeeper server's pid, whose CPU the windows read too (the console reads the
groups' znodes there)."""


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def handling_seconds(metrics_urls: list[str]) -> tuple[float, dict[str, float]]:
    """Seconds the brokers spent handling OFFSETS and METADATA requests so far (their
    ``logferry_request_seconds_total``): what the console's polling asks of them; and the
    requests handled so far per api (``logferry_requests_total``, both brokers)."""
    total = 0.0
    counts: dict[str, float] = {}
    for url in metrics_urls:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "logferry_request_seconds_total" and s.labels.get("api") in ("offsets", "metadata"):
                    total += s.value
                elif s.name == "logferry_requests_total":
                    api = s.labels.get("api", "?")
                    counts[api] = counts.get(api, 0.0) + s.value
    return total, counts


def measure(pids: list[int], metrics_urls: list[str], seconds: float) -> tuple[float, float, dict[str, float]]:
    """CPU used by ``pids`` over ``seconds`` of wall time, and the time they spent handling
    offsets and metadata requests, each as a fraction of one core; requests/s per api."""
    start, (handled, counts), t0 = cpu_seconds(pids), handling_seconds(metrics_urls), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    cpu = (cpu_seconds(pids) - start) / wall
    handled_after, counts_after = handling_seconds(metrics_urls)
    rates = {api: (n - counts.get(api, 0.0)) / wall for api, n in counts_after.items()}
    return cpu, (handled_after - handled) / wall, rates


class Load:
    """A producer sending ``rate`` messages/s over every partition, and a group reading them."""

    def __init__(self, zk: str, partitions: int, rate: int):
        self.zk, self.partitions, self.rate = zk, partitions, rate
        self.stop = threading.Event()
        self.sent = 0
        """Messages handed to the producer so far (the load a window really got)."""
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def __enter__(self) -> Load:
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
                    self.sent += 1
                    p = (p + 1) % self.partitions
                self.stop.wait(max(0.1 - (time.monotonic() - started), 0))

    def _consume(self) -> None:
        with GroupConsumer("console-bench-readers", [TOPIC], zk=self.zk, auto_commit_ms=1000) as consumer:
            while not self.stop.is_set():
                consumer.poll(0.2, max_messages=5000)


def start_console(zk: str, interval: float, checkout: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """``logferry console`` over the cluster, from this checkout or ``checkout`` (its own
    .venv: the old code against the same brokers)."""
    python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
    proc = subprocess.Popen(
        [python, "-m", "broker", "console", "--zk", f"bench={zk}", "--port", "0", "--interval", str(interval)],
        stdout=subprocess.PIPE,
        text=True,
        stderr=subprocess.DEVNULL,
        cwd=checkout,
    )
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
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
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


def window(
    proc: subprocess.Popen[str], pids: list[int], urls: list[str], seconds: float, load: Load | None, running: bool
) -> dict[str, float]:
    """One window with the console polling (``running``) or paused: the brokers' CPU and
    request-handling time (fractions of a core), the console's CPU, msgs/s produced."""
    proc.send_signal(signal.SIGCONT if running else signal.SIGSTOP)
    time.sleep(1.0)  # a poll under way finishes
    c0, t0, m0 = cpu_seconds([proc.pid]), time.monotonic(), load.sent if load else 0
    z0 = cpu_seconds(ZOOKEEPER_PIDS)
    cpu, served, rates = measure(pids, urls, seconds)
    wall = time.monotonic() - t0
    return {
        "cpu": cpu,
        "served": served,
        "console": (cpu_seconds([proc.pid]) - c0) / wall,
        "zookeeper": (cpu_seconds(ZOOKEEPER_PIDS) - z0) / wall,
        "msgs_s": ((load.sent - m0) / wall) if load else 0.0,
        **{f"req_s:{api}": n for api, n in rates.items()},
    }


def alternate(
    proc: subprocess.Popen[str],
    pids: list[int],
    urls: list[str],
    rounds: int,
    seconds: float,
    load: Load | None,
    label: str,
) -> list[dict[str, dict[str, float]]]:
    """``rounds`` windows with the console paused (SIGSTOP), each between two with it
    polling (with, without, with, ..., with): each pair compares a paused window with
    the mean of its two neighbours, which cancels a steady drift of the machine's load,
    and the console is never paused longer than one window (its ZooKeeper session
    outlives that)."""

    def mean(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: (a.get(k, 0.0) + b.get(k, 0.0)) / 2 for k in a.keys() | b.keys()}

    pairs = []
    before = window(proc, pids, urls, seconds, load, True)
    for r in range(rounds):
        paused = window(proc, pids, urls, seconds, load, False)
        after = window(proc, pids, urls, seconds, load, True)
        w, wo = mean(before, after), paused
        before = after
        print(
            f"{label} pair {r + 1}: brokers {wo['cpu'] * 100:.1f}% of a core without the console, "
            f"{w['cpu'] * 100:.1f}% with it ({(w['cpu'] - wo['cpu']) * 100:+.2f} points)"
            + (f"; {wo['msgs_s']:.0f} and {w['msgs_s']:.0f} msgs/s produced" if load else ""),
            flush=True,
        )
        pairs.append({"with": w, "without": wo})
    return pairs


def median_of(pairs: list[dict[str, dict[str, float]]], side: str, key: str) -> float:
    return statistics.median(p[side].get(key, 0.0) for p in pairs)


def print_requests(pairs: list[dict[str, dict[str, float]]], label: str) -> None:
    """Requests per second per api the two brokers handled, without and with the subject."""
    apis = sorted({k for p in pairs for side in p.values() for k in side if k.startswith("req_s:")})
    cells = []
    for key in apis:
        wo, w = median_of(pairs, "without", key), median_of(pairs, "with", key)
        if wo or w:
            cells.append(f"{key[6:]} {wo:.1f} -> {w:.1f}")
    print(f"{label} requests/s to the brokers (without -> with, medians): " + ", ".join(cells))


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` onto ``cpu`` (taskset -a: threads that exist now; new
    ones inherit it)."""
    subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True, stdout=subprocess.DEVNULL)


BURNER = """
import sys, time
share = float(sys.argv[1])
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.01 * share:
        pass
    time.sleep(0.01 * (1 - share))
"""


def start_burner(share: float) -> subprocess.Popen[str]:
    """A process that only burns ``share`` of one core (busy in 10 ms slices): the control
    for contention, alternated like the console, asking nothing of the brokers."""
    return subprocess.Popen([sys.executable, "-c", BURNER, str(share)], text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument(
        "--seconds",
        type=float,
        default=6.0,
        help="each loaded measurement window "
        "(with the pause before it, shorter than the console's 10 s ZooKeeper session)",
    )
    parser.add_argument("--rounds", type=int, default=10, help="without/with pairs under load")
    parser.add_argument("--idle-seconds", type=float, default=6.0, help="each idle measurement window")
    parser.add_argument("--idle-rounds", type=int, default=10, help="without/with pairs, no load")
    parser.add_argument("--rate", type=int, default=2000, help="messages per second produced")
    parser.add_argument("--interval", type=float, default=1.0, help="the console's polling interval")
    parser.add_argument("--no-render", action="store_true", help="skip the browser part")
    parser.add_argument(
        "--control",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="instead of the console, alternate a process that only burns SHARE of "
        "one core (e.g. the console's own share): what contention alone costs the brokers",
    )
    parser.add_argument(
        "--console-from",
        type=Path,
        metavar="DIR",
        help="run the console from another checkout (with its .venv), e.g. the old code, against the same brokers",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the brokers on CPU 0, everything else of "
        "the benchmark (console, load generator, ZooKeeper) on CPU 1, so the console "
        "does not take the brokers' core (needs 2 CPUs and taskset)",
    )
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="logferry-console-bench-") as tmp,
        metrics_on(LocalCluster(Path(tmp), brokers=2, broker={"default_replication_factor": 2})) as cluster,
    ):
        zk = cluster.zk_connect
        urls = [f"http://127.0.0.1:{b.broker_settings['metrics_port']}/metrics" for b in cluster.brokers]
        with Admin(zk=zk) as admin:
            admin.create_topic(TOPIC, args.partitions, 2)
        pids = cluster.broker_pids()
        if cluster.zookeeper._proc is not None:
            ZOOKEEPER_PIDS[:] = [cluster.zookeeper._proc.pid]
        print(
            f"{args.partitions} partitions x 2 replicas on 2 brokers; console polling every "
            f"{args.interval:g} s; {args.idle_rounds} pairs of {args.idle_seconds:g} s windows "
            f"idle, then {args.rounds} pairs of {args.seconds:g} s with {args.rate} msgs/s "
            "produced and consumed by one group",
            flush=True,
        )
        renders: dict[str, float] = {}
        if args.control:
            proc, url = start_burner(args.control), ""
            print(f"control: a process burning {args.control:.0%} of a core stands in for the console")
        else:
            proc, url = start_console(zk, args.interval, args.console_from)
            if args.console_from:
                print(f"the console runs from {args.console_from}", flush=True)
        if args.pin:
            for pid in pids:
                pin(pid, 0)
            zk_proc = cluster.zookeeper._proc
            for pid in [proc.pid, os.getpid()] + ([zk_proc.pid] if zk_proc else []):
                pin(pid, 1)
            print("pinned: brokers on CPU 0; console, load generator and ZooKeeper on CPU 1", flush=True)
        snap: dict[str, Any] = {"poll_ms": 0.0}
        try:
            time.sleep(3)
            idle = alternate(proc, pids, urls, args.idle_rounds, args.idle_seconds, None, "idle")
            loaded = []
            if args.rounds:
                with Load(zk, args.partitions, args.rate) as load:
                    time.sleep(5)  # the group settles, the load runs
                    loaded = alternate(proc, pids, urls, args.rounds, args.seconds, load, "loaded")
            time.sleep(2)
            if not args.control:
                snap = json.load(urllib.request.urlopen(url + "api/snapshot", timeout=10))
                if not args.no_render:
                    renders = render_times(url)
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(30)

        idle_added = statistics.median(p["with"]["cpu"] - p["without"]["cpu"] for p in idle)
        idle_mean = statistics.mean(p["with"]["cpu"] - p["without"]["cpu"] for p in idle)
        print(
            f"idle brokers: {median_of(idle, 'without', 'cpu') * 100:.2f}% of a core without the "
            f"console, {median_of(idle, 'with', 'cpu') * 100:.2f}% with it: the console's polling "
            f"costs {idle_added * 100:+.2f} points of a core (median of {args.idle_rounds} pairs; "
            f"mean {idle_mean * 100:+.2f}: /proc counts 10 ms ticks, so one pair resolves "
            f"{2 * 100 / TICK / args.idle_seconds:.2f} points)"
        )
        print_requests(idle, "idle")
        if not loaded:
            return 0
        base = median_of(loaded, "without", "cpu")
        raw = statistics.median((p["with"]["cpu"] - p["without"]["cpu"]) / p["without"]["cpu"] for p in loaded)
        per_msg = statistics.median(
            (p["with"]["cpu"] / p["with"]["msgs_s"]) / (p["without"]["cpu"] / p["without"]["msgs_s"]) - 1
            for p in loaded
        )

        def load_requests(side: dict[str, float]) -> float:
            return side.get("req_s:produce", 0.0) + side.get("req_s:fetch", 0.0)

        per_request = statistics.median(
            (p["with"]["cpu"] / load_requests(p["with"])) / (p["without"]["cpu"] / load_requests(p["without"])) - 1
            for p in loaded
        )
        print(
            f"loaded brokers: {base * 100:.1f}% of a core without the console, "
            f"{median_of(loaded, 'with', 'cpu') * 100:.1f}% with it (medians of {args.rounds})"
        )
        print("added by the console's polling, % of the loaded brokers' CPU:")
        print(f"  from the idle pairs (points / loaded CPU):  {idle_added / base * 100:+.1f}%")
        print(f"  loaded pairs, per message produced:         {per_msg * 100:+.1f}% (median)")
        print(
            f"  loaded pairs, per produce + fetch request: {per_request * 100:+.1f}% (median; the load "
            "generator's batching shifts with the CPU it gets, so its requests/s do too)"
        )
        print(
            f"  loaded pairs, raw:                          {raw * 100:+.1f}% (median; the load "
            "generator shares the machine, so the raw windows swing with it)"
        )
        print_requests(loaded, "loaded")
        handled = median_of(loaded, "with", "served") - median_of(loaded, "without", "served")
        print(
            f"brokers' time handling offsets + metadata requests: "
            f"{median_of(loaded, 'without', 'served') * 100:.2f}% of a core without the console, "
            f"{median_of(loaded, 'with', 'served') * 100:.2f}% with it: {handled * 100:+.2f} points"
        )
        print(
            f"ZooKeeper: {median_of(loaded, 'without', 'zookeeper') * 100:.1f}% of a core without the "
            f"console, {median_of(loaded, 'with', 'zookeeper') * 100:.1f}% with it"
        )
        print(
            f"the console process itself: {median_of(loaded, 'with', 'console') * 100:.1f}% of one "
            f"core; one reading of the cluster took {snap['poll_ms']:.0f} ms; snapshot "
            f"{len(json.dumps(snap)) / 1024:.0f} KiB of JSON"
        )
        for name, ms in renders.items():
            print(f"page: {name}: {ms:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

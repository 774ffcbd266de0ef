"""Simulated web hosts: access logs and application logs, rotated by rename while written.

Each host writes the files its agent's config names (``etc/agent.toml``'s sources,
under the host's root directory): a source with a ``multiline`` rule gets application
log records (a timestamped line, some followed by a Java stack trace: one record, many
lines), the others get access log lines in nginx's combined format. The application
log's vocabulary comes from the loghub samples of ``../shared/data/loghub`` (Hadoop,
ZooKeeper and Spark logs) when present, re-stamped with the current time.

Every ``rotate_s`` seconds a host rotates each file the way logrotate does without
``copytruncate``: rename ``app.log`` to ``app.log.<n>``, then create a new ``app.log``.
The agent must finish the renamed file and pick up the new one.

A host counts what it wrote: records (what the agent should publish as messages) and
physical lines, per topic.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "data" / "loghub"

_STAMPED = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (.+)$")
_SPARK = re.compile(rb"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (.+)$")

_FALLBACK_APP = [
    b"INFO [main] com.example.shop.CartService: cart 81723 updated: 3 items",
    b"INFO [http-nio-8080-exec-4] com.example.shop.CheckoutController: order 99812 placed",
    b"WARN [pool-2-thread-1] com.example.shop.InventoryClient: slow response (812 ms)",
    b"INFO [main] org.apache.catalina.core.StandardService: Starting service [Tomcat]",
]
_PATHS = [
    "/",
    "/search?q=kafka",
    "/product/%d",
    "/cart",
    "/checkout",
    "/api/v1/items/%d",
    "/static/app.%d.js",
    "/login",
    "/profile/%d",
    "/feed?page=%d",
]
_AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2) AppleWebKit/605.1.15 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36",
    "curl/7.88.1",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
]
_EXCEPTIONS = [
    ("java.lang.IllegalStateException", "connection pool exhausted (max 64)"),
    ("java.net.SocketTimeoutException", "Read timed out"),
    ("java.lang.NullPointerException", 'Cannot invoke "Order.getItems()" because "order" is null'),
    ("org.apache.hadoop.ipc.RemoteException", "File does not exist: /user/web/part-00017"),
]
_FRAMES = [
    "com.example.shop.CheckoutController.placeOrder(CheckoutController.java:%d)",
    "com.example.shop.OrderService.submit(OrderService.java:%d)",
    "com.example.db.Pool.borrow(Pool.java:%d)",
    "org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:%d)",
    "org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:%d)",
    "java.base/java.lang.Thread.run(Thread.java:%d)",
]


def app_vocabulary() -> list[bytes]:
    """Application log bodies (level, thread, logger, message) from the loghub samples."""
    bodies: list[bytes] = []
    for name in ("Hadoop_2k.log", "Zookeeper_2k.log", "Spark_2k.log"):
        path = SAMPLES / name
        if not path.is_file():
            continue
        for line in path.read_bytes().splitlines():
            m = _STAMPED.match(line) or _SPARK.match(line)
            if m:
                bodies.append(m.group(1).replace(b"\t", b" "))
    return bodies or list(_FALLBACK_APP)


@dataclass
class Counts:
    """What one host wrote to one topic."""

    records: int = 0
    lines: int = 0
    bytes: int = 0


class LogFile:
    """One log file a host appends to and rotates by rename."""

    def __init__(self, path: Path, rotations: int = 0):
        self.path = path
        self.rotations = rotations
        """Rotations so far: the next one renames to ``<name>.<rotations + 1>``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = path.open("ab")

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.handle.flush()

    def rotate(self) -> None:
        """``mv app.log app.log.<n>`` then a fresh ``app.log`` (logrotate's default)."""
        self.handle.close()
        self.rotations += 1
        self.path.rename(self.path.with_name(f"{self.path.name}.{self.rotations}"))
        self.handle = self.path.open("ab")

    def close(self) -> None:
        self.handle.close()


@dataclass
class SourceSpec:
    """A file to write: its topic, its path on the host, and its kind."""

    topic: str
    path: str
    kind: str  # "app" (records may span lines) or "access"
    weight: int


class WebHost(threading.Thread):
    """Writes ``rate`` records per second over its sources for ``seconds`` seconds.

    ``seconds`` may be ``math.inf`` (until ``stop`` is set). ``rotated``: rotations an
    earlier writer of the same files already did, so that a writer continuing them
    never renames onto a rotated file the agent may still be reading.
    """

    def __init__(
        self,
        name: str,
        root: Path,
        sources: list[SourceSpec],
        rate: float,
        seconds: float,
        rotate_s: float,
        stop: threading.Event,
        seed: int,
        vocabulary: list[bytes],
        rotated: int = 0,
    ):
        super().__init__(name=f"host-{name}", daemon=True)
        self.host = name
        self.root = root
        self.sources = sources
        self.rate = rate
        self.seconds = seconds
        self.rotate_s = rotate_s
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.vocabulary = vocabulary
        self.counts: dict[str, Counts] = {s.topic: Counts() for s in sources}
        self.rotations = rotated
        self.error: BaseException | None = None
        self.files: dict[str, LogFile] = {}
        self.finished = threading.Event()
        self._ip_base = 11 + seed * 37 % 200

    # -- record generators ------------------------------------------------------------------

    def access_record(self, now: float) -> bytes:
        rng = self.rng
        path = rng.choice(_PATHS)
        if "%d" in path:
            path = path % rng.randint(1, 99999)
        status = rng.choices((200, 304, 301, 404, 500), weights=(82, 8, 3, 6, 1))[0]
        size = 0 if status == 304 else rng.randint(200, 48000)
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now))
        method = "POST" if path in ("/checkout", "/login") else "GET"
        return (
            f"10.{self._ip_base}.{rng.randint(0, 255)}.{rng.randint(1, 254)} - - [{stamp}] "
            f'"{method} {path} HTTP/1.1" {status} {size} "https://shop.example.com/" '
            f'"{rng.choice(_AGENTS)}" {rng.random() * 0.3:.3f}\n'
        ).encode()

    def app_record(self, now: float) -> tuple[bytes, int]:
        """One application log record and its number of lines."""
        rng = self.rng
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
        if rng.random() < 0.03:
            exc, message = rng.choice(_EXCEPTIONS)
            lines = [
                f"{stamp} ERROR [http-nio-8080-exec-{rng.randint(1, 16)}] "
                f"com.example.shop.CheckoutController: request failed".encode(),
                f"{exc}: {message}".encode(),
            ]
            lines += [
                f"\tat {frame % rng.randint(20, 900)}".encode() for frame in rng.sample(_FRAMES, rng.randint(3, 6))
            ]
            if rng.random() < 0.5:
                lines.append(b"Caused by: java.io.IOException: Broken pipe")
                lines.append(b"\tat java.base/sun.nio.ch.SocketDispatcher.write0(Native Method)")
                lines.append(b"\t... 12 more")
            return b"\n".join(lines) + b"\n", len(lines)
        return stamp.encode() + b" " + rng.choice(self.vocabulary) + b"\n", 1

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the demo
            self.error = exc
        finally:
            for f in self.files.values():
                f.close()
            self.finished.set()

    def prepare(self) -> None:
        """Create the host's log files (empty), as an installed application would have.

        The agent starts after this: a file created *and* rotated away between two of
        the agent's scans would never be seen, on a real host as here.
        """
        for spec in self.sources:
            if spec.topic not in self.files:
                self.files[spec.topic] = LogFile(self.root / spec.path.lstrip("/"), self.rotations)

    def _run(self) -> None:
        self.prepare()
        total_weight = sum(s.weight for s in self.sources)
        t0 = time.monotonic()
        next_rotation = t0 + self.rotate_s
        due_before = {s.topic: 0.0 for s in self.sources}
        while not self.stop_event.is_set():
            now_mono = time.monotonic()
            elapsed = min(now_mono - t0, self.seconds)
            now = time.time()
            for spec in self.sources:
                due = self.rate * elapsed * spec.weight / total_weight
                n = int(due) - int(due_before[spec.topic])
                due_before[spec.topic] = due
                if n <= 0:
                    continue
                counts = self.counts[spec.topic]
                if spec.kind == "access":
                    data = b"".join(self.access_record(now) for _ in range(n))
                    lines = n
                else:
                    parts = [self.app_record(now) for _ in range(n)]
                    data = b"".join(p[0] for p in parts)
                    lines = sum(p[1] for p in parts)
                self.files[spec.topic].write(data)
                counts.records += n
                counts.lines += lines
                counts.bytes += len(data)
            if elapsed >= self.seconds:
                return
            if now_mono >= next_rotation:
                for f in self.files.values():
                    f.rotate()
                self.rotations += 1
                next_rotation += self.rotate_s
            time.sleep(0.1)


def sources_from_agent_config(doc: dict[str, Any]) -> list[SourceSpec]:
    """What a host writes, from the agent config's ``[[sources]]``."""
    from demo.configs import source_paths

    paths = source_paths(doc)
    specs: list[SourceSpec] = []
    for source in doc.get("sources", []):
        topic = source["topic"]
        if any(s.topic == topic for s in specs):
            continue
        kind = "app" if "multiline" in source else "access"
        specs.append(SourceSpec(topic, paths[topic], kind, 1 if kind == "app" else 3))
    return specs


def check_multiline(doc: dict[str, Any], host: WebHost) -> None:
    """Make sure the agent's multiline rule joins our records exactly as we count them."""
    for source in doc.get("sources", []):
        rule = source.get("multiline")
        if not rule:
            continue
        record = b""
        while b"\tat " not in record:
            record, _ = host.app_record(time.time())
        first, *rest = record.rstrip(b"\n").split(b"\n")
        if "start" in rule:
            start = re.compile(rule["start"].encode())
            ok = bool(start.search(first)) and not any(start.search(line) for line in rest)
        else:
            cont = re.compile(rule["continuation"].encode())
            ok = not cont.search(first) and all(cont.search(line) for line in rest)
        if not ok:
            raise ValueError(
                f"the agent's multiline rule of source {source.get('name')!r} does "
                "not join the demo's stack traces into one record"
            )

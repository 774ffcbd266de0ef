"""ActiveMQ as the paper ran it: persistent messages in KahaDB, flushed asynchronously.

Debian's ``/usr/bin/activemq`` re-reads an options file that overrides the base
directory, so the broker is started as ``java -jar bin/activemq.jar start
xbean:file:activemq.xml`` with every directory pointing into the run's private folder
(activemq.xml and log4j.properties sit next to this module). Python talks STOMP to it
through stomp.py, with TCP_NODELAY (stomp.py leaves Nagle on, and a COMMIT or receipted
SEND behind a burst would otherwise wait ~40 ms for a delayed ACK).

Case semantics (see docs/benchmarks.md):
- batch 1, no ack: SEND with ``persistent:true`` per message; only the last one asks
  for a receipt, which ActiveMQ sends after it processed every earlier frame of the
  connection;
- 50 per ack: a STOMP transaction per 50 messages; the receipt of the COMMIT is the ack;
- consume: SUBSCRIBE with ``ack:auto`` and a prefetch of 1000 messages (the paper's
  "about 1000 messages per pull");
- end-to-end latency: a ``persistent:true`` SEND per message, only the last with a
  receipt; the consumer process SUBSCRIBEs with ``ack:auto`` (messages are pushed as
  they are dispatched), both connections with TCP_NODELAY.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers.base import (
    LOOPBACK,
    CaseFailed,
    Deadline,
    PeerUnavailable,
    Server,
    Stopwatch,
    System,
    disk_bytes,
    free_port,
    port_open,
    wait_until,
)
from peers.install import ensure_apt_package, ensure_python_module

HERE = Path(__file__).resolve().parent
HOME = Path("/usr/share/activemq")
JAR = HOME / "bin" / "activemq.jar"
HEAP = "1G"
PREFETCH = 1000
START_TIMEOUT = 60.0
RECEIPT_TIMEOUT = 120.0
CHECK_EVERY = 1024


class _Listener:
    """Receipts and message counts from stomp.py's receiver thread.

    A plain class with the listener methods stomp.py calls (duck typing keeps stomp an
    import of ``start`` only, so this module imports without it installed).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.receipts: dict[str, threading.Event] = {}
        self.count = 0
        self.target = 0
        self.all_in = threading.Event()
        self.error: str | None = None

    def expect(self, receipt: str) -> threading.Event:
        event = threading.Event()
        with self.lock:
            self.receipts[receipt] = event
        return event

    def on_receipt(self, frame: Any) -> None:
        with self.lock:
            event = self.receipts.pop(frame.headers.get("receipt-id", ""), None)
        if event is not None:
            event.set()

    def on_message(self, frame: Any) -> None:
        self.count += 1  # only the receiver thread writes it
        if self.count >= self.target:
            self.all_in.set()

    def on_error(self, frame: Any) -> None:
        self.error = f"{frame.headers.get('message', '')} {frame.body!r}"[:500]
        self._wake_all()

    def on_disconnected(self) -> None:
        self.error = self.error or "ActiveMQ closed the STOMP connection"
        self._wake_all()

    def _wake_all(self) -> None:
        with self.lock:
            for event in self.receipts.values():
                event.set()
        self.all_in.set()

    def __getattr__(self, name: str) -> Any:  # the other on_* callbacks: ignore
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


class ActiveMQ(System):
    """A private ActiveMQ broker driven over STOMP by stomp.py."""

    name = "ActiveMQ"

    def __init__(self) -> None:
        self.server: Server | None = None
        self.conn: Any = None
        self.listener = _Listener()
        self.port = 0
        self.data: Path | None = None
        self._ids = itertools.count()

    def ensure_installed(self) -> None:
        """Debian's activemq (runs on the system's Java 17) and stomp.py."""
        ensure_apt_package("activemq", JAR)
        if shutil.which("java") is None:
            raise PeerUnavailable("ActiveMQ needs Java: apt-get install default-jre-headless")
        ensure_python_module("stomp.py")

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        """Start the JVM with our activemq.xml, wait for STOMP, connect."""
        self.data = workdir / "data"
        tmp = workdir / "tmp"
        for folder in (self.data, tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        argv = [
            "java",
            f"-Xms{HEAP}",
            f"-Xmx{HEAP}",
            "--add-opens=java.base/java.lang=ALL-UNNAMED",
            "--add-opens=java.base/java.util=ALL-UNNAMED",
            "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
            "--add-opens=java.base/java.io=ALL-UNNAMED",
            "--add-opens=java.base/java.net=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={workdir}",
            f"-Dactivemq.conf={HERE}",
            f"-Dactivemq.data={self.data}",
            f"-Djava.io.tmpdir={tmp}",
            f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}",
            f"-Dbench.stomp.port={self.port}",
            "-jar",
            str(JAR),
            "start",
            f"xbean:file:{HERE / 'activemq.xml'}",
        ]
        self.server = Server("activemq", argv, workdir / "server.log", cwd=workdir)
        wait_until(lambda: port_open(self.port), START_TIMEOUT, "ActiveMQ STOMP listener", self.server)
        self.conn = self._connect()

    def _connect(self) -> Any:
        return _connect(self.port, self.listener)

    def stop(self) -> None:
        """Disconnect, then SIGTERM the JVM (its shutdown hook closes KahaDB)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.disconnect()
            self.conn = None
        if self.server is not None:
            self.server.stop(grace=30)
            self.server = None

    # --- cases -------------------------------------------------------------------------

    def _wait_receipt(self, event: threading.Event, what: str, deadline: Deadline) -> None:
        if not event.wait(min(RECEIPT_TIMEOUT, max(deadline.remaining(), 0.1))):
            raise CaseFailed(f"ActiveMQ: no receipt for {what}")
        if self.listener.error:
            raise CaseFailed(f"ActiveMQ: {self.listener.error}")

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """``count - 1`` SENDs without receipt, then one SEND with a receipt."""
        send, destination = self.conn.send, f"/queue/{dest}"
        headers = {"persistent": "true"}
        clock.start()
        for i in range(count - 1):
            send(destination, payload, headers=headers)
            if i % CHECK_EVERY == 0:
                deadline.check()
        receipt = f"r{next(self._ids)}"
        event = self.listener.expect(receipt)
        send(destination, payload, headers={"persistent": "true", "receipt": receipt})
        self._wait_receipt(event, "the last message", deadline)
        clock.stop()

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """BEGIN, ``per_ack`` SENDs, COMMIT with a receipt; wait for it; repeat."""
        send, destination = self.conn.send, f"/queue/{dest}"
        sent = 0
        clock.start()
        while sent < count:
            group = min(per_ack, count - sent)
            tx = self.conn.begin()
            headers = {"persistent": "true", "transaction": tx}
            for _ in range(group):
                send(destination, payload, headers=headers)
            receipt = f"r{next(self._ids)}"
            event = self.listener.expect(receipt)
            self.conn.commit(tx, headers={"receipt": receipt})
            self._wait_receipt(event, "a COMMIT", deadline)
            sent += group
        clock.stop()

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """SUBSCRIBE (auto ack, prefetch 1000) and count messages until ``count``."""
        listener = self.listener
        listener.count, listener.target = 0, count
        listener.all_in.clear()
        sub = f"s{next(self._ids)}"
        clock.start()
        self.conn.subscribe(f"/queue/{dest}", sub, ack="auto", headers={"activemq.prefetchSize": str(PREFETCH)})
        listener.all_in.wait(max(deadline.remaining(), 0.1))
        clock.stop()
        got = listener.count
        self.conn.unsubscribe(sub)
        if listener.error:
            raise CaseFailed(f"ActiveMQ: {listener.error}")
        if got < count:
            raise CaseFailed(f"ActiveMQ consumer got {got} of {count} messages within {deadline.seconds:.0f} s")
        return got

    def storage_bytes(self, dest: str) -> int:
        """Bytes allocated by KahaDB (journal files are preallocated sparse files, so
        allocated blocks, not their nominal 32 MiB, measure what they hold)."""
        if self.data is None:
            raise PeerUnavailable("ActiveMQ is not started")
        return disk_bytes(self.data / "kahadb")

    def latency_client(self) -> ActiveMQLatency:
        """The STOMP port; see the module docstring for the settings."""
        return ActiveMQLatency(self.port)


def _connect(port: int, listener: Any) -> Any:
    """A STOMP 1.2 connection with TCP_NODELAY and ``listener`` attached."""
    import stomp

    conn = stomp.Connection12([(LOOPBACK, port)], auto_decode=False, try_loopback_connect=False)
    conn.set_listener("bench", listener)
    conn.connect(wait=True)
    conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


class _Forward(_Listener):
    """A listener that hands each message body to a callback (stomp.py's thread)."""

    def __init__(self, on_value: Callable[[bytes], None]) -> None:
        super().__init__()
        self.on_value = on_value

    def on_message(self, frame: Any) -> None:
        self.on_value(frame.body)
        super().on_message(frame)


@dataclass(frozen=True)
class ActiveMQLatency:
    """Both sides of the end-to-end latency case (see ``benchmarks.e2e``)."""

    port: int

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        listener = _Forward(on_value)
        listener.target = count
        conn = _connect(self.port, listener)
        try:
            receipt = "subscribed"
            event = listener.expect(receipt)
            conn.subscribe(
                f"/queue/{dest}",
                "lat",
                ack="auto",
                headers={"activemq.prefetchSize": str(PREFETCH), "receipt": receipt},
            )
            event.wait(30)
            ready()
            listener.all_in.wait(timeout)
            if listener.error:
                raise CaseFailed(f"ActiveMQ: {listener.error}")
        finally:
            conn.disconnect()

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        listener = _Listener()
        conn = _connect(self.port, listener)
        try:
            send, destination = conn.send, f"/queue/{dest}"
            headers = {"persistent": "true"}
            last = messages.count - 1
            event = listener.expect("last")
            for message in messages:
                if message.seq == last:  # its receipt follows every earlier frame
                    headers = {"persistent": "true", "receipt": "last"}
                send(destination, message.value, headers=headers)
            if not event.wait(timeout) or listener.error:
                raise CaseFailed(f"ActiveMQ: no receipt after the last message ({listener.error or 'timeout'})")
        finally:
            conn.disconnect()

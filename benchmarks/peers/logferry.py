"""logferry itself, started the way the integration tests start it.

ZooKeeper is Debian's, run by ``broker.testing.zkserver.LocalZooKeeper``; the broker is a
subprocess ``logferry broker --config <toml>`` (logferry-broker.toml next to this
module: one partition per topic, flush after 10,000 messages or 200 ms). Clients use
the public client library only, with a static broker list.

Case semantics (see docs/benchmarks.md):
- batch 1, no ack: ``Producer(acks=0, batch_messages=1, linger_ms=0)``, one ``send``
  per message. The last message goes on the same producer (the same connection, whose
  requests the broker appends in order) with acks switched to 1, so its
  acknowledgement means the broker appended every message before it;
- 50 per ack: ``Producer(acks=1, batch_messages=50)``; ``send(topic, list_of_50)``
  then ``wait()`` on its future before the next 50: one batch, one acknowledgement,
  the producer blocked meanwhile, like a RabbitMQ or STOMP transaction of 50;
- consume: ``SimpleConsumer.fetch`` of 200 KB (about 1000 messages) per request, from
  the start to the end, iterating every message of every batch;
- end-to-end latency: as ``benchmarks/latency.py`` measures it: ``Producer(acks=1,
  linger_ms=0)``, one ``send`` per message; a ``SimpleConsumer`` following the
  partition (``messages(follow=True)``, long-poll of up to 500 ms). The broker runs
  group commit (the default): a message is visible one fsync after it is appended.
  A second row, ``logferry (visibility=written)``, runs the same case on a topic whose
  messages are visible once written, fsynced behind the consumers: the durability the
  peers are run with here (persistence on, flushed asynchronously).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Iterator
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
    free_port,
    port_open,
    wait_until,
)

HERE = Path(__file__).resolve().parent
CHROOT = "/bench"
FETCH_BYTES = 200 * 1024
START_TIMEOUT = 60.0
CHECK_EVERY = 1024
ACK_TIMEOUT = 60.0  # longest wait for one acknowledgement before the case fails


class Logferry(System):
    """One ZooKeeper and one logferry broker, driven by ``broker.client``."""

    name = "logferry"

    def __init__(self) -> None:
        self.zookeeper: Any = None
        self.server: Server | None = None
        self.port = 0
        self.log_dir: Path | None = None
        self.address = ""

    def ensure_installed(self) -> None:
        """The client library, the broker command and Debian's ZooKeeper with Java."""
        try:
            import broker.client  # noqa: F401
            from broker.testing.zkserver import INSTALL_HINT, discover_install
        except ImportError as exc:
            raise PeerUnavailable(
                f"logferry is not importable here ({exc}); run from the repository's virtualenv: .venv/bin/python"
            ) from None
        try:
            discover_install()
        except Exception as exc:
            raise PeerUnavailable(f"ZooKeeper cannot run: {exc} ({INSTALL_HINT})") from None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        """ZooKeeper, its chroot, then the broker; wait until it listens."""
        from broker.testing.zkserver import LocalZooKeeper

        self.zookeeper = LocalZooKeeper(workdir / "zookeeper", free_port(), force_sync=False)
        try:
            # Own session, like the other servers: Ctrl-C must not kill ZooKeeper under
            # a broker that still has to deregister from it while being stopped.
            self.zookeeper.start(timeout=START_TIMEOUT, detach=True)
        except Exception as exc:
            raise PeerUnavailable(f"ZooKeeper did not start: {exc}") from None
        self._create_chroot(self.zookeeper.hosts)
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.log_dir = workdir / "logs"
        config = workdir / "broker.toml"
        text = (HERE / "logferry-broker.toml").read_text()
        for key, value in {
            "PORT": str(self.port),
            "LOG_DIR": str(self.log_dir),
            "ZK_CONNECT": self.zookeeper.hosts + CHROOT,
        }.items():
            text = text.replace(f"@{key}@", value)
        config.write_text(text)
        self.server = Server(
            "logferry",
            [*_broker_command(), "broker", "--config", str(config)],
            workdir / "broker.log",
            env=None,
            cwd=workdir,
        )
        log_path = self.server.log_path
        wait_until(
            lambda: "listening on" in log_path.read_text(errors="replace") and port_open(self.port),
            START_TIMEOUT,
            "logferry broker",
            self.server,
        )

    @staticmethod
    def _create_chroot(hosts: str) -> None:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=hosts, timeout=10)
        client.start(timeout=15)
        try:
            client.ensure_path(CHROOT)
        finally:
            client.stop()
            client.close()

    def stop(self) -> None:
        """SIGTERM the broker (it flushes and deregisters), then stop ZooKeeper."""
        if self.server is not None:
            self.server.stop(grace=30)
            self.server = None
        if self.zookeeper is not None:
            try:
                self.zookeeper.stop()
            finally:
                self.zookeeper = None

    # --- cases -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _producer(self, **options: Any) -> Iterator[Any]:
        """A Producer that is closed afterwards; after a failure, quickly and without
        letting a close error hide the failure."""
        from broker.client import Producer

        producer = Producer(brokers=[self.address], **options)
        try:
            yield producer
        except BaseException:
            with contextlib.suppress(Exception):
                producer.close(timeout=5)
            raise
        producer.close(timeout=30)

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """One unacknowledged batch per message; only the last message is acked."""
        with self._producer(acks=0, batch_messages=1, linger_ms=0) as producer:
            producer.partitions(dest)  # creates the topic, untimed
            send = producer.send
            clock.start()
            for i in range(count - 1):
                send(dest, payload)
                if i % CHECK_EVERY == 0:
                    deadline.check()
            producer.flush(timeout=deadline.remaining())  # all of it written to the socket
            # The broker appends one connection's requests in order: an ack for the last
            # message on this connection means every earlier message is appended too.
            # acks applies per request from when it is set (the sender is idle now)
            producer.acks = 1
            last = _wait(send(dest, payload), deadline)
            clock.stop()
        self._check_last(dest, last)

    def _check_last(self, dest: str, last: int | None) -> None:
        """Untimed proof that the acked message is the log's last batch (nothing of the
        unacknowledged ones arrived after the clock stopped)."""
        from broker.client import SimpleConsumer

        if last is None:
            raise CaseFailed("logferry: the last message was not acknowledged with an offset")
        with SimpleConsumer(brokers=[self.address]) as consumer:
            for _ in range(100):  # the visible end follows the flush (<= 200 ms)
                if consumer.offsets(dest, 0).end > last:
                    break
                time.sleep(0.05)
            after_last = consumer.fetch(dest, 0, last, max_bytes=FETCH_BYTES)
            time.sleep(0.5)  # anything arriving late would be flushed and visible by now
            log_end = consumer.offsets(dest, 0).end
        if len(after_last.batches) != 1 or log_end != after_last.next_offset:
            raise CaseFailed(
                f"logferry: acked message at {last} is not the last batch "
                f"(log end {log_end}, batch end {after_last.next_offset})"
            )

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """``send(topic, list_of_50).wait()`` until ``count`` messages are acked."""
        with self._producer(acks=1, batch_messages=per_ack, linger_ms=0) as producer:
            producer.partitions(dest)
            group = [payload] * per_ack
            send = producer.send
            sent = 0
            clock.start()
            while sent < count:
                values = group if count - sent >= per_ack else group[: count - sent]
                _wait(send(dest, values), deadline)
                sent += len(values)
                if sent % (CHECK_EVERY * per_ack) == 0:
                    deadline.check()
            clock.stop()

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """Fetch 200 KB at a time from the first offset and count every message."""
        from broker.client import SimpleConsumer

        got = 0
        with SimpleConsumer(brokers=[self.address], max_bytes=FETCH_BYTES) as consumer:
            offset = consumer.offsets(dest, 0).start
            fetch = consumer.fetch
            wait_ms = 0
            clock.start()
            while got < count:
                result = fetch(dest, 0, offset, FETCH_BYTES, wait_ms)
                if result.batches:
                    for batch in result.batches:
                        for _value in batch.values:
                            got += 1
                    offset = result.next_offset
                    wait_ms = 0
                else:  # at the visible end before the last flush: long-poll for it
                    deadline.check()
                    wait_ms = 100
            clock.stop()
        return got

    def storage_bytes(self, dest: str) -> int:
        """Bytes of the partition's segment files (``<log_dir>/<topic>-0/*.log``)."""
        if self.log_dir is None:
            raise PeerUnavailable("logferry is not started")
        return sum(p.stat().st_size for p in (self.log_dir / f"{dest}-0").glob("*.log"))

    def drop(self, dest: str) -> None:
        """Nothing: the run's log directory is removed at the end."""

    def latency_client(self) -> LogferryLatency:
        """The broker's address; see the module docstring for the settings."""
        return LogferryLatency(self.address)

    def latency_variants(self) -> list[tuple[str, Any]]:
        """The default (visible once fsynced) and ``visibility = "written"``."""
        return [(self.name, self.latency_client()), (WRITTEN, LogferryLatency(self.address, visibility="written"))]


WRITTEN = "logferry (visibility=written)"
"""The report's name for the latency row whose topic is visible on write."""


@dataclass(frozen=True)
class LogferryLatency:
    """Both sides of the end-to-end latency case (see ``benchmarks.e2e``)."""

    address: str
    visibility: str | None = None
    """The topic's ``visibility`` setting (None: the broker's, "flushed")."""

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        from broker.client import Admin, Producer, SimpleConsumer

        if self.visibility is not None:
            with Admin(brokers=[self.address]) as admin:
                admin.create_topic(dest, 1, config={"visibility": self.visibility})
        with Producer(brokers=[self.address]) as producer:
            producer.partitions(dest)  # auto-creates the topic (or waits for its leader)
        with SimpleConsumer(brokers=[self.address], max_wait_ms=500) as consumer:
            consumer.offsets(dest, 0)  # connected, metadata known
            ready()
            for message in consumer.messages(dest, 0, 0, follow=True, limit=count, timeout=timeout):
                on_value(message.value)

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        from broker.client import Producer

        with Producer(brokers=[self.address], acks=1, linger_ms=0) as producer:
            producer.partitions(dest)
            send = producer.send
            for message in messages:
                send(dest, message.value, partition=0)
            producer.flush(timeout=timeout)
            stats = producer.metrics()
        if stats["messages_failed"] or stats["messages_acked"] != messages.count:
            raise CaseFailed(
                f"logferry: {stats['messages_acked']:,} of {messages.count:,} "
                f"messages acknowledged, {stats['messages_failed']:,} failed"
            )


def _wait(future: Any, deadline: Deadline) -> int | None:
    """The acknowledged offset of ``future``; CaseFailed if no ack within ACK_TIMEOUT."""
    from broker.common.errors import RequestTimedOutError

    try:
        return future.wait(timeout=min(ACK_TIMEOUT, deadline.remaining()))
    except RequestTimedOutError as exc:
        raise CaseFailed(f"logferry: no acknowledgement ({exc})") from None


def _broker_command() -> list[str]:
    """``logferry`` from this interpreter's environment, else ``python -m broker``."""
    script = Path(sys.executable).with_name("logferry")
    if script.exists():
        return [str(script)]
    found = shutil.which("logferry")
    return [found] if found else [sys.executable, "-m", "broker"]

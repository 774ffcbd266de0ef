"""NATS JetStream, a modern log-structured peer: file storage, asynchronous flush.

A private ``nats-server -a 127.0.0.1 -p <port> -js -sd <dir>`` (Debian's nats-server),
one stream per destination with file storage (JetStream's persistent store, the
default); the server writes each message to its stream's block file as it arrives and
fsyncs on a timer, never per message (its default): the paper's asynchronous flush.
Python talks to it through nats-py (asyncio: this module runs its own event loop). The
module is not called ``nats.py`` so that it can never shadow the client package.

Case semantics (see docs/benchmarks.md), each the client's documented fast path:
- batch 1, no ack: a core NATS ``publish`` per message on the stream's subject (the
  stream stores it; no acknowledgement is asked for), then one ``js.publish`` whose
  acknowledgement stops the clock. The server handles one connection's messages in
  order, and the acknowledged sequence number must equal the message count: every
  message was stored, none lost;
- 50 per ack: 50 ``js.publish_async`` (each message acknowledged by the stream), then
  wait for all 50 acknowledgements before the next 50;
- consume: an ordered push consumer (``ordered_consumer=True``: no acks, flow
  control, the server pushes the stream from its start), the client's documented way
  to read a whole stream in order. A pull consumer without acks, ``fetch(1000)`` per
  request (the paper's "about 1000 per pull" taken literally), reads 4-5x slower with
  nats-py here (about 35k msgs/s against 160k), so it would not be the peer's best;
- end-to-end latency: ``js.publish_async`` per message (acknowledged, not awaited
  one by one); the consumer process uses an ordered push consumer (``ordered_consumer``:
  no acks, flow control), the client's documented low-latency way to follow a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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

BINARY = Path("/usr/sbin/nats-server")
START_TIMEOUT = 30.0
ACK_TIMEOUT = 60.0
CHECK_EVERY = 1024

T = TypeVar("T")


def _url(port: int) -> str:
    return f"nats://{LOOPBACK}:{port}"


async def _connect(port: int) -> Any:
    import nats

    # No reconnects: a lost server must fail the case, not stall it.
    return await nats.connect(_url(port), allow_reconnect=False, connect_timeout=10)


async def _add_stream(js: Any, dest: str) -> None:
    """The stream ``dest`` on subject ``dest``, file storage (idempotent)."""
    from nats.js.api import StorageType

    await js.add_stream(name=dest, subjects=[dest], storage=StorageType.FILE)


class NatsJetStream(System):
    """A private nats-server with JetStream, driven through nats-py."""

    name = "NATS JetStream"

    def __init__(self) -> None:
        self.server: Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc: Any = None
        self.js: Any = None
        self.port = 0
        self.store: Path | None = None
        self._ids = itertools.count()

    def ensure_installed(self) -> None:
        """Debian's nats-server and nats-py."""
        ensure_apt_package("nats-server", BINARY)
        ensure_python_module("nats-py")

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        """Start the server on a free loopback port, wait for it, connect."""
        self.store = workdir / "store"
        self.store.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.server = Server(
            "nats",
            [str(BINARY), "-a", LOOPBACK, "-p", str(self.port), "-js", "-sd", str(self.store)],
            workdir / "server.log",
            cwd=workdir,
        )
        wait_until(lambda: port_open(self.port), START_TIMEOUT, "nats-server", self.server)
        self.loop = asyncio.new_event_loop()
        self.nc = self._run(_connect(self.port), START_TIMEOUT)
        self.js = self.nc.jetstream(timeout=ACK_TIMEOUT)

    def _run(self, coro: Awaitable[T], seconds: float) -> T:
        """Run ``coro`` on this system's loop, bounded by ``seconds``."""
        if self.loop is None:
            raise PeerUnavailable("NATS JetStream is not started")
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, max(seconds, 0.1)))
        except TimeoutError:
            raise CaseFailed(f"NATS JetStream: no answer within {seconds:.0f} s") from None

    def stop(self) -> None:
        """Close the connection and the loop, then SIGTERM the server."""
        if self.nc is not None and self.loop is not None:
            with contextlib.suppress(Exception):
                self._run(self.nc.close(), 10)
        self.nc = self.js = None
        if self.loop is not None:
            self.loop.close()
            self.loop = None
        if self.server is not None:
            self.server.stop(grace=20)
            self.server = None

    # --- cases -------------------------------------------------------------------------

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """``count - 1`` core publishes, then one acknowledged JetStream publish."""

        async def case() -> int:
            await _add_stream(self.js, dest)
            publish = self.nc.publish
            clock.start()
            for i in range(count - 1):
                await publish(dest, payload)
                if i % CHECK_EVERY == 0:
                    deadline.check()
            ack = await self.js.publish(dest, payload, timeout=ACK_TIMEOUT)
            clock.stop()
            return int(ack.seq)

        last = self._run(case(), deadline.remaining())
        if last != count:
            raise CaseFailed(f"NATS JetStream stored {last} messages, expected {count}")

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """Groups of ``per_ack`` asynchronous publishes, each group's acks awaited."""

        async def case() -> None:
            await _add_stream(self.js, dest)
            publish = self.js.publish_async
            sent = 0
            clock.start()
            while sent < count:
                group = min(per_ack, count - sent)
                acks = [await publish(dest, payload) for _ in range(group)]
                await asyncio.gather(*acks)
                sent += group
                if sent % (CHECK_EVERY * per_ack) == 0:
                    deadline.check()
            clock.stop()

        self._run(case(), deadline.remaining())

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """An ordered push consumer from the stream's start; count every message."""

        async def case() -> int:
            done = asyncio.Event()
            got = 0

            async def on_message(_msg: Any) -> None:
                nonlocal got
                got += 1
                if got >= count:
                    done.set()

            clock.start()
            sub = await self.js.subscribe(dest, cb=on_message, ordered_consumer=True)
            try:
                await asyncio.wait_for(done.wait(), max(deadline.remaining(), 0.1))
            except TimeoutError:
                raise CaseFailed(
                    f"NATS JetStream consumer got {got} of {count} messages within {deadline.seconds:.0f} s"
                ) from None
            clock.stop()
            await sub.unsubscribe()
            return got

        return self._run(case(), deadline.remaining() + 10)

    def storage_bytes(self, dest: str) -> int:
        """Bytes allocated by the stream's directory (its message blocks and index)."""
        if self.store is None:
            raise PeerUnavailable("NATS JetStream is not started")
        return disk_bytes(self.store / "jetstream" / "$G" / "streams" / dest)

    def drop(self, dest: str) -> None:
        """Delete the stream and its messages."""
        self._run(self.js.delete_stream(dest), 60)

    def latency_client(self) -> NatsLatency:
        """The server's port; see the module docstring for the settings."""
        return NatsLatency(self.port)


@dataclass(frozen=True)
class NatsLatency:
    """Both sides of the end-to-end latency case (see ``benchmarks.e2e``)."""

    port: int

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        async def main() -> None:
            nc = await _connect(self.port)
            try:
                js = nc.jetstream(timeout=ACK_TIMEOUT)
                await _add_stream(js, dest)
                done = asyncio.Event()
                got = 0

                async def on_message(msg: Any) -> None:
                    nonlocal got
                    on_value(msg.data)
                    got += 1
                    if got >= count:
                        done.set()

                await js.subscribe(dest, cb=on_message, ordered_consumer=True)
                ready()
                with contextlib.suppress(asyncio.TimeoutError):  # the parent reports how many arrived
                    await asyncio.wait_for(done.wait(), timeout)
            finally:
                await nc.close()

        asyncio.run(main())

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        async def main() -> None:
            nc = await _connect(self.port)
            try:
                js = nc.jetstream(timeout=ACK_TIMEOUT)
                await _add_stream(js, dest)
                acks = [await js.publish_async(dest, message.value) async for message in messages.paced()]
                await asyncio.wait_for(asyncio.gather(*acks), timeout)
            finally:
                await nc.close()

        asyncio.run(main())

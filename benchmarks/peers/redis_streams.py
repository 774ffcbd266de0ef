"""Redis Streams, a modern peer: an append-only file fsynced every second.

A private ``redis-server`` (Debian's) on a free loopback port with the persistence Redis
documents as the usual choice: ``appendonly yes`` and ``appendfsync everysec`` (every
write goes to the AOF as it is applied and the file is fsynced once a second in the
background: the paper's asynchronous flush), RDB snapshots off (``save ""``) and AOF
rewrites off so that the file grows only with what a case writes. Python talks to it
through redis-py with the hiredis parser (the ``redis[hiredis]`` requirement).

Case semantics (see docs/benchmarks.md), each the client's documented fast path:
- batch 1, no ack: one ``XADD`` per message, pipelined (redis-py pipeline without
  MULTI/EXEC, 1000 commands per round trip): the producer never waits for a single
  message's reply; the last round trip's replies stop the clock, and Redis answers
  a connection's commands in order;
- 50 per ack: a pipeline of 50 ``XADD`` per round trip, its replies awaited before the
  next 50;
- consume: ``XRANGE`` with ``COUNT 1000`` per request from the start, each next range
  starting after the last ID read;
- end-to-end latency: one ``XADD`` per message (its reply awaited); the consumer process
  follows the stream with ``XREAD BLOCK`` (``COUNT 1000``), which returns as soon as an
  entry arrives.
"""

from __future__ import annotations

import contextlib
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

BINARY = Path("/usr/bin/redis-server")
FIELD = b"v"
PIPELINE = 1000  # XADDs per round trip in the batch-1 case
RANGE = 1000  # entries per XRANGE / XREAD
START_TIMEOUT = 30.0
BLOCK_MS = 500


def _client(port: int) -> Any:
    import redis

    return redis.Redis(host=LOOPBACK, port=port, socket_timeout=60, socket_connect_timeout=10)


class RedisStreams(System):
    """A private redis-server with AOF persistence, driven through redis-py."""

    name = "Redis Streams"

    def __init__(self) -> None:
        self.server: Server | None = None
        self.client: Any = None
        self.port = 0
        self.data: Path | None = None

    def ensure_installed(self) -> None:
        """Debian's redis-server and redis-py (with hiredis)."""
        ensure_apt_package("redis-server", BINARY)
        ensure_python_module("redis")

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        """Start the server on a free loopback port with AOF everysec; wait for PING."""
        self.data = workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        argv = [
            str(BINARY),
            "--port",
            str(self.port),
            "--bind",
            LOOPBACK,
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--dir",
            str(self.data),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--auto-aof-rewrite-percentage",
            "0",
        ]
        self.server = Server("redis", argv, workdir / "server.log", cwd=workdir)
        wait_until(lambda: port_open(self.port), START_TIMEOUT, "redis-server", self.server)
        self.client = _client(self.port)
        wait_until(lambda: bool(self.client.ping()), START_TIMEOUT, "redis-server PING", self.server)

    def stop(self) -> None:
        """Close the client, then SIGTERM the server (it fsyncs the AOF and exits)."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.client = None
        if self.server is not None:
            self.server.stop(grace=20)
            self.server = None

    # --- cases -------------------------------------------------------------------------

    def _xadds(self, dest: str, payload: bytes, n: int) -> None:
        """``n`` XADDs in one pipelined round trip (no MULTI/EXEC); errors raise."""
        pipe = self.client.pipeline(transaction=False)
        command = pipe.execute_command
        for _ in range(n):
            command("XADD", dest, "*", FIELD, payload)
        pipe.execute()

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """Pipelined XADDs, 1000 per round trip; no per-message wait."""
        sent = 0
        clock.start()
        while sent < count:
            group = min(PIPELINE, count - sent)
            self._xadds(dest, payload, group)
            sent += group
            deadline.check()
        clock.stop()
        self._check_length(dest, count)

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """A pipeline of ``per_ack`` XADDs per round trip."""
        sent = 0
        clock.start()
        while sent < count:
            group = min(per_ack, count - sent)
            self._xadds(dest, payload, group)
            sent += group
            if sent % (PIPELINE * per_ack) == 0:
                deadline.check()
        clock.stop()
        self._check_length(dest, count)

    def _check_length(self, dest: str, count: int) -> None:
        length = int(self.client.xlen(dest))
        if length != count:
            raise CaseFailed(f"Redis stream {dest} holds {length} entries, expected {count}")

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """XRANGE 1000 entries at a time from the start; count every entry."""
        xrange = self.client.xrange
        got = 0
        start: bytes | str = "-"
        clock.start()
        while got < count:
            entries = xrange(dest, min=start, count=RANGE)
            if not entries:
                raise CaseFailed(f"Redis stream {dest} ended after {got} of {count} entries")
            for _entry_id, _fields in entries:
                got += 1
            start = b"(" + entries[-1][0]
            deadline.check()
        clock.stop()
        return got

    def storage_bytes(self, dest: str) -> int:
        """Bytes allocated by the append-only files (one store for every stream)."""
        if self.data is None:
            raise PeerUnavailable("Redis is not started")
        return disk_bytes(self.data)

    def drop(self, dest: str) -> None:
        """Delete the stream's key."""
        self.client.delete(dest)

    def latency_client(self) -> RedisLatency:
        """The server's port; see the module docstring for the settings."""
        return RedisLatency(self.port)


@dataclass(frozen=True)
class RedisLatency:
    """Both sides of the end-to-end latency case (see ``benchmarks.e2e``)."""

    port: int

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        import time

        client = _client(self.port)
        try:
            client.ping()
            ready()
            last: bytes | str = "0-0"
            got = 0
            end = time.monotonic() + timeout
            while got < count and time.monotonic() < end:
                reply = client.xread({dest: last}, count=RANGE, block=BLOCK_MS)
                for _stream, entries in reply or ():
                    for entry_id, fields in entries:
                        on_value(fields[FIELD])
                        got += 1
                        last = entry_id
        finally:
            client.close()

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        client = _client(self.port)
        try:
            command = client.execute_command
            for message in messages:
                command("XADD", dest, "*", FIELD, message.value)
        finally:
            client.close()

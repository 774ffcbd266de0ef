"""The follower's fetch loop: one connection and one task per leader broker.

Followers use the ordinary fetch api, flagged with ``replica`` (their broker id) and
each partition's leader epoch: the leader then reads up to its log end instead of
the high watermark, records the fetch offset as the follower's log end, and refuses
a fetch from another epoch. The bytes are appended as they are (after a CRC scan), so
replicas are byte-identical and offsets agree everywhere. What an answer means for
the local log is :mod:`.follower`'s business; this module only moves bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Protocol

from broker.common.background import BackgroundTasks
from broker.common.errors import AuthenticationError, LogferryError, ProtocolError
from broker.common.ratelimit import RateLimitedLog
from broker.common.retry import Retry
from broker.coordination.registry import ClusterView
from broker.net import transport
from broker.net.sasl_client import authenticate_stream
from broker.replication.roles import Replica
from broker.replication.services import ReplicationConfig, ReplicationServices
from broker.replication.throttle import Throttle
from broker.wire import protocol
from broker.wire.fetch import (
    ReplicaFetchAnswerPart,
    ReplicaFetchPart,
    encode_fetch_request,
    parse_fetch_answer,
    payload_slices,
)

log = logging.getLogger("logferry.replication")

RESPONSE_GRACE_S = 10.0


class FetchHost(Protocol):
    """What a fetcher needs from the replica manager: who we are, where leaders are,
    the settings, and where fetched answers go."""

    me: int
    config: ReplicationConfig
    services: ReplicationServices
    view: ClusterView
    throttle: Throttle

    def fetch_position(self, replica: Replica) -> int: ...

    def on_fetched(
        self, replica: Replica, epoch: int, offset: int, result: ReplicaFetchAnswerPart, data: memoryview
    ) -> None: ...


class ReplicaFetcher:
    """Copies every partition this broker follows from one leader."""

    def __init__(self, manager: FetchHost, leader: int):
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], Replica] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._corr = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._stopping = False
        self._auth_warnings = RateLimitedLog(log, 60.0)
        """Refused credentials: a WARNING once a minute, INFO between."""
        self._timed_out = False
        """The connection was aborted because an answer was overdue."""

    def start(self, background: BackgroundTasks) -> None:
        """Start copying, as a task of ``background`` (a crash stops the broker)."""
        self._task = background.start(self._run(), f"replica-fetcher-{self.leader}")

    async def stop(self) -> None:
        self._stopping = True  # the loops end even if a cancellation were lost
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # a crash was reported when it happened
        self._close()

    def add(self, replica: Replica) -> None:
        self.partitions[replica.key] = replica
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def _run(self) -> None:
        config = self.manager.config
        retry = Retry(initial=0.05, maximum=1.0)
        while not self._stopping:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            info = self.manager.view.brokers.get(self.leader)
            services = self.manager.services
            address = info.address(services.leader_listener) if info is not None else None
            if info is None or address is None:
                # the leader is not registered (yet), or registered without the
                # inter-broker listener (it runs older settings): wait for its next one
                await asyncio.sleep(0.2)
                continue
            host, port = address
            try:
                reader, self._writer = await transport.open_stream(
                    host,
                    port,
                    timeout=5.0,
                    peer=f"leader broker {self.leader}",
                    ssl_context=services.leader_ssl_context,
                    server_hostname=services.leader_server_hostname,
                )
                if services.leader_sasl is not None:
                    await authenticate_stream(
                        reader, self._writer, services.leader_sasl, f"leader broker {self.leader}"
                    )
                retry.reset()  # connected: the next failure starts the backoff afresh
                self._timed_out = False
                await self._fetch_loop(reader, self._writer, config)
            except asyncio.CancelledError:
                raise
            except (TimeoutError, OSError, LogferryError, ConnectionError) as exc:
                # refused credentials stay refused until an operator acts: say so, once a minute
                loud = (
                    isinstance(exc, AuthenticationError)
                    and not self._stopping
                    and self._auth_warnings.allow() is not None
                )
                log.log(
                    logging.WARNING if loud else logging.INFO,
                    "replica fetch from broker %d (%s:%d) failed: %s; retrying",
                    self.leader,
                    host,
                    port,
                    exc or type(exc).__name__,
                )
            finally:
                self._close()
            await asyncio.sleep(retry.next_delay())

    async def _fetch_loop(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, config: ReplicationConfig
    ) -> None:
        decoder = protocol.FrameDecoder(max_frame_bytes=1 << 31)
        loop = asyncio.get_running_loop()
        manager = self.manager
        while self.partitions and not self._stopping:
            now = loop.time()
            asked = []
            reconciling = False
            throttle, rate, held_back = manager.throttle, 0, False
            for replica in list(self.partitions.values()):
                if replica.retry_at > now:
                    continue
                max_bytes, reserved = config.replica_fetch_max_bytes, 0
                if replica.throttle > 0:  # copying for a reassignment (see .throttle)
                    rate = replica.throttle
                    max_bytes = throttle.allowance(rate, time.monotonic(), max_bytes)
                    if max_bytes == 0:
                        held_back = True
                        continue
                    reserved = max_bytes
                    throttle.spend(reserved)  # reserved: other fetches see it gone
                reconciling |= replica.reconcile_at is not None
                asked.append((replica, replica.epoch, manager.fetch_position(replica), max_bytes, reserved))
            if not asked:
                await asyncio.sleep(throttle.delay(rate) if held_back else 0.05)
                continue
            wait_ms = 0 if reconciling else config.replica_fetch_wait_max_ms
            if held_back:
                wait_ms = min(wait_ms, int(throttle.delay(rate) * 1000) + 1)
            corr = next(self._corr)
            writer.write(
                protocol.encode_request(
                    protocol.FETCH,
                    corr,
                    encode_fetch_request(
                        [
                            ReplicaFetchPart(r.key[0], r.key[1], offset, max_bytes, epoch)
                            for r, epoch, offset, max_bytes, _ in asked
                        ],
                        wait_ms,
                        1,
                        replica=manager.me,
                    ),
                )
            )
            await writer.drain()
            # A leader that does not answer within the long poll plus a grace period
            # is taken for dead: a timer handle aborts the connection (cheaper per
            # fetch than asyncio.timeout, whose cancellation machinery costs about a
            # tenth of a follower's CPU at one small fetch per append).
            overdue = loop.call_later(wait_ms / 1000 + RESPONSE_GRACE_S, self._overdue, writer)
            try:
                frame = await self._read_frame(reader, decoder)
            finally:
                overdue.cancel()
            header = frame.header
            if header.get("id") != corr:
                raise ProtocolError(f"response id {header.get('id')} != request id {corr}")
            if header.get("err"):
                raise ProtocolError(f"leader answered error {header.get('err')}: {header.get('msg')}")
            results = parse_fetch_answer(header, replica=True)
            # zip without strict=: one result per part asked; a follower's per-fetch path
            for (replica, epoch, offset, _, reserved), result, data in zip(  # noqa: B905
                asked, results, payload_slices(results, frame.payload)
            ):
                if reserved:
                    throttle.spend(len(data) - reserved)  # settle the reservation
                replica.leader_end = result.log_end
                manager.on_fetched(replica, epoch, offset, result, data)

    def _overdue(self, writer: asyncio.StreamWriter) -> None:
        """The leader's answer is overdue: drop the connection (the fetch loop then
        reports a timeout and connects again)."""
        self._timed_out = True
        writer.transport.abort()

    async def _read_frame(self, reader: asyncio.StreamReader, decoder: protocol.FrameDecoder) -> protocol.Frame:
        while True:
            frame = decoder.next_frame()
            if frame is not None:
                return frame
            try:
                chunk = await reader.read(1 << 20)
            except ConnectionError:
                chunk = b""
            if not chunk:
                if self._timed_out:
                    self._timed_out = False
                    raise TimeoutError(
                        f"leader broker {self.leader} did not answer a fetch within its wait plus {RESPONSE_GRACE_S:g}s"
                    )
                raise ConnectionError("the leader closed the connection")
            decoder.feed(chunk)


__all__ = ["ReplicaFetcher"]

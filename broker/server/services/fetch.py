"""The fetch api: file slices for consumers and followers, with long polling.

A fetch reads each part as a file slice (sent later with sendfile, never copied into
Python) and answers at once when ``min_bytes`` are there, when a part failed, or when
``max_wait_ms`` has passed. Otherwise it waits: a consumer's fetch until a flush (or a
follower's progress) moves a visible end, a follower's fetch until an append moves
a log end. A consumer's long poll is answered by the wake-up itself when the new bytes
are enough (:class:`_LongPoll`), not a loop turn later by its task. The service gets a
typed request and delivers a typed :class:`FetchResult` (its file slices, no wire
format) to the front end's reply, never seeing the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker.common.acl import Operation
from broker.common.errors import LogferryError
from broker.common.principal import Principal
from broker.server.broker_metrics import BrokerMetrics
from broker.server.security.authorizer import ALLOW_ALL, Authorizer
from broker.server.services.results import FetchReply, FetchResult
from broker.server.services.routing import PartitionRouter
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PartitionLog
from broker.wire.fetch import (
    FetchAnswerPart,
    FetchPart,
    FetchRequest,
    ReplicaFetchAnswerPart,
    ReplicaFetchPart,
)

Key = tuple[str, int]
Read = Callable[[list[Any]], tuple[list[Any], list[Any], int]]
log = logging.getLogger("logferry.broker")


class FetchService:
    """Answers fetches and keeps the long polls waiting for data."""

    def __init__(
        self,
        router: PartitionRouter,
        replication: Any,
        logs: LogManager,
        metrics: BrokerMetrics,
        shutting_down: Callable[[], bool],
        authorizer: Authorizer = ALLOW_ALL,
    ):
        self.router = router
        self.replication = replication
        self.logs = logs
        self.metrics = metrics
        self.shutting_down = shutting_down
        self.authorizer = authorizer
        self.waiters: dict[Key, list[Any]] = {}
        """Consumers' long polls (:class:`_LongPoll`), by partition: woken when the
        visible end moves."""
        self.append_waiters: dict[Key, list[asyncio.Future[None]]] = {}
        """Followers' long polls, by partition: woken when the log end moves."""

    # -- waking long polls -----------------------------------------------------------

    def wake_consumers(self, key: Key) -> None:
        """The visible end of ``key`` moved: answer the consumers' long polls."""
        for waiter in self.waiters.pop(key, ()):
            if not waiter.done():
                waiter.wake()

    def wake_fetchers(self, key: Key) -> None:
        """``key`` got new bytes (or changed role): answer the followers' long polls."""
        for waiter in self.append_waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_append(self, keys: list[Key], timeout_s: float) -> None:
        """Return when one of ``keys`` gets new bytes (a follower's long poll's wake-up)
        or after ``timeout_s``: a read_committed fetch waiting for a transaction's marker."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self.append_waiters.setdefault(key, []).append(future)
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiters = self.append_waiters.get(key)
                if waiters is not None and future in waiters:
                    waiters.remove(future)
                    if not waiters:
                        del self.append_waiters[key]

    def release_all(self) -> None:
        """The broker is stopping: every long poll answers with what it has."""
        for waiters in (*self.waiters.values(), *self.append_waiters.values()):
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    # -- the api ---------------------------------------------------------------------

    async def fetch(self, request: FetchRequest, principal: Principal, reply: FetchReply) -> None:
        """Read the parts, long-poll while too little is readable, then deliver the
        result to ``reply`` (once). Raises a :class:`LogferryError` that refuses the
        whole request (a follower's fetch without the right to replicate)."""
        requests = request.parts
        read: Read
        if request.replica is None:
            read, waiters = lambda parts: self._read_slices(parts, principal), self.waiters
        else:  # a follower: only brokers may replicate (and move the ISR)
            self.authorizer.check_cluster(principal, Operation.ALTER)
            read, waiters = self._replica_reader(request.replica), self.append_waiters
        polled = await self._poll(read, waiters, requests, request, reply)
        if polled is not None:  # else the wake-up answered already
            self._answer(request, reply, *polled)

    def _answer(
        self, request: FetchRequest, reply: FetchReply, results: list[Any], slices: list[Any], total: int
    ) -> None:
        counter = self.metrics.bytes_out if request.replica is None else self.metrics.replica_bytes_out
        # zip without strict=: one slice per part by construction; per fetch
        for part, piece in zip(request.parts, slices):  # noqa: B905
            if piece is not None and piece.count:
                counter[(part.topic, part.partition)] += piece.count
        reply(FetchResult(results, slices, total))

    def _ready(self, request: FetchRequest, results: list[Any], total: int) -> bool:
        """Whether an answer of ``total`` bytes (and these results) goes out now."""
        return total >= request.min_bytes or self.shutting_down() or any(r.error for r in results)

    async def _poll(
        self, read: Read, waiters: dict[Key, list[Any]], requests: list[Any], request: FetchRequest, reply: FetchReply
    ) -> tuple[list[Any], list[Any], int] | None:
        """Read until there is enough or the time is up; None: a consumer's wake-up
        read and answered it (:class:`_LongPoll`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        while True:
            results, slices, total = read(requests)
            if deadline - loop.time() <= 0 or self._ready(request, results, total):
                return results, slices, total
            # The wait: a future in the partitions' waiter lists, which a flush (or an
            # append) resolves, and one timer handle for max_wait_ms (cheaper per long
            # poll than asyncio.timeout's cancellation machinery).
            future = loop.create_future()
            waiter: Any = future
            if waiters is self.waiters:
                waiter = _LongPoll(self, read, request, reply, future)
            keys = [(part.topic, part.partition) for part in requests]
            for key in keys:
                waiters.setdefault(key, []).append(waiter)
            timer = loop.call_at(deadline, _time_up, future)
            try:
                await future
            finally:
                timer.cancel()
                for key in keys:
                    waiting = waiters.get(key)
                    if waiting and waiter in waiting:
                        waiting.remove(waiter)
            if waiter is not future and waiter.answered:
                return None

    def _read_slices(self, requests: list[FetchPart], principal: Principal) -> tuple[list[Any], list[Any], int]:
        results: list[FetchAnswerPart] = []
        slices: list[Any] = []
        total = 0
        for topic, partition, offset, max_bytes in requests:
            try:  # a denied part answers at once (an error), so it is checked only once
                self.authorizer.check_topic(principal, Operation.CONSUME, topic)
                plog = self.router.leader_log(topic, partition)
                piece = plog.read_slice(offset, max(max_bytes, 1))
                results.append(
                    FetchAnswerPart(topic, partition, 0, None, plog.start_offset, plog.visible_end, piece.count)
                )
                slices.append(piece)
                total += piece.count
            except LogferryError as exc:
                start = getattr(exc, "start", None)
                end = getattr(exc, "end", None)
                results.append(FetchAnswerPart(topic, partition, exc.code, str(exc), start, end, 0))
                slices.append(None)
        return results, slices, total

    def _replica_reader(self, follower: int) -> Read:
        """A reader for a follower's fetch: checks the epoch, records the follower's
        progress (once per request), reads up to the log end, adds the log end."""
        recorded: set[Key] = set()
        replication = self.replication

        def read(requests: list[ReplicaFetchPart]) -> tuple[list[Any], list[Any], int]:
            results: list[ReplicaFetchAnswerPart] = []
            slices: list[Any] = []
            total = 0
            for topic, partition, offset, max_bytes, epoch in requests:
                try:
                    replica = replication.check_replica_fetch(topic, partition, epoch)
                    plog = replica.plog
                    if (topic, partition) not in recorded:
                        recorded.add((topic, partition))
                        replication.record_replica_fetch(replica, follower, offset)
                    piece = plog.read_slice(offset, max(max_bytes, 1), upto=plog.end_offset)
                    results.append(
                        ReplicaFetchAnswerPart(
                            topic,
                            partition,
                            0,
                            None,
                            plog.start_offset,
                            plog.visible_end,
                            piece.count,
                            plog.end_offset,
                            *_moved(plog),
                        )
                    )
                    slices.append(piece)
                    total += piece.count
                except LogferryError as exc:
                    plog = self.logs.get(topic, partition)
                    results.append(
                        ReplicaFetchAnswerPart(
                            topic,
                            partition,
                            exc.code,
                            str(exc),
                            getattr(exc, "start", None),
                            getattr(exc, "end", None),
                            0,
                            plog.end_offset if plog is not None else None,
                            *_moved(plog),
                        )
                    )
                    slices.append(None)
            return results, slices, total

        return read


class _LongPoll:
    """A consumer's waiting fetch, answered by the wake-up itself.

    When a flush moves a visible end, :meth:`wake` reads the parts and, if the answer
    is ready, writes it right there and resolves the future, so the task only ends;
    else (or if anything fails) it resolves the future and the task reads again, as
    every long poll did before. The answer goes out in the loop turn of the flush,
    not one turn later: about 25 us at one message per round, traced."""

    __slots__ = ("service", "read", "request", "reply", "future", "answered")

    def __init__(
        self, service: FetchService, read: Read, request: FetchRequest, reply: FetchReply, future: asyncio.Future[None]
    ):
        self.service = service
        self.read = read
        self.request = request
        self.reply = reply
        self.future = future
        self.answered = False

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, value: None) -> None:
        """Resolve without reading (the broker stops: the task answers)."""
        self.future.set_result(value)

    def wake(self) -> None:
        """Read and answer now if ready, then resolve the future."""
        service = self.service
        try:
            results, slices, total = self.read(self.request.parts)
            if service._ready(self.request, results, total):
                service._answer(self.request, self.reply, results, slices, total)
                self.answered = True
        except Exception:  # the task reads again and answers (or fails) as always
            log.exception("answering a long poll on wake-up failed")
        self.future.set_result(None)


def _moved(plog: PartitionLog | None) -> tuple[int, int] | tuple[()]:
    """A replica answer's last two fields when the leader's log start was moved inside a
    segment (records deleted up to a message): its message, and its batch's first."""
    start = None if plog is None else plog.moved_start
    return () if start is None else (start.message, start.batch_message)


def _time_up(waiter: asyncio.Future[None]) -> None:
    """A long poll's max_wait_ms passed: answer with what there is."""
    if not waiter.done():
        waiter.set_result(None)


__all__ = ["FetchService"]

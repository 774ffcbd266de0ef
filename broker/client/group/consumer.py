"""``GroupConsumer``: the paper's consumer groups (section 3.2), see docs/groups.md.

Members of a group share the partitions of the topics they subscribe to; each
partition is consumed by one member at a time; offsets live in ZooKeeper; groups are
independent of each other. This module is the public face and the wiring: the
coordinator (:mod:`broker.client.group.rebalance`) decides what this member owns, the
fetcher (:mod:`broker.client.group.fetcher`) pulls it, readers (:mod:`broker.client.group.streams`)
hand it to the application, and a committer thread writes processed positions every
``auto_commit_ms``.

Threads of one member: the coordinator, the fetcher, the committer, kazoo's own, one
reader thread per broker connection, and the application's.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypedDict

from broker.client.consumer import Message, SimpleConsumer
from broker.client.group.access import check_group_access
from broker.client.group.assignment import STRATEGIES, Subscription, TopicPartition
from broker.client.group.fetcher import Fetcher
from broker.client.group.lag import group_lag
from broker.client.group.rebalance import Coordinator, MemberState, connect
from broker.client.group.streams import (
    ConsumerClosedError,
    GroupState,
    MessageStream,
    RawBatch,
    Reader,
    StreamQueue,
)
from broker.client.group.window import FetchWindow
from broker.common.acl import Operation
from broker.common.errors import AuthorizationError, ConfigError, LogferryError
from broker.common.names import validate_group_name
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig

log = logging.getLogger("logferry.group")

StartAt = int | str | _dt.datetime
"""``"earliest"``, ``"latest"``, a byte offset or a datetime."""


class _CoordinatorSettings(TypedDict):
    """The constructor's arguments that wait for :meth:`GroupConsumer._join`."""

    strategy: str
    session_timeout: float
    max_bytes: int
    on_assign: Callable[[list[TopicPartition]], None] | None
    on_revoke: Callable[[list[TopicPartition]], None] | None


class PartitionNotOwnedError(LogferryError):
    """The partition is not (or no longer) assigned to this member; seek it where it is."""


def resolve_position(simple: SimpleConsumer, topic: str, partition: int, to: StartAt) -> tuple[int, int]:
    """``earliest``/``latest``/an offset/a datetime -> a position ``(offset, skip)``."""
    if isinstance(to, _dt.datetime):
        return simple.resolve_position(topic, partition, to)
    if isinstance(to, bool) or not (to in ("earliest", "latest") or (isinstance(to, int) and to >= 0)):
        raise ConfigError(f"seek to 'earliest', 'latest', an offset or a datetime, not {to!r}")
    return simple.resolve_start(topic, partition, to), 0


def default_consumer_id() -> str:
    """``<host>-<pid>-<8 hex>``: unique, and says where the member runs."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GroupConsumer:
    """A member of a consumer group; see docs/groups.md for the full contract.

    Subscribe either at construction (``topics=[...]`` or ``pattern=regex``; then read
    with ``for msg in consumer``, :meth:`poll` or :meth:`streams`) or later with the
    paper's :meth:`create_message_streams`. A message counts as processed when the
    reader that handed it out is asked for the next one; only processed positions are
    committed (at-least-once, nothing skipped).
    """

    def __init__(
        self,
        group: str,
        topics: Sequence[str] | None = None,
        pattern: str | None = None,
        *,
        zk: str | None = None,
        brokers: Sequence[str] | None = None,
        start: str = "earliest",
        auto_commit_ms: int = 5000,
        session_timeout: float = 6.0,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 500,
        consumer_id: str | None = None,
        num_streams: int = 1,
        strategy: str = "range",
        queue_bytes: int = 4 * 1024 * 1024,
        iter_timeout: float | None = None,
        request_timeout: float = 30.0,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        raw_batches: bool = False,
        on_gap: Callable[[str, int, int, int], bool] | None = None,
        fetch_requests_per_broker: int = 1,
        fetch_window_bytes: int = 0,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
    ):
        if brokers is not None or zk is None:
            raise ConfigError(
                "consumer groups coordinate through ZooKeeper: pass zk= (a connect string with chroot), not brokers="
            )
        validate_group_name(group)
        if topics is not None and pattern is not None:
            raise ConfigError("subscribe with topics= or pattern=, not both")
        if isinstance(topics, str):
            raise ConfigError("topics= is a list of names (got a single string)")
        if start not in ("earliest", "latest"):
            raise ConfigError(f"start must be 'earliest' or 'latest', not {start!r}")
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
        if (
            num_streams < 1
            or max_bytes < 1
            or queue_bytes < 1
            or session_timeout <= 0
            or fetch_requests_per_broker < 1
            or fetch_window_bytes < 0
        ):
            raise ConfigError(
                "num_streams, max_bytes, queue_bytes, session_timeout and "
                "fetch_requests_per_broker must be positive (fetch_window_bytes "
                "not negative)"
            )
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        self.group = group
        self.consumer_id = consumer_id or default_consumer_id()
        validate_group_name(self.consumer_id, "consumer id")
        self.start = start
        self.auto_commit_ms = auto_commit_ms
        self.num_streams = num_streams
        self._zk_connect = zk
        self._settings = _CoordinatorSettings(
            strategy=strategy,
            session_timeout=session_timeout,
            max_bytes=max_bytes,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )
        self._iter_timeout = iter_timeout
        self._state = GroupState(queue_bytes)
        self._simple = SimpleConsumer(
            zk=zk,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            request_timeout=request_timeout,
            tls=tls,
            sasl=sasl,
            listener=listener,
        )
        try:
            self._zk = connect(zk, session_timeout)
        except BaseException:
            self._simple.close()
            raise
        try:  # refused before registering or fetching anything (docs/security.md)
            check_group_access(self._zk, group, Operation.CONSUME)
        except BaseException:
            from broker.coordination import zk as _zk

            _zk.close(self._zk)
            self._simple.close()
            raise
        self._commit_now = threading.Event()
        self.raw_batches = raw_batches
        """Deliver undecoded batches through :meth:`poll_batches` instead of messages."""
        self._fetcher = Fetcher(
            self._state,
            self._simple,
            start,
            max_wait_ms,
            request_timeout,
            on_resolved=self._commit_now.set,
            raw_batches=raw_batches,
            on_gap=on_gap,
            requests_per_broker=fetch_requests_per_broker,
            window=FetchWindow(max_bytes, fetch_window_bytes) if fetch_window_bytes else None,
        )
        self._coordinator: Coordinator | None = None
        self._committer: threading.Thread | None = None
        self._queues: list[StreamQueue] = []
        self._topic_queues: dict[str, list[StreamQueue]] = {}
        self._reader: Reader | None = None
        self._streams: list[MessageStream] | None = None
        self._mode: str | None = None  # "consumer" (iteration/poll/streams()) or "paper"
        self._closed = False
        self._close_lock = threading.Lock()
        if topics is not None:
            self._join(Subscription({t: num_streams for t in topics}, None), shared=True)
        elif pattern is not None:
            self._join(Subscription(None, pattern, num_streams), shared=True)

    # -- subscribing -------------------------------------------------------------------------

    def create_message_streams(self, topic_count: dict[str, int]) -> dict[str, list[MessageStream]]:
        """The paper's API: ``{"topic": n}`` -> ``{"topic": [n MessageStream]}``.

        Joins the group with that subscription. Only for a consumer constructed
        without ``topics``/``pattern``, and only once.
        """
        if self._coordinator is not None:
            raise ConfigError(
                "this consumer is already subscribed; create a GroupConsumer without "
                "topics= or pattern= to use create_message_streams"
            )
        if not topic_count or not all(isinstance(n, int) and n > 0 for n in topic_count.values()):
            raise ConfigError("create_message_streams needs {topic: streams} with streams >= 1")
        out: dict[str, list[MessageStream]] = {}
        for topic, n in sorted(topic_count.items()):
            queues = [StreamQueue(len(self._queues) + i) for i in range(n)]
            self._queues.extend(queues)
            self._topic_queues[topic] = queues
            out[topic] = [MessageStream(self._state, q, self._iter_timeout, (topic,)) for q in queues]
        self._mode = "paper"
        self._join(Subscription(dict(topic_count), None), shared=False)
        return out

    def _join(self, subscription: Subscription, shared: bool) -> None:
        if shared:
            self._queues = [StreamQueue(i) for i in range(self.num_streams)]
        settings = self._settings
        self._coordinator = Coordinator(
            client=self._zk,
            group=self.group,
            consumer_id=self.consumer_id,
            subscription=subscription,
            start=self.start,
            strategy=settings["strategy"],
            state=self._state,
            fetcher=self._fetcher,
            stream_for=self._shared_queue if shared else self._topic_queue,
            max_bytes=settings["max_bytes"],
            session_timeout=settings["session_timeout"],
            on_assign=settings["on_assign"],
            on_revoke=settings["on_revoke"],
        )
        self._fetcher.start()
        self._coordinator.start()
        self._committer = threading.Thread(
            target=self._commit_loop, daemon=True, name=f"logferry-group-commit-{self.group}"
        )
        self._committer.start()

    def _shared_queue(self, topic: str, index: int) -> StreamQueue:
        return self._queues[index % len(self._queues)]

    def _topic_queue(self, topic: str, index: int) -> StreamQueue:
        queues = self._topic_queues[topic]
        return queues[index % len(queues)]

    # -- reading -------------------------------------------------------------------------------

    def streams(self) -> list[MessageStream]:
        """This member's ``num_streams`` streams (topics=/pattern= subscriptions).

        Read each from its own thread; do not also iterate or poll the consumer.
        """
        self._use("streams")
        if self._streams is None:
            self._streams = [MessageStream(self._state, q, self._iter_timeout, ()) for q in self._queues]
        return list(self._streams)

    def _use(self, how: str) -> None:
        if self._coordinator is None:
            raise ConfigError("subscribe first: GroupConsumer(topics=...|pattern=...) or create_message_streams()")
        if self._mode == "paper":
            raise ConfigError("this consumer delivers through the streams create_message_streams returned; read those")
        if self._mode is not None and self._mode != how:
            raise ConfigError("read either through streams() or by iterating/polling the consumer, not both")
        self._mode = how

    def _main_reader(self, raw: bool = False) -> Reader:
        if raw != self.raw_batches:
            raise ConfigError(
                "a consumer created with raw_batches=True is read with poll_batches() only; without it, read messages"
                if self.raw_batches
                else "poll_batches() needs GroupConsumer(..., raw_batches=True)"
            )
        if self._reader is None:
            self._use("consumer")
            self._reader = Reader(self._state, self._queues, self._iter_timeout)
        return self._reader

    def __iter__(self) -> Iterator[Message]:
        self._main_reader()
        return self

    def __next__(self) -> Message:
        """The next message of any owned partition (acknowledges the previous one)."""
        return next(self._main_reader())

    def poll(self, timeout: float = 1.0, max_messages: int = 10_000) -> list[Message]:
        """Ready messages (waiting up to ``timeout`` s); acknowledges the previous poll's."""
        return self._main_reader().poll(timeout, max_messages)

    def poll_batches(
        self, timeout: float = 1.0, max_bytes: int = 8 * 1024 * 1024, acknowledge: bool = True
    ) -> list[tuple[TopicPartition, RawBatch]]:
        """Raw mode: ready ``((topic, partition), RawBatch)`` pairs, about ``max_bytes`` worth.

        Batches are CRC-checked, never decoded. Like :meth:`poll`, this call acknowledges
        everything the previous call handed out, so call it again only once those batches
        are safely processed. Each partition's batches come in log order.

        Pipelines pass ``acknowledge=False``: nothing is acknowledged by the call, and
        :meth:`acknowledge_batches` says which batches are processed.
        """
        return self._main_reader(raw=True).poll_batches(timeout, max_bytes, acknowledge)

    def acknowledge_batches(self, positions: dict[TopicPartition, int]) -> None:
        """Raw mode: batches handed out that end at or before ``positions[tp]`` are processed.

        Only processed positions are committed; a rebalance waits (bounded) for batches
        handed out and not yet acknowledged, as for any message in flight.
        """
        self._main_reader(raw=True).acknowledge_through(positions)

    # -- positions ---------------------------------------------------------------------------

    def commit(self) -> int:
        """Commit every processed position that moved; returns how many were written.

        Raises ZooKeeperError while ZooKeeper is unreachable.
        """
        if self._coordinator is None:
            return 0
        return self._coordinator.commit()

    def seek(self, topic: str, partition: int, to: StartAt) -> int:
        """Move an owned partition to ``to``; returns the offset it will fetch from.

        ``to`` is ``"earliest"``, ``"latest"``, a byte offset (a batch boundary) or a
        datetime (the first message stamped at or after it). Queued and in-flight messages of the
        partition are dropped, and the new position is committed at once so it holds
        across a crash or a rebalance.
        """
        state = self._state
        with state.lock:
            ps = state.partitions.get((topic, partition))
        if ps is None or not ps.active:
            raise PartitionNotOwnedError(
                f"{topic}-{partition} is not assigned to {self.consumer_id} (it owns "
                f"{self.assignment()}); seek it on its owner or use `logferry group seek`"
            )
        position = resolve_position(self._simple, topic, partition, to)
        with state.lock:
            if state.partitions.get((topic, partition)) is not ps or not ps.active:
                raise PartitionNotOwnedError(f"{topic}-{partition} was revoked during the seek")
            state.stop([ps])
            assert self._coordinator is not None
            self._coordinator.start_partition(ps, ps.stream_index, position)
            state.fetch_wake.notify_all()
        log.info("group %s: %s-%d seeks to %s = position %s", self.group, topic, partition, to, position)
        self._commit_now.set()
        return position[0]

    def pause(self, topic: str, partition: int) -> None:
        """Stop fetching an owned partition until :meth:`resume`, a :meth:`seek` or a new
        assignment (what is queued is still handed out). For a pipeline that cannot use a
        partition's data for a while (the mirror's topic refused by the target's ACLs)."""
        with self._state.lock:
            ps = self._state.partitions.get((topic, partition))
            if ps is not None and ps.active:
                ps.retry_at = float("inf")

    def resume(self, topic: str, partition: int) -> None:
        """Fetch a partition :meth:`pause` stopped again, from where it stopped."""
        state = self._state
        with state.lock:
            ps = state.partitions.get((topic, partition))
            if ps is not None and ps.active and ps.retry_at == float("inf"):
                ps.retry_at = 0.0
                state.fetch_wake.notify_all()

    def seek_all(self, to: StartAt) -> dict[TopicPartition, int]:
        """:meth:`seek` every partition this member owns now; returns their new offsets."""
        return {tp: self.seek(*tp, to) for tp in self.assignment()}

    # -- introspection --------------------------------------------------------------------------

    def assignment(self) -> list[TopicPartition]:
        """The partitions this member owns and consumes now, sorted."""
        with self._state.lock:
            return sorted(tp for tp, ps in self._state.partitions.items() if ps.active)

    def metrics(self) -> dict[str, Any]:
        """State, rebalance figures, counters and per-partition positions and lag.

        Lag is :func:`broker.client.group_lag` of the last visible end a fetch saw and
        this member's last commit (the same formula as ``logferry group describe``).
        """
        coordinator = self._coordinator
        state = self._state
        with state.lock:
            state.materialize()
            partitions = {}
            for (topic, p), ps in sorted(state.partitions.items()):
                lag = group_lag(ps.log_end, ps.committed, ps.log_start, ps.avg_message_bytes)
                partitions[f"{topic}-{p}"] = {
                    "stream": ps.stream_index,
                    "active": ps.active,
                    "position": ps.position,
                    "committed": ps.committed,
                    "fetch_offset": ps.fetch_offset,
                    "log_end": ps.log_end if ps.log_end >= 0 else None,
                    "lag_bytes": lag.bytes if lag else None,
                    "lag_messages": lag.messages if lag else None,
                }
            queued = sum(q.nbytes for q in self._queues)
            delivered = state.delivered
        out: dict[str, Any] = {
            "group": self.group,
            "consumer_id": self.consumer_id,
            "state": coordinator.member_state.value if coordinator else "UNSUBSCRIBED",
            "partitions": partitions,
            "queued_bytes": queued,
            "messages_delivered": delivered,
            "fetch_requests_outstanding": self._fetcher.outstanding(),
        }
        out.update(self._fetcher.stats)
        if coordinator is not None:
            out.update(coordinator.stats)
            out["rebalance_ms"] = list(coordinator.stats["rebalance_ms"])
            out["waiting_for"] = {f"{t}-{p}": owner for (t, p), owner in coordinator.waiting_for.items()}
        return out

    @property
    def state(self) -> str:
        """The member's coordination state (``MemberState`` value)."""
        return self._coordinator.member_state.value if self._coordinator else "UNSUBSCRIBED"

    # -- committing in the background -----------------------------------------------------------

    def _commit_loop(self) -> None:
        interval = self.auto_commit_ms / 1000 if self.auto_commit_ms and self.auto_commit_ms > 0 else None
        while True:
            self._commit_now.wait(interval)
            self._commit_now.clear()
            if self._closed:
                return
            coordinator = self._coordinator
            if coordinator is None or coordinator.member_state in (MemberState.SUSPENDED, MemberState.LOST):
                continue
            try:
                coordinator.commit()
            except AuthorizationError as exc:  # not retriable: the reader raises it
                self._state.fail(exc)
                return
            except LogferryError as exc:
                log.debug("group %s: auto-commit skipped: %s", self.group, exc)
            except Exception:
                log.exception("group %s: auto-commit failed", self.group)

    # -- closing --------------------------------------------------------------------------------

    def close(self, processed: bool = True, timeout: float = 10.0) -> None:
        """Commit, release every partition and deregister; the group rebalances at once.

        ``processed`` says whether the messages handed out by the last ``next()`` or
        ``poll()`` of each reader were processed (the application stopped asking because
        it is done); ``with`` blocks pass False when they exit on an exception, so such a
        message is delivered again rather than lost.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        state = self._state
        with state.lock:
            if processed:
                for reader in state.readers:
                    reader._ack()
            state.closed = True
            state.invalidate_readers()
            state.data_ready.notify_all()
            state.fetch_wake.notify_all()
            state.acked.notify_all()
        self._commit_now.set()
        try:
            if self._committer is not None:
                self._committer.join(timeout)
            if self._coordinator is not None:
                self._coordinator.stop(timeout)
            self._fetcher.close(timeout)
            if self._coordinator is not None:
                self._coordinator.leave()
            else:
                from broker.coordination import zk as _zk

                _zk.close(self._zk)
        finally:
            self._simple.close()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(processed=exc_type is None)

    def __repr__(self) -> str:
        return f"GroupConsumer(group={self.group!r}, id={self.consumer_id!r}, state={self.state})"


__all__ = ["ConsumerClosedError", "GroupConsumer", "MessageStream", "PartitionNotOwnedError"]

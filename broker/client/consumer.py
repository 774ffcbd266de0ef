"""The simple consumer: pull batches of a partition from a given offset.

The broker keeps no consumer state; the consumer names the offset of every fetch and
advances by the length of the whole batches it received. Batches are CRC-checked and
decoded in one msgpack call each; messages are produced from the decoded columns.
"""

from __future__ import annotations

import datetime as _dt
import ssl
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from broker.client.cluster import Cluster
from broker.client.connection import ResponseFuture
from broker.common.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    LeaderNotAvailableError,
    LogferryError,
    NotLeaderError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from broker.common.retry import Retry
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.wire import protocol, records
from broker.wire.fetch import FetchPart, encode_fetch_request, parse_fetch_answer
from broker.wire.records import Batch

# Answers that mean "ask the partition's current leader": metadata is refreshed and
# the request retried.
_ROUTING_ERRORS = (NotLeaderError.code, LeaderNotAvailableError.code, UnknownTopicOrPartitionError.code)


class Message(NamedTuple):
    """One consumed message."""

    topic: str
    """Topic it was read from."""
    partition: int
    """Partition it was read from."""
    offset: int
    """Byte offset of the batch holding it (the paper's logical offset)."""
    index: int  # type: ignore[assignment]  # a field named like tuple.index (public API)
    """Position inside that batch; (offset, index) identifies the message."""
    key: bytes | None
    """The producer's key, or None."""
    value: bytes
    """The payload."""
    timestamp: int
    """Milliseconds since the epoch, set by the producer."""
    headers: list[list[bytes | None]] | None = None
    """Record headers as ``[key, value]`` pairs in order (value None for a null one),
    or None when the message has none. Kafka producers write them, and so does
    ``logferry produce --header``; logferry's own producers do not."""


class OffsetRange(NamedTuple):
    """The readable range of a partition."""

    start: int
    """First retained offset."""
    end: int
    """Visible end: fetches may read up to here."""


class FetchResult(NamedTuple):
    """What one fetch returned for one partition."""

    batches: list[Batch]
    """Whole, CRC-checked batches in order."""
    next_offset: int
    """Where to fetch next."""
    visible_end: int
    """The partition's visible end when the broker answered."""


def messages_of(topic: str, partition: int, batch: Batch) -> Iterator[Message]:
    """The messages of a decoded batch, built column-wise."""
    n = len(batch.values)
    keys = batch.keys if batch.keys is not None else repeat(None, n)
    headers = batch.headers if batch.headers is not None else repeat(None, n)
    # the type: ignore on its argument's own line, where `ruff format` keeps it
    return map(
        Message._make_fast,  # type: ignore[attr-defined]
        repeat(topic, n),
        repeat(partition, n),
        repeat(batch.offset, n),
        range(n),
        keys,
        batch.values,
        batch.timestamps,
        headers,
    )


Message._make_fast = lambda *fields: tuple.__new__(Message, fields)  # type: ignore[attr-defined]


class SimpleConsumer:
    """Reads partitions by offset; see docs/client.md."""

    def __init__(
        self,
        zk: str | None = None,
        brokers: Sequence[str] | None = None,
        *,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        request_timeout: float = 30.0,
        client_id: str = "",
        metadata_retries: int = 5,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
    ):
        """``tls``: TLS settings or a client context for the broker connections;
        ``sasl``: credentials to authenticate them with."""
        self.cluster = Cluster(zk, brokers, request_timeout, tls, sasl, listener)
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.request_timeout = request_timeout
        self.client_id = client_id
        self.metadata_retries = metadata_retries

    # -- metadata and offsets -----------------------------------------------------------

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` (UnknownTopicOrPartitionError if none)."""
        return sorted(self.cluster.partitions_for(topic))

    def topics(self) -> list[str]:
        """Every topic in the cluster."""
        return sorted(self.cluster.refresh(None)["topics"])

    def offsets(self, topic: str, partition: int) -> OffsetRange:
        """The partition's retained range: first offset and visible end."""
        header = self._call(
            topic, partition, protocol.OFFSETS, {"topic": topic, "partition": partition, "at": "latest"}
        )
        return OffsetRange(header["start"], header["end"])

    def offset_info(self, topic: str, partition: int) -> dict[str, Any]:
        """Range plus the broker's average stored bytes per message (for lag estimates)."""
        return self._call(topic, partition, protocol.OFFSETS, {"topic": topic, "partition": partition, "at": "latest"})

    def message_offset_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The message offset, as Kafka clients number messages, of the first message of
        the batch starting at byte ``offset`` (the visible end: the next message's); None
        from a broker older than message offsets. OffsetOutOfRangeError outside the
        visible log, InvalidOffsetError when no batch starts there."""
        fields = {"topic": topic, "partition": partition, "at": {"byte": offset}}
        try:
            header = self._call(topic, partition, protocol.OFFSETS, fields)
        except InvalidRequestError:  # an older broker: 'at' not understood
            return None
        message = header.get("message")
        return message if isinstance(message, int) else None

    def position_of_message(self, topic: str, partition: int, message: int) -> tuple[int, int] | None:
        """``(byte offset of the batch holding message offset ``message``, messages before
        it in that batch)``: where a Kafka client's offset lies for this client; None from
        a broker older than message offsets. OffsetOutOfRangeError outside the log."""
        fields = {"topic": topic, "partition": partition, "at": {"message": message}}
        try:
            header = self._call(topic, partition, protocol.OFFSETS, fields)
        except InvalidRequestError:
            return None
        if not isinstance(header.get("message"), int):
            return None
        return int(header["offset"]), int(header.get("skip") or 0)

    def offset_infos(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, Any] | LogferryError]:
        """:meth:`offset_info` of many partitions at once: one request per leader
        (``many``, :mod:`broker.wire.offsets`), all in flight together, so a dashboard
        reading hundreds of partitions a second costs each broker one request. A
        broker that does not know ``many`` (an older one) is asked partition by
        partition, pipelined. A partition whose answer is an error is retried alone by
        :meth:`offset_info`; if that fails too its value is the error, so one broker
        down hides nothing else.

        A leader that cannot be reached (connection refused or reset, no answer within
        ``request_timeout``) is not asked again partition by partition: each retry would
        wait out a leader election that has not begun while the dead broker is still
        registered (16 partitions of a killed broker cost a dashboard 10-80 s). Its
        partitions' values are that error at once (a :class:`BrokerNotAvailableError` or
        :class:`RequestTimedOutError`), except those whose fresh metadata, asked of
        another broker, names another leader already: they are asked there. A partition
        without a leader (offline, or its leader's broker gone) is the error that says so,
        at once, for the same reason.
        """
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        alone: list[tuple[str, int]] = []
        out: dict[tuple[str, int], dict[str, Any] | LogferryError] = {}
        for topic, partition in partitions:
            try:
                by_leader.setdefault(self.cluster.leader_address(topic, partition), []).append((topic, partition))
            except LogferryError as exc:  # no leader now (its metadata is asked again next time)
                out[(topic, partition)] = exc
        batches: list[tuple[tuple[str, int], list[tuple[str, int]], ResponseFuture | LogferryError | None]] = []
        for address, pairs in by_leader.items():
            future: ResponseFuture | LogferryError | None
            try:
                future = self.cluster.connection(address).request(
                    protocol.OFFSETS, {"many": [list(pair) for pair in pairs], "at": "latest"}
                )
            except LogferryError as exc:
                future = exc
            batches.append((address, pairs, future))
        for address, pairs, future in batches:
            try:
                if future is None or isinstance(future, LogferryError):
                    raise future or BrokerNotAvailableError(f"no connection to the leader at {address}")
                items = future.result(self.request_timeout).header.get("many")
                if not isinstance(items, list) or len(items) != len(pairs):
                    raise InvalidRequestError("no 'many' answer")  # an older broker
            except (BrokerNotAvailableError, RequestTimedOutError) as exc:
                moved = self._moved_elsewhere(address, pairs)
                out.update((pair, exc) for pair in pairs if pair not in moved)
                alone += moved
                continue
            except LogferryError:
                out.update(self._offset_infos_one_by_one(pairs))
                continue
            for pair, item in zip(pairs, items, strict=True):
                if isinstance(item, dict) and "err" not in item:
                    out[pair] = item
                else:
                    alone.append(pair)
        out.update(self._offset_infos_one_by_one(alone))
        return out

    def _moved_elsewhere(self, address: tuple[str, int], pairs: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Of ``pairs``, led by the unreachable broker at ``address`` as cached, those
        whose leader is another broker in metadata asked of any broker but that one."""
        topics = sorted({topic for topic, _ in pairs})
        for topic in topics:
            self.cluster.forget(topic)
        try:
            self.cluster.refresh(topics, avoid=[address], timeout=self.request_timeout)
        except LogferryError:
            return []
        moved = []
        for topic, partition in pairs:
            try:
                if self.cluster.leader_address(topic, partition) != address:
                    moved.append((topic, partition))
            except LogferryError:
                continue
        return moved

    def _offset_infos_one_by_one(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, Any] | LogferryError]:
        """:meth:`offset_infos` the old way: one pipelined request per partition."""
        pending: list[tuple[tuple[str, int], Any]] = []
        out: dict[tuple[str, int], dict[str, Any] | LogferryError] = {}
        for topic, partition in partitions:
            try:
                connection = self.cluster.connection(self.cluster.leader_address(topic, partition))
                future = connection.request(protocol.OFFSETS, {"topic": topic, "partition": partition, "at": "latest"})
            except LogferryError:
                future = None
            pending.append(((topic, partition), future))
        for key, future in pending:
            try:
                if future is None:
                    raise BrokerNotAvailableError("no connection to the leader")
                out[key] = future.result(self.request_timeout).header
            except LogferryError:
                try:
                    out[key] = self.offset_info(*key)
                except LogferryError as exc:
                    out[key] = exc
        return out

    def offset_for_time(self, topic: str, partition: int, ts_ms: int) -> int:
        """The last batch boundary at or before ``ts_ms``."""
        header = self._call(
            topic, partition, protocol.OFFSETS, {"topic": topic, "partition": partition, "at": int(ts_ms)}
        )
        offset: int = header["offset"]
        return offset

    def position_for_time(self, topic: str, partition: int, ts_ms: int) -> tuple[int, int]:
        """The position ``(offset, skip)`` of the first message stamped at or after ``ts_ms``.

        The broker finds the last batch that starts at or before ``ts_ms`` (offsets
        address batches); that batch's messages stamped earlier are then skipped, so a
        start by time delivers nothing older than asked (message timestamps are assumed
        to grow along the log, as the producer's clock makes them).
        """
        offset = self.offset_for_time(topic, partition, ts_ms)
        if offset >= self.offsets(topic, partition).end:
            return offset, 0
        batches = self.fetch(topic, partition, offset, max_wait_ms=0).batches
        if not batches or batches[0].offset != offset:
            return offset, 0
        batch = batches[0]
        skip = 0
        for ts in batch.timestamps:
            if ts >= ts_ms:
                break
            skip += 1
        return (batch.next_offset, 0) if skip >= len(batch) else (offset, skip)

    def resolve_position(self, topic: str, partition: int, start: int | str | _dt.datetime) -> tuple[int, int]:
        """Like :meth:`resolve_start`, as ``(offset, skip)``: a time start is exact to the message."""
        if isinstance(start, _dt.datetime):
            return self.position_for_time(topic, partition, int(start.timestamp() * 1000))
        return self.resolve_start(topic, partition, start), 0

    def resolve_start(self, topic: str, partition: int, start: int | str | _dt.datetime) -> int:
        """Turn ``"earliest"``, ``"latest"``, an offset or a datetime into an offset.

        A datetime gives the boundary of the batch holding that time, which may start
        earlier; :meth:`resolve_position` says how many messages to skip after it.
        """
        if start == "earliest":
            return self.offsets(topic, partition).start
        if start == "latest":
            return self.offsets(topic, partition).end
        if isinstance(start, _dt.datetime):
            return self.offset_for_time(topic, partition, int(start.timestamp() * 1000))
        if isinstance(start, int) and start >= 0:
            return start
        raise ValueError(f"start must be 'earliest', 'latest', an offset or a datetime, not {start!r}")

    # -- fetching -----------------------------------------------------------------------

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int | None = None,
        max_wait_ms: int = 0,
        keep_raw: bool = False,
        min_bytes: int | None = None,
    ) -> FetchResult:
        """Fetch whole batches from ``offset``; long-polls up to ``max_wait_ms`` when empty."""
        fields = encode_fetch_request(
            [FetchPart(topic, partition, offset, max_bytes or self.max_bytes)], max_wait_ms, min_bytes or self.min_bytes
        )
        frame = self._request(
            topic, partition, protocol.FETCH, fields, timeout=self.request_timeout + max_wait_ms / 1000
        )
        return self._fetch_result(frame, offset, keep_raw)

    def _fetch_result(self, frame: protocol.Frame, offset: int, keep_raw: bool = False) -> FetchResult:
        """The batches of a fetch answer for one partition; its error raised."""
        parts = parse_fetch_answer(frame.header)
        if len(parts) != 1:
            raise ProtocolError(f"broker answered {len(parts)} parts to a fetch of one")
        part = parts[0]
        if part.error:
            error = error_for_code(part.error, part.message or "")
            if isinstance(error, OffsetOutOfRangeError):
                error.start, error.end = part.start, part.visible_end
            raise error
        batches, used = records.decode_batches(frame.payload[: part.nbytes], offset, keep_raw=keep_raw)
        return FetchResult(batches, offset + used, part.visible_end)

    def messages(
        self,
        topic: str,
        partition: int,
        start: int | str | _dt.datetime = "earliest",
        follow: bool = False,
        limit: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[Message]:
        """Iterate messages in order from ``start``.

        Without ``follow`` it stops at the visible end; with it, it long-polls for new
        messages until ``limit`` messages or ``timeout`` seconds without any. A datetime
        ``start`` begins at the first message stamped at or after it. Following, the
        long polls go over a connection of the iterator's own whose answers the
        iterating thread reads itself (no reader thread to hand them over: see
        :mod:`broker.client.connection`); it is closed when the iteration ends.

        The iterator is :meth:`_messages` itself, not a generator delegating to it (a
        ``yield from`` layer cost every message about 20 ns, 3% of the consume case),
        and it hands out whole batches with ``yield from`` (13 ns less per message than
        a Python step each).
        """
        poll = _OwnPoll(self, topic, partition) if follow else None  # connects at first use
        return self._messages(topic, partition, start, follow, limit, timeout, poll)

    def _messages(
        self,
        topic: str,
        partition: int,
        start: int | str | _dt.datetime,
        follow: bool,
        limit: int | None,
        timeout: float | None,
        poll: _OwnPoll | None,
    ) -> Iterator[Message]:
        try:
            offset, skip = self.resolve_position(topic, partition, start)
            seen = -skip
            last_data = time.monotonic()
            ahead: ResponseFuture | None = None
            while limit is None or seen < limit:
                wait = self.max_wait_ms if follow else 0
                if ahead is not None:
                    result = self._fetched_ahead(ahead, topic, partition, offset)
                    ahead = None
                elif poll is not None:
                    result = poll.fetch(offset, wait)
                else:
                    result = self.fetch(topic, partition, offset, max_wait_ms=wait)
                if result.batches:
                    last_data = time.monotonic()
                    if result.next_offset < result.visible_end:  # more is there: ask now
                        ahead = self._fetch_ahead(topic, partition, result.next_offset)
                    for batch in result.batches:
                        count = len(batch.values)
                        if seen >= 0 and (limit is None or seen + count <= limit):
                            seen += count  # the whole batch: delegated, no step per message
                            yield from messages_of(topic, partition, batch)
                            if limit is not None and seen >= limit:
                                return
                            continue
                        for message in messages_of(topic, partition, batch):
                            seen += 1
                            if seen <= 0:
                                continue  # before the start time, in the first batch
                            yield message
                            if limit is not None and seen >= limit:
                                return
                    offset = result.next_offset
                    continue
                if not follow and offset >= result.visible_end:
                    return
                if timeout is not None and time.monotonic() - last_data >= timeout:
                    return
        finally:
            if poll is not None:
                poll.close()

    def _fetch_ahead(self, topic: str, partition: int, offset: int) -> ResponseFuture | None:
        """Send the fetch from ``offset`` now, while the caller still iterates the
        previous answer, so that the broker's read (and, under TLS, its encryption and
        the client's decryption) overlaps with the caller's work instead of adding to
        it. One attempt at the known leader; None if it cannot be sent."""
        fields = encode_fetch_request([FetchPart(topic, partition, offset, self.max_bytes)], 0, self.min_bytes)
        try:
            address = self.cluster.leader_address(topic, partition)
            return self.cluster.connection(address).request(protocol.FETCH, fields)
        except LogferryError:
            return None

    def _fetched_ahead(self, ahead: ResponseFuture, topic: str, partition: int, offset: int) -> FetchResult:
        """The answer of a fetch sent ahead; if it failed in any way, the same fetch
        again the ordinary way (with its retries, and its errors raised)."""
        try:
            return self._fetch_result(ahead.result(self.request_timeout), offset)
        except LogferryError:
            return self.fetch(topic, partition, offset)

    # -- plumbing -----------------------------------------------------------------------

    def _own_fetch(self, conn: Any, topic: str, partition: int, offset: int, max_wait_ms: int) -> FetchResult:
        """:meth:`fetch` over ``conn`` (a connection without a reader thread), one
        attempt; raises what it gets."""
        fields = encode_fetch_request(
            [FetchPart(topic, partition, offset, self.max_bytes)], max_wait_ms, self.min_bytes
        )
        frame = conn.call(protocol.FETCH, fields, timeout=self.request_timeout + max_wait_ms / 1000)
        return self._fetch_result(frame, offset)

    def _call(self, topic: str, partition: int, api: int, fields: dict[str, Any]) -> dict[str, Any]:
        return self._request(topic, partition, api, fields, self.request_timeout).header

    def _request(self, topic: str, partition: int, api: int, fields: dict[str, Any], timeout: float) -> protocol.Frame:
        """Send to the partition's leader, refreshing metadata on routing errors.

        Retries at least ``metadata_retries`` times and for up to ``request_timeout``
        seconds, long enough to ride out a leader election.
        """
        last: LogferryError | None = None
        retry = Retry(initial=0.05, maximum=1.0, deadline=self.request_timeout)
        while True:
            retry_left = retry.failures < self.metadata_retries or not retry.expired
            try:
                address = self.cluster.leader_address(topic, partition)
                frame = self.cluster.connection(address).call(api, fields, timeout)
            except (NotLeaderError, LeaderNotAvailableError, BrokerNotAvailableError) as exc:
                last = exc
            except UnknownTopicOrPartitionError as exc:
                last = exc
                if retry.failures >= 1:
                    raise
            else:
                parts = parse_fetch_answer(frame.header) if api == protocol.FETCH else []
                code = parts[0].error if parts else 0
                if code in _ROUTING_ERRORS and retry_left:
                    last = error_for_code(code, parts[0].message or "")
                else:
                    return frame
            if not retry_left:
                assert last is not None
                raise last
            self.cluster.forget(topic)
            retry.sleep()

    def close(self) -> None:
        """Close connections and the ZooKeeper session."""
        self.cluster.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _OwnPoll:
    """A following iterator's long polls, over a connection of its own to the
    partition's leader whose answers the iterating thread reads itself. Any error
    closes it and that fetch goes the ordinary way (:meth:`SimpleConsumer.fetch`, with
    its retries and metadata refreshes); the next one connects again."""

    def __init__(self, consumer: SimpleConsumer, topic: str, partition: int):
        self.consumer = consumer
        self.topic = topic
        self.partition = partition
        self.conn: Any = None

    def fetch(self, offset: int, max_wait_ms: int) -> FetchResult:
        consumer = self.consumer
        try:
            if self.conn is None or self.conn.closed:
                address = consumer.cluster.leader_address(self.topic, self.partition)
                self.conn = consumer.cluster.own_connection(address)
            return consumer._own_fetch(self.conn, self.topic, self.partition, offset, max_wait_ms)
        except LogferryError:
            self.close()
            return consumer.fetch(self.topic, self.partition, offset, max_wait_ms=max_wait_ms)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

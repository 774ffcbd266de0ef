"""The producer: the paper's ``send(topic, messages)`` with background batching.

:class:`Producer` is the public API and the wiring of three parts, each in its own
module and unit-tested on its own:

- :mod:`broker.client.accumulator`: ``send`` appends values to the open batch of a
  partition and returns at once; batches wait there until ready (full, or older than
  ``linger_ms``), bounded by ``buffer_bytes``;
- :mod:`broker.client.sender`: a background thread drains ready batches, encodes each
  in one msgpack call, groups them by broker into one produce request per broker,
  pipelines those requests, and retries failures per its retry policy. Each partition
  has at most one request in flight, so retries never reorder a partition's messages;
- :mod:`broker.client.delivery`: the :class:`DeliveryFuture` every ``send`` returns;
- :mod:`broker.client.idempotence`: the producer id and per-partition sequence
  numbers of an idempotent producer (on by default with ``acks="all"``), which let
  the leader drop a retried batch it already has.
"""

from __future__ import annotations

import itertools
import logging
import random
import ssl
import threading
import time
import zlib
from collections.abc import Sequence

from broker.client.accumulator import Accumulator, fast_send
from broker.client.cluster import Cluster
from broker.client.delivery import DeliveryFuture
from broker.client.sender import RetryPolicy, Sender
from broker.common.errors import (
    ConfigError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
)
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.wire import records

log = logging.getLogger("logferry.producer")

Values = bytes | Sequence[bytes]


class Producer:
    """Publishes messages to a cluster; see docs/client.md for every option."""

    def __init__(
        self,
        zk: str | None = None,
        brokers: Sequence[str] | None = None,
        *,
        acks: int | str = 1,
        linger_ms: float = 5,
        batch_bytes: int = 256 * 1024,
        batch_messages: int = 10_000,
        buffer_bytes: int = 64 * 1024 * 1024,
        block_timeout: float = 30.0,
        compression: str = "none",
        partitioner: str = "round_robin",
        retries: int | None = None,
        retry_backoff_ms: float = 100,
        delivery_timeout: float = 120.0,
        request_timeout: float = 30.0,
        max_request_bytes: int = 16 * 1024 * 1024,
        client_id: str = "",
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
        metadata_max_age_s: float = 5.0,
        idempotence: bool | None = None,
    ):
        acks = _checked_acks(acks)
        if idempotence is None:  # on where it is safe, as in Kafka 3+: with acks=all
            idempotence = acks == -1
        elif idempotence and acks == 0:
            raise ConfigError(
                "idempotence needs acks 1 or 'all': with acks=0 the producer learns nothing it could retry"
            )
        if compression not in records.CODECS:
            raise ConfigError(f"compression must be one of {', '.join(records.CODECS)}, not {compression!r}")
        if partitioner not in ("round_robin", "random"):
            raise ConfigError("partitioner must be 'round_robin' or 'random'")
        if batch_messages < 1 or batch_bytes < 1 or buffer_bytes < 1:
            raise ConfigError("batch_messages, batch_bytes and buffer_bytes must be positive")
        self.linger = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self.batch_messages = batch_messages
        self.buffer_bytes = buffer_bytes
        self.block_timeout = block_timeout
        self.codec = records.CODECS[compression]
        self.partitioner = partitioner
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self.delivery_timeout = delivery_timeout
        self.request_timeout = request_timeout
        self.max_request_bytes = max_request_bytes
        self.client_id = client_id
        self.idempotence = idempotence
        """Batches carry a producer id and sequence numbers, so retries append nothing
        twice (:mod:`broker.client.idempotence`)."""
        self.cluster = Cluster(zk, brokers, request_timeout, tls, sasl, listener)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._partition_counts: dict[str, int] = {}
        """Partitions per topic, once learned; send() never goes to the network for it
        again (the sender thread forgets leaders on every retry). A topic that grows
        (``topic alter --partitions``) is noticed by :meth:`_watch_partition_counts`."""
        self._closed = False
        self._closing = threading.Event()
        self.metadata_max_age_s = metadata_max_age_s
        """How often the known topics' partition counts are read again (0: never)."""
        self._accumulator = Accumulator(
            linger=self.linger,
            batch_bytes=batch_bytes,
            batch_messages=batch_messages,
            buffer_bytes=buffer_bytes,
            block_timeout=block_timeout,
            max_request_bytes=max_request_bytes,
        )
        single = (
            records.encode_single
            if batch_messages == 1 and not idempotence and self.codec == records.CODEC_NONE
            else None
        )
        self.send = fast_send(  # type: ignore[method-assign]  # the fast send(), see below
            self._accumulator,
            self._known_partition,
            self._send,
            encode_single=single,
            partition_counts=self._partition_counts,
        )
        self._sender = Sender(
            self._accumulator,
            self.cluster,
            acks=acks,
            codec=self.codec,
            request_timeout=request_timeout,
            max_request_bytes=max_request_bytes,
            retry=RetryPolicy(retries, self.retry_backoff, delivery_timeout),
            on_unknown_topic=self._forget_partition_count,
            idempotent=idempotence,
        )
        self._set_direct()
        self._sender_thread = threading.Thread(target=self._sender.run, name="logferry-sender", daemon=True)
        self._sender_thread.start()
        if metadata_max_age_s > 0:
            threading.Thread(target=self._watch_partition_counts, name="logferry-metadata", daemon=True).start()

    # -- the public api -----------------------------------------------------------------

    @property
    def acks(self) -> int:
        """0, 1 or -1 (``"all"``); setting it applies to the requests sent from then on
        (the sender thread reads it per request)."""
        return self._sender.acks

    @acks.setter
    def acks(self, value: int | str) -> None:
        self._sender.acks = _checked_acks(value)
        self._set_direct()

    def _set_direct(self) -> None:
        """With ``linger_ms=0``, ``acks`` 1 or all and no idempotence, ``send`` writes
        its message to the socket itself when the sender thread is idle and nothing is
        in flight (:attr:`Accumulator.direct`): no thread hand-off on the way to the
        broker. acks 0 keeps every write on the sender thread (the batch-1 throughput
        case), and so does an idempotent producer (its producer id comes first)."""
        sender = self._sender
        self._accumulator.direct = (
            sender.send_direct if self.linger <= 0 and sender.acks != 0 and sender.sequences is None else None
        )

    def send(
        self,
        topic: str,
        messages: Values,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryFuture:
        """Queue one message or a list of them for ``topic``.

        Blocks only while the buffer is full (up to ``block_timeout``, then raises
        BufferFullError), and the first time a topic is sent to, to learn its partition
        count (a metadata request, which may create the topic); from then on the brokers
        may all be down and messages are still queued. Returns the future of the batch
        holding the last message.
        """
        return self._send(topic, messages, key, partition, timestamp)

    # ``send`` above documents the call; each Producer replaces it with the closure
    # ``accumulator.fast_send`` builds, which takes the common case (one keyless
    # message to a partition whose open batch has room) in one Python call and hands
    # everything else to ``_send``, with the same results.

    def _send(
        self,
        topic: str,
        messages: Values,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryFuture:
        """``send``'s general path: any messages, key, partition and timestamp."""
        if isinstance(messages, (bytes, bytearray, memoryview, str)):
            values: list[bytes] = [messages]  # type: ignore[list-item]  # any bytes-like packs
            nbytes = len(messages)
        else:
            values = messages if isinstance(messages, list) else list(messages)
            if not values:
                raise ValueError("send() needs at least one message")
            nbytes = sum(map(len, values))
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        count = self._partition_counts.get(topic)
        if count is None:
            count = len(self.cluster.partitions_for(topic, create=True))
            self._partition_counts[topic] = count
        if partition is None:
            partition = self._choose_partition(topic, key, count)
        elif not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0-{count - 1}, not {partition}")
        return self._accumulator.append((topic, partition), values, nbytes, key, timestamp)

    def send_raw(self, topic: str, partition: int, batch: bytes | memoryview) -> DeliveryFuture:
        """Append already-encoded batches as they are (the mirror copies batches so).

        Only the headers are read here (to count messages); the broker checks every
        batch's CRC on append, so the bytes are not copied or checksummed twice.
        """
        data = batch if isinstance(batch, (bytes, memoryview)) else bytes(batch)
        _, count = records.count_messages(data)
        return self._accumulator.append_raw((topic, partition), data, count)

    def partition_for(self, topic: str, key: bytes | None = None) -> int:
        """The partition :meth:`send` would pick for a message with ``key`` (its hash;
        without a key, the partitioner's next choice): where a caller that encodes its
        own batches for :meth:`send_raw` sends them, so a key keeps its partition."""
        count = self._partition_counts.get(topic)
        if count is None:
            count = len(self.cluster.partitions_for(topic, create=True))
            self._partition_counts[topic] = count
        return self._choose_partition(topic, key, count)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed."""
        self._accumulator.flush(timeout)
        fatal = self._accumulator.fatal
        if fatal is not None:
            raise ProducerClosedError(f"producer's sender thread died: {fatal}")

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and close the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._closing.set()
            self._accumulator.close()
            self._sender_thread.join(timeout=10)
            error = ProducerClosedError("producer closed before delivery")
            for batch in self._accumulator.abort_all():
                batch.future._complete(None, error)
            self.cluster.close()

    def metrics(self) -> dict[str, int]:
        """Counters since the producer started."""
        stats = self._sender.metrics()
        acc = self._accumulator
        with acc.lock:
            stats["buffered_bytes"] = acc.buffered
            stats["unfinished_batches"] = acc.unfinished
        return stats

    def partitions(self, topic: str) -> list[int]:
        """Partition numbers of ``topic`` (the broker creates it if allowed)."""
        return sorted(self.cluster.partitions_for(topic, create=True))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- partitioning ---------------------------------------------------------------------

    def _known_partition(self, topic: str) -> int | None:
        """A keyless message's partition, if the topic's partition count is known."""
        count = self._partition_counts.get(topic)
        if count is None:
            return None
        if count == 1:
            return 0  # every partitioner agrees; a topic that grows gets its counter then
        counter = self._round_robin.get(topic)
        if counter is None or self.partitioner != "round_robin":
            return self._choose_partition(topic, None, count)
        return next(counter) % count  # _choose_partition's round robin, one call less

    def _choose_partition(self, topic: str, key: bytes | None, count: int) -> int:
        """A key hashes (crc32) to its partition; otherwise round robin or random."""
        if key is not None:
            return zlib.crc32(key) % count
        if self.partitioner == "random":
            return random.randrange(count)
        counter = self._round_robin.get(topic)
        if counter is None:
            counter = self._round_robin[topic] = itertools.count(random.randrange(count))
        return next(counter) % count

    def _watch_partition_counts(self) -> None:
        """Every ``metadata_max_age_s``, read the known topics' partition counts again
        and adopt larger ones: new partitions get messages within seconds (keyed ones
        hash over the new count from then on). A count never shrinks here."""
        while not self._closing.wait(self.metadata_max_age_s):
            topics = list(self._partition_counts)
            if not topics:
                continue
            try:
                self.cluster.refresh(topics)
            except Exception as exc:  # brokers or ZooKeeper away, or closing: next round
                log.debug("partition count refresh failed: %s", exc)
                continue
            for topic in topics:
                count = len(self.cluster.cached_partitions(topic))
                known = self._partition_counts.get(topic)
                if known is not None and count > known:
                    log.info("topic %s grew from %d to %d partitions", topic, known, count)
                    self._partition_counts[topic] = count

    def _forget_partition_count(self, topic: str) -> None:
        """The topic is unknown to its broker (deleted, and made anew?): ask again."""
        self._partition_counts.pop(topic, None)
        self._accumulator.close_open(topic)  # the next send checks its partition again


def _checked_acks(acks: int | str) -> int:
    """``acks`` as the wire wants it (0, 1 or -1), or a ConfigError."""
    if acks == "all":
        return -1
    if isinstance(acks, bool) or acks not in (0, 1, -1):
        raise ConfigError("acks must be 0, 1 or 'all' (-1)")
    return int(acks)


__all__ = ["DeliveryFuture", "Producer"]

"""The executor's side: fetch a chunk's batches straight from the brokers.

A task reads one :class:`Chunk`: fetch from its start, advance by the whole batches each
fetch returns, stop exactly at its end (a batch boundary). Each fetch becomes one Arrow
record batch. Consumers are cached per Python worker process and endpoint, so the
tasks a reused worker runs share connections; executors are given the brokers'
addresses by the driver and never open ZooKeeper sessions of their own.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator

from broker.client import Batch, FetchResult, SimpleConsumer
from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError
from hadoop_loader.errors import Gap, OffsetStateError, RetentionGapError, source_errors
from hadoop_loader.options import Endpoint
from hadoop_loader.planning import Chunk

_consumers: dict[Endpoint, SimpleConsumer] = {}
_lock = threading.Lock()


def consumer_for(endpoint: Endpoint) -> SimpleConsumer:
    """This process's consumer for ``endpoint`` (created on first use)."""
    with _lock:
        consumer = _consumers.get(endpoint)
        if consumer is None:
            with source_errors("connecting to the brokers"):
                consumer = SimpleConsumer(
                    zk=endpoint.zk,
                    brokers=list(endpoint.brokers) if endpoint.brokers else None,
                    tls=endpoint.tls,
                    sasl=endpoint.credentials(),
                    listener=endpoint.listener,
                )
            _consumers[endpoint] = consumer
        return consumer


@atexit.register
def _close_consumers() -> None:
    with _lock:
        for consumer in _consumers.values():
            with contextlib.suppress(Exception):
                consumer.close()
        _consumers.clear()


def read_chunk(consumer: SimpleConsumer, chunk: Chunk, fetch_bytes: int) -> Iterator[list[Batch]]:
    """Yield the batches of ``chunk`` fetch by fetch, in offset order, nothing past its end."""
    topic, partition = chunk.topic, chunk.partition
    pos = chunk.start
    while pos < chunk.end:
        want = min(fetch_bytes, chunk.end - pos)
        result = _fetch(consumer, chunk, pos, want)
        if result.next_offset == pos:
            # The next batch is larger than fetch_bytes; it ends at or before chunk.end
            # (a boundary), so asking for the rest of the chunk always fits it.
            if result.visible_end <= pos:
                raise OffsetStateError(
                    f"{topic}/{partition}: the visible end fell to {result.visible_end} "
                    f"while reading [{chunk.start}, {chunk.end}); the log was truncated"
                )
            result = _fetch(consumer, chunk, pos, chunk.end - pos)
            if result.next_offset == pos:
                raise OffsetStateError(
                    f"{topic}/{partition}: no whole batch between {pos} and "
                    f"the chunk end {chunk.end}; the plan is not at a "
                    "batch boundary"
                )
        if result.next_offset > chunk.end:
            raise OffsetStateError(
                f"{topic}/{partition}: a batch crosses the chunk end {chunk.end}; that offset is not a batch boundary"
            )
        pos = result.next_offset
        yield result.batches


def _fetch(consumer: SimpleConsumer, chunk: Chunk, pos: int, want: int) -> FetchResult:
    where = f"fetching {chunk.topic}/{chunk.partition} at offset {pos}"
    try:
        with source_errors(where):
            return consumer.fetch(chunk.topic, chunk.partition, pos, max_bytes=want)
    except Exception as exc:
        cause = exc.__cause__
        if isinstance(cause, OffsetOutOfRangeError) and cause.start is not None and pos < cause.start:
            gap = Gap(chunk.topic, chunk.partition, pos, cause.start)
            raise RetentionGapError(
                f"retention gap while reading: {gap.describe()} after the run was planned; rerun the job", [gap]
            ) from None
        if isinstance(cause, InvalidOffsetError):
            raise OffsetStateError(
                f"{where}: {cause}; offsets given to the loader must be batch boundaries (Batch.offset / next_offset)"
            ) from None
        raise

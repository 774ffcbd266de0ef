"""Transaction markers: the COMMIT or ABORT control batch a transaction's end writes
into each of its partitions, and how the coordinator gets it there.

A marker is Kafka's: a record batch v2 with the CONTROL (0x20) and TRANSACTIONAL
(0x10) attributes, the producer's id and epoch, base sequence -1 and one control
record (key: version 0, type 0 abort / 1 commit; value: version 0, coordinator
epoch). It is stored like any Kafka batch (a magic 3 batch, one message offset) and
replicated like one.

Where it is appended: through the produce path of the partition's leader with acks=all
(the same validation, append, group commit and replication as any batch). A partition
led here goes straight to this broker's :class:`ProduceService`; one led by another
broker gets a native produce request over the inter-broker listener, with the
connection settings followers use toward leaders (TLS, SASL), kept open per leader: the native protocol,
not the Kafka listener, because brokers already speak it to each other and
authenticate there, and the broker needs no Kafka client for it. Kafka's
WriteTxnMarkers (27) is not served to clients.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Callable
from typing import Any

from broker.common.errors import LeaderNotAvailableError, LogferryError, ProtocolError, error_for_code
from broker.coordination.registry import ClusterView
from broker.net import transport
from broker.net.sasl_client import authenticate_stream
from broker.server.kafka.convert import stored_header
from broker.server.kafka.record_batch import set_crc
from broker.server.kafka.varint import write_varint
from broker.server.services.produce import INTERNAL, ProduceService
from broker.server.services.results import ProduceResult
from broker.wire import kafka_batch as kb
from broker.wire import protocol
from broker.wire.produce import MessageSet, ProducePart, ProduceRequest, encode_produce_request, parse_produce_answer

REMOTE_TIMEOUT_S = 10.0
"""Bound on one marker write to another broker (connect, authenticate, answer)."""
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_ids = itertools.count(1)


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> bytearray:
    """The stored (magic 3) control batch that ends ``producer_id``'s transaction."""
    now = int(time.time() * 1000)
    record = bytearray(b"\x00")  # record attributes
    write_varint(record, 0)  # timestamp delta
    write_varint(record, 0)  # offset delta
    write_varint(record, _CONTROL_KEY.size)
    record += _CONTROL_KEY.pack(0, kb.CONTROL_COMMIT if commit else kb.CONTROL_ABORT)
    write_varint(record, _CONTROL_VALUE.size)
    record += _CONTROL_VALUE.pack(0, coordinator_epoch)
    write_varint(record, 0)  # headers
    body = bytearray()
    write_varint(body, len(record))
    body += record
    batch = bytearray(kb.KAFKA_HEADER_SIZE) + body
    kb.KAFKA_HEADER.pack_into(
        batch,
        0,
        0,  # base offset: a fetch sets it
        len(batch) - kb.LOG_OVERHEAD,
        -1,  # partition leader epoch
        kb.KAFKA_MAGIC,
        0,  # crc, set below
        kb.CONTROL | kb.TRANSACTIONAL,
        0,  # last offset delta
        now,
        now,
        producer_id,
        epoch,
        -1,  # base sequence: markers take none
        1,
    )
    set_crc(batch)
    return stored_header(batch, 1, now) + batch


class TxnMarkerWriter:
    """Writes markers into partitions, wherever they are led (see the module docstring)."""

    def __init__(
        self, broker_id: int, view: Callable[[], ClusterView], produce: ProduceService, replication_services: Any
    ):
        self.broker_id = broker_id
        self.view = view
        self.produce = produce
        self.services = replication_services
        """TLS, SASL and listener toward other brokers (:class:`ReplicationServices`)."""
        self._connections: dict[int, tuple[tuple[str, int], asyncio.StreamReader, asyncio.StreamWriter]] = {}
        """Leader -> its address and the connection kept to it: a transaction per
        connection setup (TCP, TLS, SASL) cost a millisecond or more of every EndTxn."""
        self._locks: dict[int, asyncio.Lock] = {}

    async def write(self, partitions: set[tuple[str, int]], producer_id: int, epoch: int, commit: bool) -> None:
        """A marker in every partition, replicated (acks=all); LogferryError naming the
        first partition that failed (the others may have theirs: writing again is
        harmless, a second marker of an ended transaction changes nothing)."""
        batch = bytes(marker_batch(producer_id, epoch, commit))
        view = self.view()
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for key in sorted(partitions):
            by_leader.setdefault(view.leader(*key), []).append(key)
        if -1 in by_leader:
            raise LeaderNotAvailableError(f"partitions {by_leader[-1]} have no leader for their transaction markers")
        jobs = [
            self._local(parts, batch) if leader == self.broker_id else self._remote(leader, parts, batch)
            for leader, parts in by_leader.items()
        ]
        if len(jobs) == 1:  # one leader (often this broker): no task to gather
            try:
                await jobs[0]
            except LogferryError:
                raise
            except Exception as exc:
                raise LeaderNotAvailableError(f"transaction markers not written: {exc!r}") from exc
            return
        for result in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(result, BaseException):
                if isinstance(result, LogferryError):
                    raise result
                raise LeaderNotAvailableError(f"transaction markers not written: {result!r}") from result

    async def _local(self, parts: list[tuple[str, int]], batch: bytes) -> None:
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        sets = [MessageSet(t, p, memoryview(batch)) for t, p in parts]

        def reply(result: ProduceResult) -> None:
            if not future.done():
                future.set_result(result)

        self.produce.produce(ProduceRequest(-1, sets, None), INTERNAL, reply)
        result = await future
        _raise_first(result.parts)

    async def _remote(self, leader: int, parts: list[tuple[str, int]], batch: bytes) -> None:
        """The markers of ``parts`` through ``leader``'s inter-broker listener, on the
        connection kept to it (one request at a time); a kept connection that fails is
        dropped and the request sent once more on a new one (the leader may have closed
        it; a marker written twice changes nothing)."""
        info = self.view().brokers.get(leader)
        address = info.address(self.services.leader_listener) if info is not None else None
        if address is None:
            raise LeaderNotAvailableError(f"broker {leader}, leader of {parts}, is not registered")
        lock = self._locks.setdefault(leader, asyncio.Lock())
        async with lock, asyncio.timeout(REMOTE_TIMEOUT_S):
            kept = self._connections.get(leader)
            if kept is not None and kept[0] != address:  # the broker moved
                self._drop(leader)
                kept = None
            if kept is not None:
                try:
                    await self._send(leader, kept[1], kept[2], parts, batch)
                    return
                except (OSError, ProtocolError):  # closed meanwhile: once more on a new one
                    self._drop(leader)
                except LogferryError:  # answered with an error: the connection is fine
                    raise
                except BaseException:  # cut mid-request (a timeout): its answer may still come
                    self._drop(leader)
                    raise
            reader, writer = await self._connect(leader, address, parts)
            self._connections[leader] = (address, reader, writer)
            try:
                await self._send(leader, reader, writer, parts, batch)
            except LogferryError as exc:
                if isinstance(exc, ProtocolError):
                    self._drop(leader)
                raise
            except BaseException:
                self._drop(leader)
                raise

    async def _connect(
        self, leader: int, address: tuple[str, int], parts: list[tuple[str, int]]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        peer = f"broker {leader} (transaction markers)"
        reader, writer = await transport.open_stream(
            *address,
            timeout=5.0,
            peer=peer,
            ssl_context=self.services.leader_ssl_context,
            server_hostname=self.services.leader_server_hostname,
        )
        try:
            if self.services.leader_sasl is not None:
                await authenticate_stream(reader, writer, self.services.leader_sasl, peer)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def _send(
        self,
        leader: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        parts: list[tuple[str, int]],
        batch: bytes,
    ) -> None:
        peer = f"broker {leader} (transaction markers)"
        fields = encode_produce_request(-1, [ProducePart(t, p, len(batch)) for t, p in parts], markers=True)
        writer.write(protocol.encode_request(protocol.PRODUCE, next(_ids), fields, len(batch) * len(parts)))
        for _ in parts:
            writer.write(batch)
        await writer.drain()
        decoder = protocol.FrameDecoder()
        while (frame := decoder.next_frame()) is None:
            data = await reader.read(65536)
            if not data:
                raise ProtocolError(f"{peer} closed the connection before answering")
            decoder.feed(data)
        if frame.header.get("err"):  # the request refused as a whole
            raise error_for_code(int(frame.header["err"]), str(frame.header.get("msg", "")))
        _raise_first(parse_produce_answer(frame.header))

    def _drop(self, leader: int) -> None:
        kept = self._connections.pop(leader, None)
        if kept is not None:
            kept[2].close()

    def close(self) -> None:
        """Close the connections kept to other brokers."""
        for leader in list(self._connections):
            self._drop(leader)


def _raise_first(parts: Any) -> None:
    for part in parts:
        if part.error:
            raise error_for_code(part.error, f"transaction marker in {part.topic}-{part.partition}: {part.message}")


__all__ = ["TxnMarkerWriter", "marker_batch"]

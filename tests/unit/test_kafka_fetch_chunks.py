"""Kafka fetch answers as lists of buffers (broker/server/kafka/chunks.py), sans-IO.

The stored Kafka batches a fetch reads go out as views over the buffer read from the
log, one buffer per whole batch, stored and converted alike; the frame's size field
counts every buffer.
"""

from __future__ import annotations

import os
import socket
import struct
from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.server.kafka import convert, protocol
from broker.server.kafka.chunks import BIG, Chunks, ChunkWriter, total
from broker.server.kafka.connection import _writev
from broker.server.kafka.protocol import Api, make, response_schema
from broker.server.kafka.record_batch import decode_record_batches, encode_record_batch
from broker.wire import records


def _stored(values: list[bytes]) -> bytes:
    batch = encode_record_batch(0, len(values) - 1, 1000, None, None, values)
    return bytes(convert.store_batches(batch))


def _log() -> bytes:
    first = _stored([b"x" * 300] * 100)
    agent = records.encode_batch([b"p"] * 3, None, 7000)
    second = _stored([b"y", b"z"])
    return first + agent + second + first + first[:30]  # the last one cut by the read


def test_serve_chunks_gives_a_buffer_per_whole_batch() -> None:
    log = _log()
    chunks, used, next_message = convert.serve_chunks(bytearray(log), 5000, 40)
    assert used == len(log) - 30  # the cut batch is left for the next fetch
    assert len(chunks.parts) == 4  # one buffer per batch, none for the cut one
    batches = decode_record_batches(bytes(chunks))
    assert [b.values for b in batches] == [[b"x" * 300] * 100, [b"p"] * 3, [b"y", b"z"], [b"x" * 300] * 100]
    # message offsets, contiguous across stored and converted batches
    assert [b.base_offset for b in batches] == [40, 140, 143, 145]
    assert [b.last_offset_delta for b in batches] == [99, 2, 1, 99]
    assert next_message == 245 == batches[-1].base_offset + batches[-1].last_offset_delta + 1


def test_serve_chunks_keeps_stored_batches_as_views_of_the_read_buffer() -> None:
    raw = bytearray(_stored([b"v"] * 10))
    chunks, used, _ = convert.serve_chunks(raw, 77, 12)
    (part,) = chunks.parts
    assert isinstance(part, memoryview) and part.obj is raw  # not copied
    assert used == len(raw) and struct.unpack_from(">q", part, 0)[0] == 12


def test_chunk_writer_keeps_big_buffers_by_reference() -> None:
    big = b"b" * BIG
    out = ChunkWriter()
    out.write(b"ab")
    out.write(b"c")
    out.write(big)
    out.write(Chunks([b"d", memoryview(b"ef")]))
    out.write(b"g")
    parts = out.getparts()
    assert parts[1] is big and bytes(parts[0]) == b"abc"
    assert b"".join(bytes(p) for p in parts) == b"abc" + big + b"defg"
    assert total(parts) == len(big) + 7


def _fetch_body(records_value: object, version: int) -> object:
    data_cls = response_schema(Api.FETCH, version, "PartitionData")
    topic_cls = response_schema(Api.FETCH, version, "FetchableTopicResponse")
    part = make(
        data_cls,
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=9,
        last_stable_offset=9,
        log_start_offset=0,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=records_value,
    )
    return make(
        response_schema(Api.FETCH, version),
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(make(topic_cls, topic="t", partitions=(part,)),),
    )


def test_fetch_response_parts_equal_the_joined_frame_at_every_version() -> None:
    log = _log()
    for version in (4, 7, 11, 12):  # non-flexible and flexible (compact) encodings
        chunks, _, _ = convert.serve_chunks(bytearray(log), 5000, 0)
        joined = protocol.encode_response(Api.FETCH, version, 42, _fetch_body(bytes(chunks), version))
        parts = protocol.encode_response_parts(Api.FETCH, version, 42, _fetch_body(chunks, version))
        assert b"".join(bytes(p) for p in parts) == joined, version
        assert struct.unpack_from(">i", joined)[0] == len(joined) - 4


def test_writev_sends_what_the_socket_takes_and_cuts_the_rest() -> None:
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        parts: list[bytes | bytearray | memoryview] = [b"h" * 10] + [bytes([i]) * 50_000 for i in range(40)]
        expected = b"".join(bytes(p) for p in parts)
        start = _writev(a.fileno(), parts)
        assert 0 <= start < len(parts)  # the small buffer fills up
        sent = b""
        while True:
            try:
                chunk = b.recv(1 << 20, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            sent += chunk
        rest = b"".join(bytes(p) for p in parts[start:])
        assert sent + rest == expected  # nothing lost, nothing twice
        small = [b"x" * 5, memoryview(b"yz")]
        assert _writev(a.fileno(), small) in (0, 2)
    finally:
        a.close()
        b.close()
    r, w = os.pipe()
    os.close(r)
    try:
        assert _writev(w, [b"abc"]) == 0  # a broken pipe: left to the transport
    finally:
        os.close(w)

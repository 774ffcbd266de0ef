"""The sans-IO Kafka codec: varints, record batches v2, conversion and offsets, frames."""

from __future__ import annotations

import contextlib
import gzip
import io
import struct

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_writer

from broker.common.errors import ControlBatchRefusedError, CorruptBatchError, FrameTooLargeError, InvalidRequestError
from broker.server.config import broker_config_from_dict
from broker.server.kafka import convert, protocol
from broker.server.kafka.record_batch import (
    CRC_START,
    HEADER_SIZE,
    decode_record_batches,
    encode_record_batch,
)
from broker.server.kafka.varint import varint_size, write_varint
from broker.wire import records
from broker.wire.kafka_batch import read_varint


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_roundtrip(value: int) -> None:
    out = bytearray()
    write_varint(out, value)
    assert len(out) == varint_size(value)
    assert read_varint(bytes(out), 0) == (value, len(out))


def test_varint_torn_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError):
        read_varint(b"\x80\x80", 0)


record = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=50),
    st.lists(st.tuples(st.binary(min_size=1, max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
    st.integers(min_value=0, max_value=10**6),
)


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(st.lists(record, min_size=1, max_size=20))
def test_record_batch_roundtrip(recs: list) -> None:
    base = 1_700_000_000_000
    keys = [r[0] for r in recs]
    values = [r[1] for r in recs]
    headers = [r[2] for r in recs]
    stamps = [base + r[3] for r in recs]
    raw = encode_record_batch(500, len(recs) + 10, base, stamps, keys, values, headers)
    (batch,) = decode_record_batches(bytes(raw))
    assert batch.base_offset == 500 and batch.last_offset_delta == len(recs) + 10
    assert batch.keys == keys and batch.values == values
    assert batch.headers == headers and batch.timestamps == stamps
    assert batch.offset_deltas == list(range(len(recs)))


def test_bad_crc_torn_and_wrong_magic_are_corrupt() -> None:
    raw = bytes(encode_record_batch(0, 0, 1, None, None, [b"v"]))
    bad = bytearray(raw)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC32C"):
        decode_record_batches(bytes(bad))
    with pytest.raises(CorruptBatchError):
        decode_record_batches(raw[:-1])
    with pytest.raises(CorruptBatchError):
        decode_record_batches(raw[:30])
    magic1 = bytearray(raw)
    magic1[16] = 1
    with pytest.raises(CorruptBatchError, match="magic"):
        decode_record_batches(bytes(magic1))


def _compressed(codec: int, compress_body) -> bytes:  # type: ignore[no-untyped-def]
    raw = encode_record_batch(
        0, 2, 1000, [1000, 1001, 1002], [b"k", None, b"k"], [b"a" * 50, b"b", None], [[(b"h", b"1")], [], []]
    )
    body = compress_body(bytes(raw[HEADER_SIZE:]))
    out = bytearray(raw[:HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, codec)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def _xerial(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


@pytest.mark.parametrize(
    "codec, compress_body",
    [
        (1, gzip.compress),
        (2, lambda b: bytes(cramjam.snappy.compress_raw(b))),
        (2, _xerial),
        (3, lz4.frame.compress),
        (4, zstandard.ZstdCompressor().compress),
    ],
)
def test_compressed_batches_decode(codec: int, compress_body) -> None:  # type: ignore[no-untyped-def]
    (batch,) = decode_record_batches(_compressed(codec, compress_body))
    assert batch.values == [b"a" * 50, b"b", None]
    assert batch.keys == [b"k", None, b"k"]
    assert batch.headers == [[(b"h", b"1")], [], []]
    stored = convert.store_batches(_compressed(codec, compress_body))
    assert stored
    (lf,), _ = records.decode_batches(stored, 0)
    assert lf.values == [b"a" * 50, b"b", b""]  # a null value is stored empty
    assert lf.headers == [[[b"h", b"1"]], None, None]
    assert lf.timestamps == [1000, 1001, 1002]


def test_unknown_codec_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="codec"):
        decode_record_batches(_compressed(6, lambda b: b))


def test_conversion_roundtrip_and_offset_mapping() -> None:
    kafka = encode_record_batch(0, 1, 5000, [5000, 5007], [b"a", None], [b"x", b"y"], [[(b"trace", b"t1")], []])
    first = bytes(convert.store_batches(bytes(kafka)))
    assert first
    plain = records.encode_batch([b"p"] * 3, None, 7000)  # what an agent writes
    log = first + plain
    batches, used = records.decode_batches(log, 1000)
    assert used == len(log)
    out = bytes(convert.to_kafka(batches[0], 10)) + bytes(convert.to_kafka(batches[1], 12))
    k1, k2 = decode_record_batches(out)
    # the record batch of a logferry batch whose first message offset is m says
    # base_offset m and spans its count: clients continue at the next batch's first message
    assert k1.base_offset == 10 and k1.base_offset + k1.last_offset_delta + 1 == 12
    assert k2.base_offset == 12 and k2.base_offset + k2.last_offset_delta + 1 == 15
    assert k1.values == [b"x", b"y"] and k1.keys == [b"a", None]
    assert k1.headers == [[(b"trace", b"t1")], []] and k1.timestamps == [5000, 5007]
    assert k2.values == [b"p"] * 3 and k2.keys == [None] * 3 and k2.timestamps == [7000] * 3


def test_a_producers_control_batch_is_refused_not_stored() -> None:
    # only the transaction coordinator writes markers; a producer's is refused whole
    raw = bytearray(encode_record_batch(0, 0, 1, None, None, [b"marker"]))
    struct.pack_into(">h", raw, 21, 0x20)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    decode_record_batches(bytes(raw))
    with pytest.raises(ControlBatchRefusedError, match="at byte 0 is a control batch"):
        convert.store_batches(bytes(raw))


def _request(api: int, version: int, body_entity, header_version: int = 2) -> bytes:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out, RequestHeader(request_api_key=api, request_api_version=version, correlation_id=42, client_id="c")
    )
    entity_writer(type(body_entity))(out, body_entity)
    return out.getvalue()


def test_parse_api_versions_and_answer() -> None:
    frame = _request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    req = protocol.parse_request(frame)
    assert isinstance(req, protocol.Request) and req.correlation_id == 42
    answer = protocol.encode_response(18, 3, 42, protocol.api_versions_response(3))
    size, corr, error = struct.unpack_from(">iih", answer)
    assert size == len(answer) - 4 and corr == 42 and error == 0


def test_unsupported_versions_and_unknown_apis() -> None:
    assert protocol.parse_request(struct.pack(">hhi", 26, 5, 5) + b"\xff\xff\x00") == protocol.Unsupported(26, 5, 5)
    answer = protocol.unsupported_response(26, 5, 5)  # EndTxn v5 (flexible): tags, throttle, error
    assert answer is not None and struct.unpack_from(">iibih", answer)[1:] == (5, 0, 0, 35)
    answer = protocol.unsupported_response(18, 77, 6)  # ApiVersions from the future: v0
    assert answer is not None and struct.unpack_from(">iih", answer)[1:] == (6, 35)
    assert protocol.unsupported_response(4242, 0, 7) is None  # no Kafka api: close


def test_malformed_bodies_and_frames() -> None:
    frame = _request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    with pytest.raises(InvalidRequestError):
        protocol.parse_request(frame[:-3])
    # bytes past the body are ignored, as Kafka ignores them (librdkafka relies on it:
    # tests/unit/test_kafka_breaks.py)
    assert protocol.parse_request(frame + b"junk") == protocol.parse_request(frame)
    decoder = protocol.FrameDecoder(100)
    decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    decoder = protocol.FrameDecoder(100)
    decoder.feed(struct.pack(">i", -1))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    decoder = protocol.FrameDecoder(100)
    decoder.feed(struct.pack(">i", 10) + b"\0" * 9)
    assert decoder.next_frame() is None
    decoder.feed(b"\0")
    assert decoder.next_frame() == b"\0" * 10


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(sorted(protocol.SUPPORTED)), st.integers(0, 13), st.binary(max_size=80))
def test_fuzzed_frames_parse_or_fail_cleanly(api: int, version: int, junk: bytes) -> None:
    frame = struct.pack(">hhi", api, version, 1) + junk
    with contextlib.suppress(InvalidRequestError):
        protocol.parse_request(frame)


def test_every_served_version_has_a_schema() -> None:
    from kio.index import load_request_schema, load_response_schema

    for api, (lo, hi) in protocol.SUPPORTED.items():
        for version in range(lo, hi + 1):
            load_request_schema(api, version)
            load_response_schema(api, version)


def test_kafka_listen_config() -> None:
    base = {"broker": {"id": 1, "log_dirs": ["/tmp/x"], "zk_connect": "127.0.0.1:2181"}}
    assert broker_config_from_dict(base).kafka_listen is None
    assert broker_config_from_dict({**base, "kafka": {"listen": 9093}}).kafka_listen == ("127.0.0.1", 9093)
    assert broker_config_from_dict({**base, "kafka": {"listen": "0.0.0.0:0"}}).kafka_listen == ("0.0.0.0", 0)
    with pytest.raises(Exception, match="listen"):
        broker_config_from_dict({**base, "kafka": {"listen": "nope"}})
    with pytest.raises(Exception, match="no SASL"):
        broker_config_from_dict({**base, "kafka": {"listen": 0}, "auth": {"required": True, "allow_plaintext": True}})


@pytest.mark.parametrize("headers", [None, [[(b"h", b"v")], []]])
def test_idempotent_batches_keep_producer_id_epoch_and_sequence(headers) -> None:  # type: ignore[no-untyped-def]
    raw = bytearray(encode_record_batch(0, 1, 10, None, None, [b"a", b"b"], headers))
    struct.pack_into(">qhi", raw, 43, 77, 3, 1000)  # producer_id, producer_epoch, base_sequence
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    decode_record_batches(bytes(raw))
    stored = convert.store_batches(bytes(raw))
    assert stored
    (lf,), _ = records.decode_batches(stored, 0)
    assert (lf.producer_id, lf.producer_epoch, lf.base_sequence) == (77, 3, 1000)
    assert lf.values == [b"a", b"b"]
    assert lf.headers == (None if headers is None else [[[b"h", b"v"]], None])

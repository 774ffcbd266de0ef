"""Kafka record batches stored as they arrived (magic 3): the format, sans-IO.

A produced record batch v2 gets logferry's 22-byte header and is read by every reader
of the log through that header (scan, counts, producer fields, time), decoded by
clients only, and served back to Kafka consumers without touching its records.
"""

from __future__ import annotations

import gzip
import struct
import sys

import crc32c
import pytest
from kio.schema.errors import ErrorCode

from broker.common.errors import ControlBatchRefusedError, CorruptBatchError, LogferryError
from broker.server.kafka import convert
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.record_batch import CRC_START, decode_record_batches, encode_record_batch
from broker.wire import kafka_batch, records
from broker.wire.codecs import CODEC_LZ4


def _kafka(
    values: list[bytes | None],
    keys: list[bytes | None] | None = None,
    headers: list[list[tuple[bytes, bytes | None]] | None] | None = None,
    base_ts: int = 1000,
    stamps: list[int] | None = None,
    producer: tuple[int, int, int] | None = None,
    attributes: int = 0,
) -> bytes:
    raw = bytearray(encode_record_batch(0, len(values) - 1, base_ts, stamps, keys, values, headers))
    if producer is not None:
        struct.pack_into(">qhi", raw, 43, *producer)
    if attributes:
        struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


def _gzipped(values: list[bytes]) -> bytes:
    plain = bytearray(encode_record_batch(0, len(values) - 1, 1000, None, None, values))
    body = gzip.compress(bytes(plain[61:]))
    raw = bytearray(plain[:61]) + body
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, kafka_batch.COMPRESSION_GZIP)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


def test_stored_batch_has_logferry_header_and_the_clients_batch_behind_it() -> None:
    kafka = _kafka([b"a", None, b"c"], [b"k", None, None], stamps=[1000, 1003, 1001])
    with_epoch = bytearray(kafka)
    struct.pack_into(">q", with_epoch, 0, 12345)  # base offset and leader epoch: no CRC
    struct.pack_into(">i", with_epoch, 12, 7)
    stored = bytes(convert.store_batches(bytes(with_epoch)))
    assert struct.unpack_from(">q", stored, records.KAFKA_AT)[0] == 0
    assert struct.unpack_from(">i", stored, records.KAFKA_AT + 12)[0] == -1
    length, magic, _, attributes, count, base = records.BATCH_HEADER.unpack_from(stored)
    assert (magic, attributes, count, base) == (records.MAGIC_KAFKA, 0, 3, 1000)
    assert records.LENGTH_SIZE + length == len(stored) == records.KAFKA_AT + len(kafka)
    result = records.validate_message_set(stored)
    assert (result.batches, result.messages, result.producers) == (1, 3, None)
    assert records.count_messages(stored) == (1, 3)
    # the Kafka batch behind it is the client's from its CRC32C on (the base offset and
    # leader epoch lie outside it): last_offset_delta stays count - 1, no CRC recomputed
    (inner,) = decode_record_batches(stored[records.KAFKA_AT :])
    assert inner.last_offset_delta == 2
    assert inner.values == [b"a", None, b"c"] and inner.timestamps == [1000, 1003, 1001]
    assert stored[records.KAFKA_AT + kafka_batch.CRC_AT :] == kafka[kafka_batch.CRC_AT :]


def test_a_last_offset_delta_other_than_count_minus_one_is_set_to_it() -> None:
    odd = bytearray(_kafka([b"a", b"b", b"c"]))
    kafka_batch.LAST_OFFSET_DELTA.pack_into(odd, kafka_batch.LAST_OFFSET_DELTA_AT, 40)
    struct.pack_into(">I", odd, 17, crc32c.crc32c(bytes(odd[CRC_START:])))
    stored = bytes(convert.store_batches(bytes(odd)))
    (inner,) = decode_record_batches(stored[records.KAFKA_AT :])  # checks the CRC32C
    assert inner.last_offset_delta == 2


def test_a_batch_stored_before_message_offsets_is_served_with_its_count() -> None:
    """Releases before message offsets stored ``last_offset_delta`` = the stored batch's
    size - 1 (byte offsets); a fetch corrects it and the CRC32C, in the read buffer."""
    stored = bytearray(convert.store_batches(_kafka([b"a", b"b", b"c"])))
    at = records.KAFKA_AT
    kafka_batch.LAST_OFFSET_DELTA.pack_into(stored, at + kafka_batch.LAST_OFFSET_DELTA_AT, len(stored) - 1)
    struct.pack_into(">I", stored, at + 17, crc32c.crc32c(bytes(stored[at + CRC_START :])))
    old = bytes(stored)
    out, used, after = convert.serve_chunks(bytearray(old + old), 0, 500)
    first, second = decode_record_batches(bytes(out))  # checks both CRC32Cs
    assert (first.base_offset, first.last_offset_delta) == (500, 2)
    assert (second.base_offset, second.last_offset_delta) == (503, 2)
    assert used == 2 * len(old) and after == 506


def test_logferry_clients_decode_keys_values_timestamps_headers() -> None:
    kafka = _kafka([b"a", None], [b"k", None], [[(b"h", b"1"), (b"n", None)], None], stamps=[1000, 1007])
    stored = convert.store_batches(kafka)
    (batch,), used = records.decode_batches(stored, 500, keep_raw=True)
    assert used == len(stored)
    assert (batch.offset, batch.next_offset) == (500, 500 + len(stored))
    assert batch.values == [b"a", b""]  # a null value reads as empty bytes
    assert batch.keys == [b"k", None]
    assert batch.timestamps == [1000, 1007]
    assert batch.headers == [[[b"h", b"1"], [b"n", None]], None]
    assert batch.raw is not None and bytes(batch.raw) == bytes(stored)
    plain = convert.store_batches(_kafka([b"x", b"y"]))
    (batch,), _ = records.decode_batches(plain, 0)
    assert batch.keys is None and batch.deltas is None and batch.headers is None


def test_compressed_batches_keep_their_codec() -> None:
    stored = convert.store_batches(_gzipped([b"v" * 40] * 5))
    assert records.BATCH_HEADER.unpack_from(stored)[3] == 0  # the codec is the Kafka batch's
    (batch,), _ = records.decode_batches(stored, 0)
    assert batch.values == [b"v" * 40] * 5 and batch.codec == kafka_batch.COMPRESSION_GZIP
    # a topic's compression policy and the mirror never recompress it
    assert bytes(records.compress_batch(bytes(stored), CODEC_LZ4)) == bytes(stored)


def test_idempotent_producer_fields_are_read_from_the_kafka_header() -> None:
    stored = bytes(convert.store_batches(_kafka([b"a", b"b"], producer=(77, 3, 1000))))
    plain = records.encode_batch([b"p"], None, 5)
    log = plain + stored
    (info,) = records.scan(log).producers or []
    assert (info.position, info.producer_id, info.epoch, info.base_sequence, info.count, info.size) == (
        len(plain),
        77,
        3,
        1000,
        2,
        len(stored),
    )
    walked, end = records.walk_producers(log)
    assert end == len(log) and walked == [info]
    _, batch = records.decode_batches(log, 0)[0]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 1000)


def test_serve_mixes_stored_and_converted_batches_with_message_offsets() -> None:
    first = bytes(
        convert.store_batches(_kafka([b"x", b"y"], [b"a", None], [[(b"t", b"1")], None], stamps=[5000, 5007]))
    )
    agent = records.encode_batch([b"p"] * 3, None, 7000)
    idem = records.encode_batch([b"q"], [b"k"], 8000, producer=(5, 0, 0))
    log = first + agent + idem + first[:30]  # a batch cut by the read's size
    out, used, after = convert.serve_chunks(bytearray(log), 1000, 70)
    assert used == len(first) + len(agent) + len(idem)
    k1, k2, k3 = decode_record_batches(bytes(out))
    assert k1.base_offset == 70 and k1.base_offset + k1.last_offset_delta + 1 == 72
    assert k2.base_offset == 72 and k2.base_offset + k2.last_offset_delta + 1 == 75
    assert k3.base_offset == 75 and k3.base_offset + k3.last_offset_delta + 1 == 76 == after
    assert k1.values == [b"x", b"y"] and k1.keys == [b"a", None]
    assert k1.headers == [[(b"t", b"1")], []] and k1.timestamps == [5000, 5007]
    assert k2.values == [b"p"] * 3 and k3.values == [b"q"] and k3.keys == [b"k"]
    # the stored Kafka batch went out as it is stored, bar its base offset
    assert bytes(out)[8 : len(first) - records.KAFKA_AT] == first[records.KAFKA_AT + 8 :]


def test_corrupt_or_inconsistent_stored_batches_are_refused() -> None:
    stored = bytearray(convert.store_batches(_kafka([b"a", b"b"])))
    flipped = bytearray(stored)
    flipped[-1] ^= 1
    assert "CRC" in (records.scan(flipped).error or "")
    with pytest.raises(CorruptBatchError):
        records.decode_batches(flipped, 0)
    # a header whose count disagrees with the Kafka batch's, CRC made valid again
    wrong = bytearray(stored)
    struct.pack_into(">I", wrong, 10, 3)
    struct.pack_into(">I", wrong, 5, __import__("zlib").crc32(bytes(wrong[9:])))
    assert "record count" in (records.scan(wrong).error or "")
    with pytest.raises(CorruptBatchError, match="record count"):
        records.decode_batches(wrong, 0)


def test_produce_side_checks_and_drops() -> None:
    kafka = bytearray(_kafka([b"a"]))
    kafka[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC32C"):
        convert.store_batches(bytes(kafka))
    with pytest.raises(ControlBatchRefusedError, match="only the transaction coordinator"):
        convert.store_batches(_kafka([b"marker"], attributes=kafka_batch.CONTROL))
    assert kafka_error(ControlBatchRefusedError("x")) == ErrorCode.invalid_record  # Kafka's answer
    with pytest.raises(CorruptBatchError, match="codec"):
        convert.store_batches(_kafka([b"a"], attributes=6))
    two = _kafka([b"a"]) + _kafka([b"b", b"c"])
    stored = convert.store_batches(two)
    assert records.validate_message_set(stored).messages == 3


def test_log_append_time_batches_get_the_brokers_clock() -> None:
    stored = convert.store_batches(_kafka([b"a", b"b"], stamps=[1, 2], attributes=kafka_batch.TIMESTAMP_LOG_APPEND))
    (batch,), _ = records.decode_batches(stored, 0)
    assert batch.timestamps[0] == batch.timestamps[1] > 1_600_000_000_000
    assert records.BATCH_HEADER.unpack_from(stored)[5] == batch.timestamps[0]


def test_snappy_without_cramjam_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cramjam", None)  # as on a host without the kafka extra
    with pytest.raises(LogferryError, match=r"logferry\[kafka\]"):
        kafka_batch.decompress(kafka_batch.COMPRESSION_SNAPPY, b"\x00", 0)


def test_mirror_rehash_splits_a_kafka_snappy_batch_into_logferry_batches() -> None:
    import cramjam

    from mirror.routing import rehash

    plain = bytearray(encode_record_batch(0, 3, 1000, None, [b"a", b"b", b"a", None], [b"1", b"2", b"3", b"4"]))
    raw = plain[:61] + bytes(cramjam.snappy.compress_raw(bytes(plain[61:])))
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, kafka_batch.COMPRESSION_SNAPPY)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    stored = bytes(convert.store_batches(bytes(raw)))
    parts = rehash(stored, 0, 3, CODEC_LZ4)  # logferry has no snappy: the mirror's codec
    decoded = [records.decode_batches(b, 0)[0][0] for b in parts.values()]
    assert sorted(v for b in decoded for v in b.values) == [b"1", b"2", b"3", b"4"]
    assert {b.codec for b in decoded} == {CODEC_LZ4}


def test_partition_log_recovers_and_looks_up_stored_kafka_batches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from broker.storage.config import LogConfig
    from broker.storage.partition_log import PartitionLog

    directory = tmp_path / "t-0"
    plog = PartitionLog(directory, "t", 0, LogConfig(), recover=False)
    kafka = [bytes(convert.store_batches(_kafka([b"v%d" % i] * 3, base_ts=1000 * (i + 1)))) for i in range(3)]
    agent = records.encode_batch([b"a"], None, 1500)
    offsets = []
    for data in (kafka[0], agent, kafka[1], kafka[2]):
        offsets.append(plog.append(data, records.count_messages(data)[1]))
    plog.flush()
    end = plog.visible_end
    plog.close()
    with open(directory / "00000000000000000000.log", "ab") as f:  # a torn tail
        f.write(kafka[0][:50])
    plog = PartitionLog(directory, "t", 0, LogConfig(), recover=True)
    try:
        assert plog.visible_end == end  # recovery cut the torn batch, kept the rest
        assert plog.offset_for_time(1200) == offsets[0]  # the last batch stamped <= it
        assert plog.offset_for_time(1700) == offsets[1]
        assert plog.offset_for_time(2500) == offsets[2]
        assert plog.batch_start_at_or_before(offsets[2] + 2) == offsets[2]
        (first,), _ = records.decode_batches(plog.read_bytes(offsets[2], len(kafka[1])), offsets[2])
        assert first.values == [b"v1"] * 3 and first.base_timestamp == 2000
    finally:
        plog.close()

"""The batch format: round trips, CRC coverage, torn and corrupt input."""

import zlib

import pytest

from broker.common.errors import CorruptBatchError
from broker.wire import records


def _batch(n=5, keys=None, ts=1_700_000_000_000, codec=records.CODEC_NONE):
    values = [f"message-{i}".encode() * 3 for i in range(n)]
    return values, records.encode_batch(values, keys, ts, codec)


@pytest.mark.parametrize("codec", [records.CODEC_NONE, records.CODEC_GZIP])
def test_round_trip_with_keys_and_timestamps(codec):
    values = [b"a", b"bb", b"", b"d" * 300]
    keys = [b"k1", None, b"k3", b"k4"]
    ts = [1000, 1005, 1005, 2000]
    data = records.encode_batch(values, keys, ts, codec)
    batches, used = records.decode_batches(data, 4096)
    assert used == len(data)
    (batch,) = batches
    assert batch.values == values
    assert batch.keys == keys
    assert batch.timestamps == ts
    assert batch.offset == 4096 and batch.next_offset == 4096 + len(data)
    assert batch.codec == codec


def test_shared_timestamp_and_no_keys_are_stored_compactly():
    values = [b"x" * 200] * 50
    data = records.encode_batch(values, None, 1234, records.CODEC_NONE)
    # 22-byte header, a few bytes of array headers, then 2 bytes of bin8 header a value.
    overhead = (len(data) - 200 * 50) / 50
    assert overhead < 3.0
    (batch,), _ = records.decode_batches(data, 0)
    assert batch.keys is None and batch.deltas is None and batch.timestamps == [1234] * 50


def test_gzip_batches_are_smaller_for_repetitive_logs():
    values = [b"GET /index.html HTTP/1.1 200 " + str(i).encode() for i in range(500)]
    plain = records.encode_batch(values, None, 1, records.CODEC_NONE)
    packed = records.encode_batch(values, None, 1, records.CODEC_GZIP)
    assert len(packed) < len(plain) / 3


def test_scan_counts_batches_and_messages():
    data = b"".join(_batch(n)[1] for n in (1, 2, 3))
    result = records.scan(data)
    assert (result.valid_bytes, result.batches, result.messages, result.error) == (len(data), 3, 6, None)


def test_every_single_byte_flip_is_detected():
    _, data = _batch(4)
    for i in range(len(data)):
        corrupt = bytearray(data)
        corrupt[i] ^= 0x01
        result = records.scan(corrupt)
        assert result.valid_bytes == 0 and result.error, f"flip at byte {i} went unnoticed"


def test_torn_tail_is_reported_with_the_valid_prefix():
    _, a = _batch(3)
    _, b = _batch(2)
    for cut in range(1, len(b)):
        result = records.scan(a + b[:cut])
        assert result.valid_bytes == len(a)
        assert "torn" in result.error


def test_validate_message_set_rejects_garbage_and_empty():
    with pytest.raises(CorruptBatchError):
        records.validate_message_set(b"")
    with pytest.raises(CorruptBatchError):
        records.validate_message_set(b"\x00\x00\x00\x20garbage-garbage-garbage-garbage!")
    _, data = _batch(2)
    with pytest.raises(CorruptBatchError, match="CRC"):
        bad = bytearray(data)
        bad[-1] ^= 0xFF
        records.validate_message_set(bad)


def test_decode_leaves_partial_batch_for_next_fetch():
    _, a = _batch(3)
    _, b = _batch(2)
    batches, used = records.decode_batches(a + b[:10], 0)
    assert len(batches) == 1 and used == len(a)


def test_decode_raises_on_corrupt_batch_naming_its_offset():
    _, a = _batch(3)
    bad = bytearray(a + a)
    bad[len(a) + 30] ^= 0x10
    with pytest.raises(CorruptBatchError, match=f"offset {1000 + len(a)}"):
        records.decode_batches(bad, 1000)


def test_crc_covers_attributes_and_payload():
    _, data = _batch(2)
    length, magic, crc, attributes, count, base = records.BATCH_HEADER.unpack_from(data)
    assert crc == zlib.crc32(data[records.CRC_START :])
    assert length == len(data) - 4 and magic == 1 and count == 2


def test_iter_raw_batches_splits_exactly():
    parts = [_batch(n)[1] for n in (1, 4, 2)]
    got = [bytes(raw) for _, raw in records.iter_raw_batches(b"".join(parts))]
    assert got == parts


def test_count_messages_reads_headers_only():
    data = b"".join(_batch(n)[1] for n in (1, 2, 3))
    assert records.count_messages(data) == (3, 6)
    assert records.count_messages(memoryview(data)[: len(_batch(1)[1])]) == (1, 1)
    with pytest.raises(CorruptBatchError):
        records.count_messages(data[:-3])


def test_scan_of_many_one_message_batches_stops_at_the_first_bad_one():
    """The per-batch fast test and the full checks agree: every valid batch counts, and
    the walk stops at the first unsound one with the full checks' reason."""
    batches = [records.encode_single(bytes([i]) * 10, 1_700_000_000_000 + i) for i in range(50)]
    whole = b"".join(batches)
    assert records.scan(whole) == records.ScanResult(len(whole), 50, 50, None)
    at = sum(map(len, batches[:20]))
    flipped = bytearray(whole)
    flipped[at + 30] ^= 1  # a value byte of batch 20
    result = records.scan(flipped)
    assert (result.valid_bytes, result.batches, result.messages) == (at, 20, 20)
    assert result.error == f"CRC mismatch in batch at byte {at}"
    bad_codec = bytearray(whole)
    bad_codec[at + records.CRC_START] = 2  # no codec 2 (CRC aside: checked before it)
    assert records.scan(bad_codec).error.startswith(f"malformed batch header at byte {at}")
    assert records.scan(whole[:-3]).error.startswith(f"torn batch at byte {len(whole) - len(batches[-1])}")

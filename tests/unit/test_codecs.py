"""Batch codecs (none, gzip, lz4, zstd): round trips, corrupt payloads, unknown ids, bombs."""

import struct
import threading
import zlib

import lz4.frame
import pytest
import zstandard

from broker.common.errors import CorruptBatchError
from broker.wire import codecs, records

ALL = sorted(codecs.CODECS.values())
COMPRESSED = [c for c in ALL if c != codecs.CODEC_NONE]
LOG_LINES = [
    f"2026-11-24 20:{i % 60:02d}:00 INFO [main] o.a.h.Server: request {i} served in "
    f"{i % 97} ms from 10.0.{i % 7}.{i % 13}".encode()
    for i in range(400)
]


def _with_crc(attributes: int, count: int, payload: bytes) -> bytes:
    """A batch whose CRC is right for whatever header and payload it is given."""
    body = struct.pack(">BIq", attributes, count, 1000) + payload
    return struct.pack(">IBI", 18 + len(payload), 1, zlib.crc32(body)) + body


def test_ids_follow_kafkas_numbering_and_names_are_what_configs_spell():
    assert codecs.CODECS == {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}
    assert records.CODECS is codecs.CODECS


@pytest.mark.parametrize("codec", ALL)
def test_round_trip_every_codec(codec):
    keys = [None if i % 3 else f"host-{i % 5}".encode() for i in range(len(LOG_LINES))]
    stamps = [1_700_000_000_000 + i for i in range(len(LOG_LINES))]
    data = records.encode_batch(LOG_LINES, keys, stamps, codec)
    (batch,), used = records.decode_batches(data, 77)
    assert used == len(data)
    assert (batch.values, batch.keys, batch.timestamps, batch.codec) == (LOG_LINES, keys, stamps, codec)
    assert records.scan(data).error is None
    assert records.validate_message_set(data).messages == len(LOG_LINES)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressed_codecs_shrink_logs(codec):
    plain = records.encode_batch(LOG_LINES, None, 1, codecs.CODEC_NONE)
    packed = records.encode_batch(LOG_LINES, None, 1, codec)
    assert len(packed) < len(plain) / 3


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("damage", ["cut", "flipped", "garbage", "empty", "other codec"])
def test_corrupt_compressed_payload_is_a_corrupt_batch_error(codec, damage):
    good = codecs.compress(codec, records.encode_batch([b"x" * 50] * 20, None, 1)[22:])
    if damage == "cut":
        payload = good[: len(good) // 2]
    elif damage == "flipped":
        payload = bytearray(good)
        for i in range(len(payload) // 2, len(payload)):
            payload[i] ^= 0x5A
        payload = bytes(payload)
    elif damage == "garbage":
        payload = b"not a compressed frame at all"
    elif damage == "empty":
        payload = b""
    else:  # a good frame of another codec under this codec's id
        payload = codecs.compress(
            codecs.CODEC_GZIP if codec != codecs.CODEC_GZIP else codecs.CODEC_ZSTD, b"\x93\xc0\x91\xc4\x01a\xc0"
        )
    batch = _with_crc(codec, 20, payload)  # CRC fine: the codec must catch it
    with pytest.raises(CorruptBatchError, match="offset 500"):
        records.decode_batches(batch, 500)


@pytest.mark.parametrize("codec_id", [2, 5, 6, 7])
def test_unknown_codec_id_is_a_clear_error_everywhere(codec_id):
    raw = records.encode_batch([b"a", b"b"], None, 1)
    batch = _with_crc(codec_id, 2, raw[22:])
    with pytest.raises(CorruptBatchError, match=f"unknown compression codec {codec_id}"):
        records.decode_batches(batch, 0)
    result = records.scan(batch)
    assert result.valid_bytes == 0 and f"unknown compression codec {codec_id}" in result.error
    with pytest.raises(CorruptBatchError, match="unknown compression codec"):
        records.validate_message_set(batch)  # the broker refuses it on produce
    with pytest.raises(ValueError, match="unknown compression codec"):
        records.encode_batch([b"a"], None, 1, codec_id)


def test_attribute_bits_outside_the_codec_are_malformed():
    raw = records.encode_batch([b"a"], None, 1)
    batch = _with_crc(0x08, 1, raw[22:])
    with pytest.raises(CorruptBatchError, match="malformed"):
        records.decode_batches(batch, 0)
    assert "malformed" in records.scan(batch).error


@pytest.mark.parametrize("codec", COMPRESSED)
def test_payload_growing_past_the_limit_is_refused(codec, monkeypatch):
    payload = records.encode_batch([b"y" * 1000] * 10, None, 1)[22:]
    batch = records.encode_batch([b"y" * 1000] * 10, None, 1, codec)
    monkeypatch.setattr(codecs, "MAX_PAYLOAD_BYTES", len(payload) - 1)
    with pytest.raises(CorruptBatchError, match="limit"):
        records.decode_batches(batch, 0)


@pytest.mark.parametrize("frame", ["zstd", "lz4"])
def test_frames_without_a_stored_size_decode_and_stay_bounded(frame, monkeypatch):
    payload = records.encode_batch([b"z" * 1000] * 10, None, 1)[22:]
    if frame == "zstd":
        codec = codecs.CODEC_ZSTD
        packed = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    else:
        codec = codecs.CODEC_LZ4
        packed = lz4.frame.compress(payload, store_size=False)
    batch = _with_crc(codec, 10, packed)
    (decoded,), _ = records.decode_batches(batch, 0)
    assert decoded.values == [b"z" * 1000] * 10
    monkeypatch.setattr(codecs, "MAX_PAYLOAD_BYTES", len(payload) - 1)
    with pytest.raises(CorruptBatchError):
        records.decode_batches(batch, 0)


def test_compress_batch_compresses_an_uncompressed_batch_keeping_its_messages():
    stamps = [5000 + i for i in range(len(LOG_LINES))]
    plain = records.encode_batch(LOG_LINES, None, stamps)
    packed = records.compress_batch(plain, codecs.CODEC_ZSTD)
    assert len(packed) < len(plain) / 3
    (batch,), _ = records.decode_batches(packed, 0)
    assert (batch.values, batch.timestamps, batch.codec) == (LOG_LINES, stamps, codecs.CODEC_ZSTD)
    assert records.count_messages(packed) == (1, len(LOG_LINES))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compress_batch_leaves_compressed_batches_and_codec_none_alone(codec):
    batch = records.encode_batch(LOG_LINES, None, 1, codec)
    assert records.compress_batch(batch, codecs.CODEC_ZSTD) is batch
    plain = records.encode_batch(LOG_LINES, None, 1)
    assert records.compress_batch(plain, codecs.CODEC_NONE) is plain


def test_compress_batch_refuses_what_is_not_one_valid_batch():
    plain = bytearray(records.encode_batch([b"a", b"b"], None, 1))
    with pytest.raises(CorruptBatchError):
        records.compress_batch(bytes(plain) * 2, codecs.CODEC_ZSTD)
    plain[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC"):
        records.compress_batch(bytes(plain), codecs.CODEC_ZSTD)
    with pytest.raises(CorruptBatchError):
        records.compress_batch(b"short", codecs.CODEC_ZSTD)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_threads_compress_and_decompress_at_once(codec):
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(30):
                values = [b"%d-%d " % (seed, i) + line for line in LOG_LINES[: 50 + seed * 10 + i]]
                (batch,), _ = records.decode_batches(records.encode_batch(values, None, 1, codec), 0)
                assert batch.values == values
        except BaseException as exc:  # reported below, from the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors

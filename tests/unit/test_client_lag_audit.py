"""The client face's pure parts: the one lag formula, the audit record, batch helpers."""

from __future__ import annotations

import msgpack
import pytest

from broker.client import (
    CODEC_GZIP,
    AuditRecord,
    CorruptBatchError,
    Lag,
    decode_batch,
    encode_batch,
    group_lag,
    window_of,
)


def test_lag_is_visible_end_minus_committed_offset() -> None:
    assert group_lag(1000, (400, 0), log_start=0, avg_message_bytes=100) == Lag(600, 6)


def test_lag_messages_discount_the_skipped_messages_of_the_committed_batch() -> None:
    # The batch at 400 is fetched whole again (bytes), its first 2 messages are dropped.
    assert group_lag(1000, (400, 2), log_start=0, avg_message_bytes=100) == Lag(600, 4)
    assert group_lag(1000, (400, 9), log_start=0, avg_message_bytes=100) == Lag(600, 0)


def test_lag_is_clamped_at_zero() -> None:
    assert group_lag(1000, (1500, 0), log_start=0, avg_message_bytes=100) == Lag(0, 0)
    assert group_lag(1000, (1000, 0)) == Lag(0, 0)


def test_missing_commit_counts_from_the_log_start() -> None:
    assert group_lag(1000, None, log_start=200, avg_message_bytes=100) == Lag(800, 8)
    assert group_lag(1000, None) is None  # no commit and no known start: unknown


def test_unknown_end_or_average() -> None:
    assert group_lag(-1, (0, 0)) is None
    assert group_lag(1000, (0, 0), avg_message_bytes=0) == Lag(1000, None)


def test_committed_below_log_start_is_not_clamped_to_it() -> None:
    assert group_lag(1000, (100, 0), log_start=500).bytes == 900


def test_audit_record_round_trip_and_schema() -> None:
    record = AuditRecord("t", 60_000, 120_000, 5, 4)
    value = record.encode(host="web-1")
    assert msgpack.unpackb(value) == {
        "host": "web-1",
        "topic": "t",
        "window_start": 60_000,
        "window_end": 120_000,
        "sent": 5,
        "acked": 4,
        "stage": "agent",
    }
    assert AuditRecord.decode(value) == record._replace(host="web-1")
    assert record.to_map("h")["host"] == "h" and record._replace(host="x").to_map()["host"] == "x"


def test_audit_record_defaults_and_rejects() -> None:
    bare = {"topic": "t", "window_start": 0, "window_end": 1, "sent": 1, "acked": 1}
    assert AuditRecord.from_map(bare) == AuditRecord("t", 0, 1, 1, 1, "", "agent")
    for bad in ({"junk": 1}, {**bare, "window_start": "x"}, {**bare, "sent": True}, {**bare, "topic": 3}, [1, 2]):
        with pytest.raises(ValueError):
            AuditRecord.from_map(bad)  # type: ignore[arg-type]
    assert AuditRecord.decode(b"\xc1") is None
    assert AuditRecord.decode(msgpack.packb([1])) is None


def test_window_of_is_epoch_aligned() -> None:
    assert window_of(61_234, 60_000) == 60_000 and window_of(60_000, 60_000) == 60_000


def test_decode_batch_takes_exactly_one_whole_batch() -> None:
    raw = encode_batch([b"a", b"b"], [b"k", None], [5, 6], CODEC_GZIP)
    batch = decode_batch(raw, 100)
    assert (batch.offset, batch.next_offset, batch.values, batch.codec) == (
        100,
        100 + len(raw),
        [b"a", b"b"],
        CODEC_GZIP,
    )
    with pytest.raises(CorruptBatchError):
        decode_batch(raw + raw)
    with pytest.raises(CorruptBatchError):
        decode_batch(raw[:-1])

"""Batches to Arrow: columns equal the messages, schema equals Spark's; agent decoding."""

from __future__ import annotations

import datetime as dt

import msgpack
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from broker.client import CODECS, messages_of
from broker.wire.records import decode_batches, encode_batch
from hadoop_loader import agent_records
from hadoop_loader.arrowconv import arrow_schema, spark_schema, to_record_batch
from tests.loader.fakes import FakePartitionLog


@pytest.mark.parametrize("agent", [False, True])
def test_arrow_schema_is_what_spark_expects(agent):
    # PySpark 4.1's converter writes timestamps as UTC instants (timestamp_utc=True)
    assert to_arrow_schema(spark_schema(agent), timestamp_utc=True).equals(arrow_schema(agent))


def test_columns_match_messages_across_batches_with_and_without_keys_and_deltas():
    parts = [
        encode_batch([b"a", b"bb", b"ccc"], None, 1000),
        encode_batch([b"d", b"e"], [b"k1", None], [2000, 2005]),
        encode_batch([b"f" * 300], None, [3000]),
    ]
    batches, _ = decode_batches(b"".join(parts), 500)
    rb = to_record_batch("logs", 3, batches, None).batch
    expected = [m for b in batches for m in messages_of("logs", 3, b)]
    got = rb.to_pylist()
    assert len(got) == len(expected) == 6
    for row, m in zip(got, expected, strict=True):
        assert (row["topic"], row["partition"], row["offset"], row["index"], row["key"], row["value"]) == (
            m.topic,
            m.partition,
            m.offset,
            m.index,
            m.key,
            m.value,
        )
        assert int(row["timestamp"].timestamp() * 1000) == m.timestamp
    assert rb.schema.equals(arrow_schema(False))


def test_one_batch_of_many_messages():
    log = FakePartitionLog([[b"v%d" % i for i in range(5000)]], base_offset=77)
    batches, _ = decode_batches(log.buf, 77)
    rb = to_record_batch("t", 0, batches, None).batch
    assert rb.num_rows == 5000
    assert rb.column("index").to_pylist() == list(range(5000))
    assert set(rb.column("offset").to_pylist()) == {77}


def utc_ms(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def agent_value(i: int, **extra) -> bytes:
    record = {
        "time": 1_700_000_000_000 + i,
        "host": "web-1",
        "file": "/var/log/app.log",
        "offset": i * 100,
        "line": f"line {i}",
    }
    record.update(extra)
    return msgpack.packb(record)


def test_agent_records_decode_and_bad_values_are_kept_raw_and_counted():
    values = [
        agent_value(0),
        b"\xc1 not msgpack",
        msgpack.packb([1, 2]),
        agent_value(3, ptime=5, cut=True),
        msgpack.packb({"host": 7, "line": "x"}),
        agent_value(5, extra_field="ignored"),
    ]
    batches, _ = decode_batches(encode_batch(values, None, 1), 0)
    converted = to_record_batch("app", 0, batches, True)
    rows = converted.batch.to_pylist()
    assert converted.undecodable == 3
    assert [r["decoded"] for r in rows] == [True, False, False, True, False, True]
    assert [r["value"] for r in rows] == values
    assert rows[0]["host"] == "web-1" and rows[0]["file_offset"] == 0
    assert rows[0]["line"] == "line 0" and rows[0]["read_time"] == utc_ms(1_700_000_000_000)
    assert rows[3]["parsed_time"] == utc_ms(5) and rows[3]["cut"] is True
    assert rows[0]["cut"] is None
    assert rows[4]["host"] is None and rows[1]["line"] is None


def test_topic_not_decoded_gets_null_agent_columns():
    batches, _ = decode_batches(encode_batch([agent_value(1)], None, 1), 0)
    converted = to_record_batch("plain", 0, batches, False)
    row = converted.batch.to_pylist()[0]
    assert row["decoded"] is None and row["host"] is None and converted.undecodable == 0
    assert converted.batch.schema.equals(arrow_schema(True))


def test_decode_values_fast_path_counts():
    fields, decoded, bad = agent_records.decode_values([agent_value(i) for i in range(100)])
    assert bad == 0 and decoded.true_count == 100
    assert len(fields) == len(agent_records.AGENT_FIELDS)
    assert isinstance(fields[0], pa.Array)


def test_agent_times_are_utc_timestamps_and_out_of_range_times_are_not_decoded():
    values = [
        agent_value(0, ptime=1_709_251_200_123),
        agent_value(1, time=1 << 62),
        agent_value(2, ptime=-(1 << 62)),
        agent_value(3, time=True),
    ]
    fields, decoded, bad = agent_records.decode_values(values)
    columns = dict(zip((f.column for f in agent_records.AGENT_FIELDS), fields, strict=True))
    assert columns["read_time"].type == columns["parsed_time"].type == pa.timestamp("us", "UTC")
    assert decoded.to_pylist() == [True, False, False, False] and bad == 3
    assert columns["read_time"].to_pylist()[0] == utc_ms(1_700_000_000_000)
    assert columns["parsed_time"].to_pylist()[0] == utc_ms(1_709_251_200_123)
    assert columns["read_time"].to_pylist()[1:] == [None, None, None]


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_the_reader_lands_the_same_rows_from_every_codec(codec):
    values = [agent_value(i) for i in range(300)]
    parts = [
        encode_batch(values[:200], None, 1000, CODECS[codec]),
        encode_batch(values[200:], [b"web-1"] * 100, 2000, CODECS[codec]),
    ]
    batches, _ = decode_batches(b"".join(parts), 0)
    rows = to_record_batch("app", 0, batches, True).batch.to_pylist()
    assert [r["value"] for r in rows] == values
    assert [r["line"] for r in rows] == [f"line {i}" for i in range(300)]
    assert all(r["decoded"] for r in rows)

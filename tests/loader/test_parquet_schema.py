"""The landed Parquet as other tools see it: pyarrow's Parquet metadata, DuckDB, Spark.

Real brokers, a real landing run (Spark local mode), then the landed files read three
ways, independently of the loader: every timestamp column is INT64 with the TIMESTAMP
logical type adjusted to UTC (not INT96), DuckDB and Spark see timestamps equal to what
was sent, ``key`` is text where the key is UTF-8 (raw bytes in ``key_bytes`` otherwise),
and ``value`` is left out of rows that decoded cleanly unless configured otherwise.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from broker.client import Producer
from hadoop_loader.job import run_load
from tests.loader.conftest import BASE_HOUR_MS, loader_config, produce, read_landed

pytestmark = pytest.mark.integration

TIME_COLUMNS = ("timestamp", "read_time", "parsed_time")
SENT_AT = BASE_HOUR_MS + 5_000
"""The agent's read time of every line, also the message timestamp."""
PARSED_BASE = BASE_HOUR_MS - 3_600_000 + 123
"""Parsed times of the lines: an hour earlier, with milliseconds, one ms apart."""
N_AGENT = 1_200
N_PLAIN = 300
TEXT_KEY, BINARY_KEY = "web-7/app.log", b"\xff\xfe\x00key"


def utc_ms(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def send_agent_records(zk: str) -> list[bytes]:
    """N_AGENT agent records in three sends (text key, non-UTF-8 key, no key) plus one
    value that is not an agent record; returns the values in order."""
    from agent.encode import chunk_prefix, encode_values

    prefix = chunk_prefix(SENT_AT, "web-7", "/var/log/app.log")
    lines = [b"line %d" % i for i in range(N_AGENT)]
    values = encode_values(
        prefix, lines, [i * 10 for i in range(N_AGENT)], ptimes=[PARSED_BASE + i for i in range(N_AGENT)]
    )
    values[7] = b"\xc1 not an agent record"
    third = N_AGENT // 3
    with Producer(zk=zk) as producer:
        for key, part in (
            (TEXT_KEY.encode(), values[:third]),
            (BINARY_KEY, values[third : 2 * third]),
            (None, values[2 * third :]),
        ):
            producer.send("agent-log", part, key=key, partition=0, timestamp=SENT_AT)
        producer.flush(timeout=60)
    return values


def land(spark, zk: str, out: Path, **output) -> None:
    config = loader_config(
        zk, out, ["agent-log", "plain-log"], source={"decode_agent_records": ["agent-log"]}, output=output
    )
    result = run_load(config, spark=spark)
    assert result.rows == N_AGENT + N_PLAIN and result.undecodable == 1


def landed_files(out: Path, topic: str) -> list[Path]:
    return sorted(p for p in out.rglob("*.parquet") if "_logferry" not in p.parts and f"topic={topic}" in p.parts)


@pytest.mark.slow
def test_landed_parquet_types_in_pyarrow_duckdb_and_spark(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    values = send_agent_records(zk)
    plain = produce(zk, "plain-log", 1, N_PLAIN)
    out = tmp_path / "wh"
    land(spark, zk, out)

    # sent N, landed N
    table = read_landed(out)
    assert table.num_rows == N_AGENT + N_PLAIN
    agent_files = landed_files(out, "agent-log")
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in agent_files) == N_AGENT

    # pyarrow: the Parquet schema itself, column by column
    for f in agent_files + landed_files(out, "plain-log"):
        schema = pq.ParquetFile(f).schema
        for name in TIME_COLUMNS:
            column = schema.column(schema.names.index(name))
            assert column.physical_type == "INT64", (f, name)
            logical = json.loads(column.logical_type.to_json())
            assert (logical["Type"], logical["isAdjustedToUTC"]) == ("Timestamp", True), (name, logical)
            assert logical["timeUnit"] in ("milliseconds", "microseconds")
        key = schema.column(schema.names.index("key"))
        assert key.physical_type == "BYTE_ARRAY" and key.logical_type.type == "STRING"
        key_bytes = schema.column(schema.names.index("key_bytes"))
        assert key_bytes.logical_type.type == "NONE"

    # DuckDB, as a user would query the output tree
    glob = f"{out}/topic=*/dt=*/hr=*/*.parquet"
    con = duckdb.connect()
    described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()
    types = {row[0]: row[1] for row in described}
    for name in TIME_COLUMNS:
        assert types[name] in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP"), (name, types[name])
    assert types["key"] == "VARCHAR" and types["key_bytes"] == "BLOB"
    assert types["fields"] == "MAP(VARCHAR, VARCHAR)"
    rows = con.execute(
        f"SELECT file_offset, epoch_ms(timestamp), epoch_ms(read_time), epoch_ms(parsed_time), "
        f"key, key_bytes, value, decoded FROM read_parquet('{glob}', hive_partitioning = true) "
        'WHERE topic = \'agent-log\' ORDER BY "offset", "index"'
    ).fetchall()
    assert len(rows) == N_AGENT
    third = N_AGENT // 3
    for i, (file_offset, ts, read_time, parsed_time, key, key_bytes, value, decoded) in enumerate(rows):
        assert ts == SENT_AT
        expected_key = (TEXT_KEY, None) if i < third else ((None, BINARY_KEY) if i < 2 * third else (None, None))
        assert (key, key_bytes) == expected_key, i
        if i == 7:  # not an agent record: raw value kept, no agent columns
            assert (decoded, value, read_time, parsed_time) == (False, values[7], None, None)
        else:
            assert (decoded, value, file_offset) == (True, None, i * 10)
            assert (read_time, parsed_time) == (SENT_AT, PARSED_BASE + i)
    plain_rows = con.execute(
        f"SELECT value, epoch_ms(timestamp) FROM read_parquet('{glob}', hive_partitioning = "
        'true) WHERE topic = \'plain-log\' ORDER BY "offset", "index"'
    ).fetchall()
    assert plain_rows == [(v, ts) for v, ts in plain[0]]  # not decoded: value kept

    # Spark reads the same files back with TimestampType
    from pyspark.sql import types as T

    df = spark.read.parquet(str(out))
    spark_types = {f.name: f.dataType for f in df.schema.fields}
    for name in TIME_COLUMNS:
        assert isinstance(spark_types[name], T.TimestampType), (name, spark_types[name])
    assert isinstance(spark_types["key"], T.StringType)
    first = df.where("topic = 'agent-log' AND file_offset = 0").select(*TIME_COLUMNS).collect()
    naive = [utc_ms(ms).replace(tzinfo=None) for ms in (SENT_AT, SENT_AT, PARSED_BASE)]
    assert [tuple(r) for r in first] == [tuple(naive)]  # Spark's rows: session time zone, UTC


def test_raw_values_of_decoded_records_can_be_kept(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    values = send_agent_records(zk)
    produce(zk, "plain-log", 1, N_PLAIN)
    out = tmp_path / "wh"
    land(spark, zk, out, drop_decoded_values=False)
    table = read_landed(out)
    assert table.num_rows == N_AGENT + N_PLAIN
    rows = sorted(
        zip(
            table.column("topic").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("index").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    assert [v for t, _, _, v in rows if t == "agent-log"] == values

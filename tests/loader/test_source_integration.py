"""The data source against real brokers and Spark local mode."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from broker.client import SimpleConsumer
from hadoop_loader import register
from tests.loader.conftest import produce

pytestmark = pytest.mark.integration


def test_read_with_filter_and_offsets(spark, broker_cluster):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    sent = produce(zk, "src", 3, 30_000, value_bytes=60)
    register(spark)
    df = (
        spark.read.format("logferry")
        .option("zk", zk)
        .option("topics", "src")
        .option("maxBytesPerPartition", str(256 * 1024))
        .load()
    )
    assert df.count() == 30_000
    # a filter Spark evaluates on top of the read
    p1 = df.where((F.col("partition") == 1) & F.col("value").cast("string").startswith("src-0000"))
    got = sorted(r["value"] for r in p1.select("value").collect())
    assert got == sorted(v for v, _ in sent[1] if v.startswith(b"src-0000"))
    # the first rows of partition 2 in order, from the Arrow path
    rows = (
        df.where("partition = 2")
        .orderBy("offset", "index")
        .limit(5)
        .select("offset", "index", "value", "timestamp")
        .collect()
    )
    assert [r["value"] for r in rows] == [v for v, _ in sent[2][:5]]
    # explicit offsets: from the second batch boundary of partition 0 to its end
    with SimpleConsumer(zk=zk) as consumer:
        first_batch = consumer.fetch("src", 0, 0, max_bytes=1 << 20).batches[0]
    part0 = (
        spark.read.format("logferry")
        .option("zk", zk)
        .option("topics", "src")
        .option("startingOffsets", json.dumps({"src": {"0": first_batch.next_offset}}))
        .option("endingOffsets", "latest")
        .load()
        .where("partition = 0")
    )
    assert part0.count() == len(sent[0]) - len(first_batch.values)


@pytest.mark.slow
def test_structured_streaming_follows_topics_across_restarts(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    first = produce(zk, "stream", 2, 6_000, batch_bytes=8 * 1024)
    register(spark)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_available_now() -> None:
        stream = spark.readStream.format("logferry").option("zk", zk).option("topics", "stream").load()
        query = (
            stream.select("partition", "offset", "index", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return query

    query = run_available_now()
    assert len(query.recentProgress) >= 1
    assert spark.read.parquet(str(out)).count() == 6_000
    second = produce(zk, "stream", 2, 2_000, start=6_000)
    run_available_now()
    landed = spark.read.parquet(str(out))
    assert landed.count() == 8_000
    assert landed.select("partition", "offset", "index").distinct().count() == 8_000
    values = {r["value"] for r in landed.select("value").collect()}
    assert values == {v for part in (first, second) for msgs in part.values() for v, _ in msgs}

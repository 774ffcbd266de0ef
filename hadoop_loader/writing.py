"""The one Spark write path of the loader: the landed frame of some chunks, and its
Parquet files by topic and hour.

A run (:mod:`hadoop_loader.job`) and a repair (:mod:`hadoop_loader.repair`) land rows
the same way, so both build the frame and write it through this module.
"""

from __future__ import annotations

import json
from typing import Any

from hadoop_loader import field_columns
from hadoop_loader.config import LoaderConfig
from hadoop_loader.dedup import DUPLICATE_COLUMN, mark_duplicates
from hadoop_loader.identity import IdentityRange
from hadoop_loader.landed import NO_DICTIONARY, configure_writes, landed_frame
from hadoop_loader.options import Endpoint, sasl_options, tls_options
from hadoop_loader.planning import Chunk
from hadoop_loader.source import FORMAT

CONCURRENT_WRITERS = 48
"""Open Parquet writers per task before Spark falls back to sorting rows by hour."""


def landed_rows(
    config: LoaderConfig, spark: Any, chunks: list[Chunk], executors: Endpoint, earlier: list[IdentityRange] | None
) -> Any:
    """The frame a run writes: the chunks read through the data source, shaped as landed
    columns, with ``dt``/``hr`` and, when ``earlier`` is not None (dedup on), the
    ``duplicate`` mark (:mod:`hadoop_loader.dedup`). A repair builds the same frame."""
    from pyspark.sql import functions as F

    decoded = sorted(config.source.decode_agent_records)
    reader = (
        spark.read.format(FORMAT)
        .option("brokers", ",".join(executors.brokers or ()))
        .option("topics", ",".join(config.source.topics))
        .option("chunks", json.dumps([c.to_json() for c in chunks]))
        .option("fetchBytes", str(config.load.fetch_bytes))
        .option("maxBytesPerPartition", str(config.load.chunk_bytes))
        .option("decodeAgentRecords", ",".join(decoded) if decoded else "false")
        .options(**tls_options(config.tls), **sasl_options(config.sasl))
    )
    df = landed_frame(
        field_columns.promote(reader.load(), config.source.field_columns), config.output.drop_decoded_values
    )
    if earlier is not None:
        df = mark_duplicates(spark, df, earlier)
    return df.withColumn("dt", F.date_format("timestamp", "yyyy-MM-dd")).withColumn(
        "hr", F.date_format("timestamp", "HH")
    )


def write_parquet(config: LoaderConfig, spark: Any, df: Any, data_uri: str) -> None:
    """Write a landed frame under ``data_uri`` by topic and hour (and ``duplicate``)."""
    from pyspark.sql import functions as F

    per_hour = config.output.files_per_hour
    if per_hour > 0:
        keys = [F.col("topic"), F.col("dt"), F.col("hr")]
        if per_hour > 1:
            keys.append(F.pmod(F.hash("partition", "offset", "index"), F.lit(per_hour)))
        df = df.repartition(*keys)
    # A task writes the hours it meets concurrently instead of sorting its rows by hour
    # first (Spark's default for partitioned writes); rows arrive nearly in time order.
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS))
    configure_writes(spark)
    columns = ["topic", "dt", "hr"] + ([DUPLICATE_COLUMN] if DUPLICATE_COLUMN in df.columns else [])
    writer = (
        df.write.partitionBy(*columns)
        .option("maxRecordsPerFile", config.output.max_records_per_file)
        .option("compression", config.output.compression)
        .mode("errorifexists")
    )
    for column in NO_DICTIONARY:  # unique per row: dictionary pages are built, then dropped
        writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    writer.parquet(data_uri)

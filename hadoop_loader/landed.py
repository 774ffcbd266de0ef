"""The landed Parquet's columns: the data source's, shaped for people querying files.

The data source keeps Kafka's shape (``key`` and ``value`` as bytes); the files the
landing job writes are read by Spark, DuckDB, pyarrow, Trino and pandas users, so:

- every timestamp (``timestamp``, ``read_time``, ``parsed_time``) is written as Parquet
  INT64 microseconds with the TIMESTAMP logical type and ``isAdjustedToUTC = true``
  (:data:`OUTPUT_TIMESTAMP_TYPE`), not Spark's default, the deprecated INT96;
- ``key`` is a string: the key's text when it is valid UTF-8, null otherwise;
  ``key_bytes`` holds the raw key only when it is not valid UTF-8 (null otherwise), so
  no key is lost and text keys are not stored twice;
- with ``drop_decoded_values`` (``output.drop_decoded_values``, default on) ``value``
  is null for rows whose value decoded as an agent record (``decoded`` true): every
  field of the record is in its own column. Values that did not decode, and topics that
  are not decoded, keep their raw ``value``.

The table of columns is in docs/loader.md ("Landed Parquet").
"""

from __future__ import annotations

from typing import Any

from hadoop_loader.agent_records import DECODED_COLUMN

OUTPUT_TIMESTAMP_TYPE = "TIMESTAMP_MICROS"
"""``spark.sql.parquet.outputTimestampType`` of the landing job's writes."""

KEY_BYTES_COLUMN = "key_bytes"

NO_DICTIONARY = ("value", "key", "line", "offset", "file_offset", "read_time", "parsed_time")
"""Columns (nearly) unique per row: Parquet dictionary encoding only costs time there
(pages are built, then dropped for plain ones). Both formats write them without."""


def landed_frame(df: Any, drop_decoded_values: bool) -> Any:
    """``df`` (the data source's columns) with the landed file's key and value columns.

    Column order is kept; ``key_bytes`` follows ``key``.
    """
    from pyspark.sql import functions as F

    raw_key = F.col("key")
    text = F.try_validate_utf8(raw_key.cast("string"))
    columns = []
    for name in df.columns:
        if name == "key":
            columns.append(text.alias("key"))
            columns.append(F.when(raw_key.isNotNull() & text.isNull(), raw_key).alias(KEY_BYTES_COLUMN))
        elif name == "value" and drop_decoded_values and DECODED_COLUMN in df.columns:
            columns.append(
                F.when(F.col(DECODED_COLUMN), F.lit(None).cast("binary")).otherwise(F.col("value")).alias("value")
            )
        else:
            columns.append(F.col(name))
    return df.select(*columns)


def configure_writes(spark: Any) -> None:
    """Session settings every landed file depends on (INT64 UTC timestamps)."""
    spark.conf.set("spark.sql.parquet.outputTimestampType", OUTPUT_TIMESTAMP_TYPE)

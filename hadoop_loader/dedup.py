"""Dedup in the landing job's Spark plan: mark rows whose record identity was landed.

A row is a *duplicate* when its identity (topic, ``host``, ``file_id``,
``file_offset``; :mod:`hadoop_loader.identity`) was landed by an earlier run (it falls
in one of the identity ranges of the recent manifests) or by this run already (an
earlier row of this run has it: the first copy by ``(partition, offset, index)`` is
kept). Rows without an identity (``file_id`` null: not an agent record, or an agent
older than the field) are never duplicates.

Everything runs in Spark: the earlier ranges are a small broadcast table joined on
``(topic, host, file_id)`` with ``file_offset`` between the range's ends (merged ranges
never overlap, so a row matches at most one), and this run's copies are found with a
window over the identity. Rows without an identity get a key of their own
(partition, offset, index), so they never pile up in one window partition.

The job writes duplicates too, in staging under ``duplicate=true`` (never published):
counting them back per topic, partition and hour is then as exact as the landed counts,
and a run reads the brokers once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hadoop_loader.identity import IdentityRange

DUPLICATE_COLUMN = "duplicate"
"""Staging-only partition column: ``true`` for rows dropped as copies."""


def mark_duplicates(spark: Any, df: Any, earlier: list[IdentityRange]) -> Any:
    """``df`` with a boolean :data:`DUPLICATE_COLUMN` (the columns of ``df`` unchanged)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    ident = F.col("file_id").isNotNull() & F.col("file_offset").isNotNull()
    keys = [
        F.col("topic"),
        ident.alias("_i"),
        F.when(ident, F.col("host")).alias("_h"),
        F.when(ident, F.col("file_id")).otherwise(F.col("partition").cast("long")).alias("_f"),
        F.when(ident, F.col("file_offset")).otherwise(F.col("offset")).alias("_o"),
        F.when(ident, F.lit(-1)).otherwise(F.col("index")).alias("_x"),
    ]
    order = Window.partitionBy(*keys).orderBy("partition", "offset", "index")
    marked = df.withColumn("_copy", F.row_number().over(order) > 1)
    if earlier:
        schema = T.StructType(
            [
                T.StructField("_rt", T.StringType(), False),
                T.StructField("_rh", T.StringType(), True),
                T.StructField("_rf", T.LongType(), False),
                T.StructField("_lo", T.LongType(), False),
                T.StructField("_hi", T.LongType(), False),
            ]
        )
        table = spark.createDataFrame([tuple(r) for r in earlier], schema).withColumn("_seen", F.lit(True))
        condition = (
            (F.col("topic") == F.col("_rt"))
            & F.col("host").eqNullSafe(F.col("_rh"))
            & (F.col("file_id") == F.col("_rf"))
            & F.col("file_offset").between(F.col("_lo"), F.col("_hi"))
        )
        marked = marked.join(F.broadcast(table), condition, "left")
        seen = F.coalesce(F.col("_seen"), F.lit(False))
    else:
        seen = F.lit(False)
    return marked.select(*[F.col(c) for c in df.columns], (F.col("_copy") | seen).alias(DUPLICATE_COLUMN))


@dataclass(frozen=True)
class Tally:
    """What the mark found in some rows: the identities of the rows kept, and the copies."""

    identities: list[IdentityRange]
    """The kept rows' identities as ranges, per topic, partition, host and file id."""
    duplicates: dict[tuple[str, int], int]
    """(topic, partition) -> rows marked as copies (partitions without copies left out)."""


def tally(marked: Any) -> Tally:
    """One small aggregate over rows carrying :data:`DUPLICATE_COLUMN` (a boolean, or the
    ``"true"``/``"false"`` of a Parquet partition directory), collected to the driver:
    a group per topic, partition, host, file id and mark."""
    from pyspark.sql import functions as F

    copy = F.col(DUPLICATE_COLUMN).cast("boolean").alias("_copy")
    ident = F.col("file_id").isNotNull() & F.col("file_offset").isNotNull()
    rows = (
        marked.groupBy("topic", "partition", "host", F.when(ident, F.col("file_id")).alias("file_id"), copy)
        .agg(F.min("file_offset").alias("lo"), F.max("file_offset").alias("hi"), F.count(F.lit(1)).alias("n"))
        .collect()
    )
    identities = []
    duplicates: dict[tuple[str, int], int] = {}
    for r in rows:
        if r["_copy"]:
            key = (r["topic"], int(r["partition"]))
            duplicates[key] = duplicates.get(key, 0) + int(r["n"])
        elif r["file_id"] is not None and r["lo"] is not None:
            identities.append(IdentityRange(r["topic"], r["host"], int(r["file_id"]), int(r["lo"]), int(r["hi"])))
    identities.sort(key=lambda r: (r.topic, r.host or "", r.host is None, r.file_id, r.lo, r.hi))
    return Tally(identities, duplicates)


def copies_per_hour(marked: Any) -> dict[int, int]:
    """Rows marked as copies per event hour, as hours since the epoch (UTC, the unit of
    Iceberg's ``hours(timestamp)`` partitions): one small aggregate, for the audit's
    duplicates per hour of a table (:data:`hadoop_loader.iceberg.DUPLICATE_HOURS`)."""
    from pyspark.sql import functions as F

    hour = F.floor(F.unix_micros(F.col("timestamp")) / F.lit(3_600_000_000)).alias("_hour")
    rows = marked.where(F.col(DUPLICATE_COLUMN).cast("boolean")).groupBy(hour).count().collect()
    return {int(r["_hour"]): int(r["count"]) for r in rows if r["_hour"] is not None}


def identity_ranges(staged: Any) -> list[IdentityRange]:
    """This run's landed (not duplicate) identities as ranges, per topic, partition, host
    and file id (:func:`tally`)."""
    return tally(staged).identities

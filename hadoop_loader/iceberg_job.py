"""The landing job into Iceberg tables (``output.format = "iceberg"``), and their upkeep.

A run, under the output's lock (``<warehouse>/_logferry/lock``, as for Parquet):

1. reads each topic's table: the offsets of its newest landing snapshot
   (:meth:`IcebergTables.landed`; a new topic has none);
2. plans from those offsets to the visible ends, exactly as the Parquet job does
   (capped at ``max_bytes_per_partition``, cut into chunks at batch boundaries);
3. per topic, one Spark job reads the chunks through the ``logferry`` data source and
   appends the rows to the topic's table in ONE Iceberg commit whose snapshot summary
   carries the new offsets (:func:`hadoop_loader.iceberg.summary_properties`).

With dedup on, step 3 marks copies with :func:`hadoop_loader.dedup.mark_duplicates`
against the identities the table's loads of the last ``dedup.keep_hours`` landed (read
from their snapshot summaries), keeps the marked rows in Spark's cache while one small
aggregate counts the copies and the kept rows' identity ranges (:func:`hadoop_loader.
dedup.tally`), then appends the kept rows with those ranges and the copies' count in the
same commit's summary. The cache only saves a second read of the brokers: were it
evicted, the rows read again are the same bytes, marked the same way.

The commit is the exactly-once point: before it nothing of the topic's load is visible
and the offsets have not moved; after it both have. A run killed before the commit
leaves data files no snapshot references (removed by ``--maintain``'s orphan-file
removal) and the next run reads the same offsets again; killed after it, the next run
starts where it ended. Topics commit one by one: a run killed between two topics has
landed the first and not the second, each once.

``logferry load --maintain`` (:func:`maintain`) compacts each hour's files into one,
expires old snapshots (never the newest landing one: it holds the offsets) and removes
orphan files, with Iceberg's Spark procedures.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hadoop_loader import crash
from hadoop_loader.config import LoaderConfig
from hadoop_loader.dedup import DUPLICATE_COLUMN, Tally, copies_per_hour, tally
from hadoop_loader.errors import spark_errors
from hadoop_loader.fs import FileSystem
from hadoop_loader.iceberg import IcebergTables, SnapshotInfo, summary_properties
from hadoop_loader.manifest import RangeEntry
from hadoop_loader.offsets import PartitionRange, offset_mover
from hadoop_loader.plan_driver import first_run_position, plan_load
from hadoop_loader.results import Clock, LoadResult, LoadSession, TopicStats
from hadoop_loader.store import Recovery
from hadoop_loader.writing import landed_rows

log = logging.getLogger("logferry.loader")

DROPPED = ("topic", "dt", "hr")
"""Columns of the landed frame a topic's table does not hold: the table is the topic,
and ``hours(timestamp)`` partitions it."""


def land_into_iceberg(
    config: LoaderConfig, session: LoadSession, fs: FileSystem, started: float | None = None
) -> LoadResult:
    """One run into the topics' Iceberg tables; the caller holds the output's lock.
    ``started``: the run's start (epoch seconds), from which ``dedup.keep_hours`` counts."""
    started = time.time() if started is None else started
    clock = Clock()
    spark = session.get()
    clock.lap("spark")
    tables = IcebergTables(spark, config.output.uri, config.output.namespace)
    source = config.source
    with spark_errors("reading the Iceberg tables' last loads"):
        states = {t: tables.landed(t) for t in source.topics}
    clock.lap("read offsets")
    first = first_run_position(config)
    landed = {t: states[t].offsets for t in source.topics}
    plan, executors = plan_load(config, landed)
    clock.lap("plan")
    for gap in plan.gaps:
        log.warning("skipped a retention gap: %s", gap.describe())
    stats = {t: TopicStats() for t in source.topics}
    dedup = config.dedup.enabled
    result = LoadResult(None, Recovery(), stats, plan.gaps, 0.0, plan.walked_bytes, phases=clock.phases, dedup=dedup)
    keep_since = int(started * 1000) - config.dedup.keep_hours * 3600 * 1000
    moves = offset_mover(landed, first)
    run_id = uuid.uuid4().hex
    origin = source.zk or ",".join(source.brokers or ())
    for topic in source.topics:
        ranges = [r for r in plan.ranges if r.topic == topic and moves(r)]
        chunks = [c for c in plan.chunks if c.topic == topic]
        if not ranges and not chunks:
            continue
        state = states[topic]
        offsets = dict(state.offsets)
        offsets.update({r.partition: r.end for r in ranges})
        with spark_errors(f"the Spark job landing {topic} into {tables.name(topic)}"):
            earlier = tables.identities(topic, keep_since) if dedup else None
            frame = landed_rows(config, spark, chunks, executors, earlier)
            counted, cached = Tally([], {}), None
            copy_hours: dict[int, int] = {}
            if dedup and chunks:
                frame, counted, cached = _drop_copies(frame)
                copy_hours = copies_per_hour(cached) if counted.duplicates else {}  # for the audit
            frame = frame.drop(*DROPPED, DUPLICATE_COLUMN)
            if not chunks:  # offsets to record, no rows (first_run = "latest")
                frame = spark.createDataFrame([], frame.schema)
            properties = summary_properties(
                state.load + 1,
                run_id,
                offsets,
                [(r.partition, r.start, r.end) for r in ranges if r.end > r.start],
                [g for g in plan.gaps if g.topic == topic],
                origin,
                counted.identities if dedup else None,
                sum(counted.duplicates.values()),
                copy_hours,
                started_ms=int(started * 1000),
            )
            try:
                if not tables.exists(topic):
                    tables.create(topic, frame.schema, config.output.compression)
                _watch_writes(fs, tables.location(topic))
                snapshot = tables.append(topic, frame, properties, shuffle=config.output.files_per_hour > 0)
            finally:
                if cached is not None:
                    cached.unpersist()
        crash.crash_point("after-commit")
        clock.lap(f"land {topic}")
        _record(result.topics[topic], tables.name(topic), snapshot, ranges, counted)
        loaded = int(properties["logferry.load"])
        result.sequence = max(result.sequence or 0, loaded)
    return result


def _watch_writes(fs: FileSystem, location: str) -> None:
    """The crash point ``during-write``: as soon as a data file appears in the table's
    ``data/`` folder that was not there before this write."""
    if not crash.armed("during-write"):
        return
    data = f"{location}/data"
    before = {f.uri for f in fs.list_files(data)} if fs.exists(data) else set()
    crash.watch_for("during-write", lambda: any(f.uri not in before for f in fs.list_files(data)))


def _drop_copies(marked: Any) -> tuple[Any, Tally, Any]:
    """The rows to append (copies left out), the tally of the mark, and the cached frame
    to unpersist once the commit is done."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cached = marked.persist(StorageLevel.MEMORY_AND_DISK)
    counted = tally(cached)
    return cached.where(~F.col(DUPLICATE_COLUMN)), counted, cached


def _record(
    stats: TopicStats, table: str, snapshot: SnapshotInfo, ranges: list[PartitionRange], counted: Tally
) -> None:
    """A topic's figures from its commit's snapshot summary (and the dedup's tally)."""
    summary = snapshot.summary
    stats.table = table
    stats.snapshot_id = snapshot.snapshot_id
    stats.rows = int(summary.get("added-records", "0"))
    stats.files = int(summary.get("added-data-files", "0"))
    stats.parquet_bytes = int(summary.get("added-files-size", "0"))
    stats.log_bytes = sum(r.end - r.start for r in ranges)
    stats.duplicates = sum(counted.duplicates.values())
    stats.ranges = [
        RangeEntry(r.topic, r.partition, r.start, r.end, 0, counted.duplicates.get((r.topic, r.partition), 0))
        for r in ranges
        if r.end > r.start
    ]


# -- maintenance --------------------------------------------------------------------------------


@dataclass
class TableUpkeep:
    """What ``--maintain`` did to one table."""

    table: str
    rewritten_files: int = 0
    added_files: int = 0
    expired_snapshots: int = 0
    orphans_removed: int = 0


@dataclass
class MaintenanceResult:
    """What ``--maintain`` did, per topic (topics without a table are left out)."""

    tables: dict[str, TableUpkeep] = field(default_factory=dict)
    seconds: float = 0.0


def maintain(config: LoaderConfig, session: LoadSession, now_ms: int | None = None) -> MaintenanceResult:
    """Compaction, snapshot expiry and orphan-file removal on every topic's table; the
    caller holds the output's lock (no load writes meanwhile)."""
    started = time.time()
    now_ms = int(started * 1000) if now_ms is None else now_ms
    spark = session.get()
    tables = IcebergTables(spark, config.output.uri, config.output.namespace)
    m = config.maintenance
    result = MaintenanceResult()
    for topic in config.source.topics:
        with spark_errors(f"maintaining {tables.name(topic)}"):
            if not tables.exists(topic):
                continue
            upkeep = TableUpkeep(tables.name(topic))
            catalog, ident = tables.name(topic).split(".", 1)
            rows = spark.sql(
                f"CALL {catalog}.system.rewrite_data_files(table => '{ident}', strategy => 'binpack', "
                f"options => map('min-input-files', '2', 'target-file-size-bytes', '{m.target_file_bytes}', "
                f"'max-file-group-size-bytes', '{max(m.target_file_bytes, 1 << 30) * 100}'))"
            ).collect()
            if rows:
                upkeep.rewritten_files = int(rows[0]["rewritten_data_files_count"])
                upkeep.added_files = int(rows[0]["added_data_files_count"])
            # never older than the newest landing snapshot: it holds the offsets
            cutoff = now_ms - m.expire_after_hours * 3600 * 1000
            if config.dedup.enabled:  # nor the landing snapshots whose identities dedup reads
                cutoff = min(cutoff, now_ms - config.dedup.keep_hours * 3600 * 1000)
            newest = tables.newest_landing(topic)
            if newest is not None:
                cutoff = min(cutoff, newest.timestamp_ms)
            rows = spark.sql(
                f"CALL {catalog}.system.expire_snapshots(table => '{ident}', "
                f"older_than => TIMESTAMP '{_utc(cutoff)}', retain_last => {m.keep_snapshots})"
            ).collect()
            if rows:
                upkeep.expired_snapshots = int(rows[0]["deleted_manifest_lists_count"])
            rows = spark.sql(
                f"CALL {catalog}.system.remove_orphan_files(table => '{ident}', "
                f"older_than => TIMESTAMP '{_utc(now_ms - m.orphan_after_hours * 3600 * 1000)}')"
            ).collect()
            upkeep.orphans_removed = len(rows)
            result.tables[topic] = upkeep
    result.seconds = time.time() - started
    return result


def _utc(ms: int) -> str:
    """A Spark timestamp literal for epoch milliseconds, in UTC whatever the session's zone."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

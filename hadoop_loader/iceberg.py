"""Apache Iceberg tables for ``output.format = "iceberg"``: one table per topic.

The catalog is Iceberg's Hadoop catalog (no metastore, no service): its warehouse is
``output.uri`` (``hdfs://`` or ``file://``) and topic ``app-log`` is the table
``<namespace>.`app-log``` in ``<uri>/<namespace>/app-log/`` (``metadata/``, ``data/``),
partitioned by ``hours(timestamp)``: the message's event hour, in UTC.

Exactly once: a run appends each topic's rows in ONE Iceberg commit whose snapshot
summary carries the consumed offsets (:data:`OFFSETS`: the next offset of every
partition ever landed, carried forward) and this run's ranges (:data:`RANGES`). The
commit is the atomic rename of the table's next metadata file, so the rows and the
offsets become visible together or not at all. The next run starts from the offsets of
the newest snapshot in the table's current history that carries them
(:func:`landed_state`; compactions commit snapshots without them, which it passes over).

With dedup on, the same commit carries the record identities the load landed
(:data:`IDENTITIES`, ranges as in :mod:`hadoop_loader.identity`) and how many copies it
dropped (:data:`DUPLICATES`): the dedup state moves with the rows and the offsets, in
one atomic step, as it does with a Parquet run's manifest. The next run reads the
ranges of the landing snapshots of the last ``dedup.keep_hours``
(:func:`identities_since`) and marks copies with the one dedup,
:func:`hadoop_loader.dedup.mark_duplicates`.

The Spark side uses Iceberg's own runtime (``iceberg-spark-runtime-4.1_2.13``, on
Spark's classpath through ``spark.jars``); the pure parts (summary properties, the walk
over snapshots) are unit tested without a JVM.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.common.lake import DUPLICATE_HOURS, DUPLICATES, LOAD, RUN_ID, STARTED_MS
from hadoop_loader.errors import Gap, LoaderError, StateError
from hadoop_loader.identity import IdentityRange, merge_ranges
from hadoop_loader.landed import NO_DICTIONARY

ICEBERG_VERSION = "1.12.0"
"""Apache Iceberg's Spark runtime the loader runs with; keep in step with
``iceberg.version`` in scripts/jars/apache-iceberg/pom.xml (tests/unit/test_iceberg.py)."""
SPARK_MINOR = "4.1"
"""The Spark minor that runtime is built for: the pinned pyspark's (pyproject.toml)."""
RUNTIME = f"org.apache.iceberg:iceberg-spark-runtime-{SPARK_MINOR}_2.13:{ICEBERG_VERSION}"
RUNTIME_JAR = f"iceberg-spark-runtime-{SPARK_MINOR}_2.13-{ICEBERG_VERSION}.jar"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
"""Spark SQL extensions for Iceberg's procedures (``CALL ... system.rewrite_data_files``)."""

_LOST_COMMIT = re.compile(r"Metadata file for version (\d+) is missing")
"""Iceberg's Hadoop catalog when its version hint names a metadata file that is gone."""

# Snapshot summary properties written by the loader (strings, as Iceberg stores them);
# those the lake's readers need too (LOAD, RUN_ID, STARTED_MS, DUPLICATES,
# DUPLICATE_HOURS) are named in broker.common.lake.
OFFSETS = "logferry.offsets"
"""JSON ``{"<partition>": next offset}``: every partition of the topic ever landed."""
RANGES = "logferry.ranges"
"""JSON ``[[partition, start, end], ...]``: what this load read (non-empty ranges)."""
GAPS = "logferry.gaps"
"""JSON list of retention gaps skipped (only when there were any)."""
SOURCE = "logferry.source"
"""The cluster read (ZooKeeper connect string or broker list)."""
IDENTITIES = "logferry.identities"
"""With dedup: JSON ``[[host, file_id, lo, hi], ...]``, the record identities this load
landed as ranges (one per partition and file generation; the topic is the table's)."""

RUNTIME_MISSING = (
    f"output.format = 'iceberg' needs Apache Iceberg's Spark runtime ({RUNTIME}) on Spark's classpath: "
    "`make iceberg-jars` (scripts/install-jars.sh apache-iceberg) resolves it into "
    f"benchmarks/.cache/apache-iceberg-{ICEBERG_VERSION}/; give that jar as [spark.conf] "
    f'"spark.jars" (or spark-submit --jars)'
)

COMPRESSION = {"snappy": "snappy", "zstd": "zstd", "gzip": "gzip", "lz4": "lz4", "none": "uncompressed"}
"""``output.compression`` -> Iceberg's ``write.parquet.compression-codec``."""


class IcebergRuntimeError(LoaderError):
    """Iceberg's Spark runtime is not on Spark's classpath (the message says what to do)."""

    exit_code = 2


@dataclass(frozen=True)
class LandedState:
    """Where a topic's table stands: what its newest landing snapshot says."""

    offsets: dict[int, int] = field(default_factory=dict)
    """partition -> next offset to read."""
    load: int = 0
    """The table's last load number (0: never loaded)."""
    snapshot_id: int | None = None
    """That load's snapshot (None: never loaded)."""


def catalog_name(warehouse: str) -> str:
    """The Spark catalog name of a warehouse: one per warehouse, since Spark keeps a
    catalog's first settings for the session's life."""
    return "logferry_" + hashlib.sha1(warehouse.encode()).hexdigest()[:12]


def catalog_conf(warehouse: str) -> dict[str, str]:
    """Spark settings of the Hadoop catalog over ``warehouse`` (set at runtime)."""
    prefix = f"spark.sql.catalog.{catalog_name(warehouse)}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": warehouse,
    }


def table_name(warehouse: str, namespace: str, topic: str) -> str:
    """The table's Spark name: ``<catalog>.`<namespace>`.`<topic>```."""
    return f"{catalog_name(warehouse)}.`{namespace}`.`{topic}`"


def table_location(warehouse: str, namespace: str, topic: str) -> str:
    """Where the Hadoop catalog keeps the table (``metadata/``, ``data/``)."""
    return f"{warehouse.rstrip('/')}/{namespace}/{topic}"


def summary_properties(
    load: int,
    run_id: str,
    offsets: Mapping[int, int],
    ranges: list[tuple[int, int, int]],
    gaps: list[Gap],
    source: str,
    identities: list[IdentityRange] | None = None,
    duplicates: int = 0,
    duplicate_hours: Mapping[int, int] | None = None,
    started_ms: int | None = None,
) -> dict[str, str]:
    """The snapshot summary properties of one load of a topic; ``identities`` (None:
    dedup off) are the load's landed record identities, ``duplicates`` the copies it
    dropped, ``duplicate_hours`` those copies per event hour (hours since the epoch),
    ``started_ms`` when the run started (for the console's landed tier)."""
    props = {
        LOAD: str(load),
        RUN_ID: run_id,
        **({STARTED_MS: str(started_ms)} if started_ms is not None else {}),
        OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":")),
        RANGES: json.dumps([list(r) for r in sorted(ranges)], separators=(",", ":")),
        SOURCE: source,
    }
    if gaps:
        props[GAPS] = json.dumps([g.to_json() for g in gaps], separators=(",", ":"))
    if identities is not None:
        ordered = sorted(identities, key=lambda r: (r.host or "", r.host is None, r.file_id, r.lo, r.hi))
        rows = [[r.host, r.file_id, r.lo, r.hi] for r in ordered]
        props[IDENTITIES] = json.dumps(rows, separators=(",", ":"))
        props[DUPLICATES] = str(duplicates)
        if duplicate_hours:
            hours = {str(h): n for h, n in sorted(duplicate_hours.items())}
            props[DUPLICATE_HOURS] = json.dumps(hours, separators=(",", ":"))
    return props


@dataclass(frozen=True)
class SnapshotInfo:
    """What the walk needs of one snapshot."""

    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str]
    timestamp_ms: int = 0


def landed_state(
    table: str, current: SnapshotInfo | None, snapshot: Callable[[int], SnapshotInfo | None]
) -> tuple[LandedState, SnapshotInfo | None]:
    """The newest snapshot in the current history that carries the loader's offsets.

    Walks from ``current`` through parents (``snapshot(id)``, None when expired). A
    table without snapshots was never loaded. A table with snapshots but none carrying
    offsets in its history cannot say where to start: starting over would land
    everything twice, so that is an error.
    """
    seen = current
    while seen is not None:
        if OFFSETS in seen.summary:
            return _state_of(table, seen), seen
        if seen.parent_id is None:
            break
        seen = snapshot(seen.parent_id)
    if current is None:
        return LandedState(), None
    raise StateError(
        f"table {table} has snapshots, but none in its current history carries logferry's offsets "
        f"({OFFSETS}): its landing snapshots were expired or rolled back by another tool, or another "
        "writer created it; nothing was landed (landing from the first offsets would land rows twice). "
        "Land into a new table, or roll the table back to a snapshot of `logferry load`"
    )


def identities_since(
    table: str,
    topic: str,
    current: SnapshotInfo | None,
    snapshot: Callable[[int], SnapshotInfo | None],
    since_ms: int,
) -> list[IdentityRange]:
    """The record identities landed by the loads committed at or after ``since_ms``
    (dedup's state), merged: walks from ``current`` through parents, newest first,
    passing snapshots without :data:`IDENTITIES` (compactions, loads with dedup off),
    and stops at the first older snapshot or where the history ends (expired)."""
    found: list[IdentityRange] = []
    seen = current
    while seen is not None and seen.timestamp_ms >= since_ms:
        text = seen.summary.get(IDENTITIES)
        if text is not None:
            try:
                found.extend(IdentityRange(topic, h, int(f), int(lo), int(hi)) for h, f, lo, hi in json.loads(text))
            except (ValueError, TypeError) as exc:
                raise StateError(
                    f"table {table}: snapshot {seen.snapshot_id} has an unreadable {IDENTITIES}: {exc}"
                ) from None
        seen = snapshot(seen.parent_id) if seen.parent_id is not None else None
    return merge_ranges(found)


def _state_of(table: str, info: SnapshotInfo) -> LandedState:
    try:
        offsets = {int(p): int(o) for p, o in json.loads(info.summary[OFFSETS]).items()}
        load = int(info.summary.get(LOAD, "0"))
    except (ValueError, TypeError, AttributeError) as exc:
        raise StateError(f"table {table}: snapshot {info.snapshot_id} has an unreadable {OFFSETS}: {exc}") from None
    return LandedState(offsets, load, info.snapshot_id)


# -- the Spark side -----------------------------------------------------------------------------


class IcebergTables:
    """The topic tables of one warehouse, through a SparkSession with Iceberg's runtime."""

    def __init__(self, spark: Any, warehouse: str, namespace: str):
        self.spark = spark
        self.warehouse = warehouse
        self.namespace = namespace
        check_runtime(spark)
        for key, value in catalog_conf(warehouse).items():
            spark.conf.set(key, value)

    def name(self, topic: str) -> str:
        return table_name(self.warehouse, self.namespace, topic)

    def location(self, topic: str) -> str:
        return table_location(self.warehouse, self.namespace, topic)

    def _java_table(self, topic: str) -> Any:
        """Iceberg's ``Table`` (Java), refreshed; None when the table does not exist.

        The session's catalog caches tables at the version it last saw. When that
        version's metadata file is gone (a lost commit, or the operator's repair of one
        that moved the version hint back), the table is asked of the catalog again; still
        missing is a :class:`StateError` saying how to repair it."""
        for attempt in (1, 2):
            table = self._load(topic)
            if table is None:
                return None
            try:
                table.refresh()
                return table
            except Exception as exc:
                lost = _LOST_COMMIT.search(str(exc))
                if lost is None:
                    raise
                if attempt == 1:
                    self.spark.sql(f"REFRESH TABLE {self.name(topic)}")  # drops the cached table
                    continue
                metadata = f"{self.location(topic)}/metadata"
                raise StateError(
                    f"table {self.name(topic)}: its catalog names metadata version {lost.group(1)}, but "
                    f"{metadata}/v{lost.group(1)}.metadata.json is missing (a lost commit); to load on from "
                    f"the newest commit present, write that version's number into {metadata}/version-hint.text"
                ) from exc
        raise AssertionError("unreachable")

    def _load(self, topic: str) -> Any:
        """The table as the session's catalog has it (None when it does not exist)."""
        try:
            return self.spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.spark._jsparkSession, self.name(topic)
            )
        except Exception as exc:
            if any(s in str(exc) for s in ("TABLE_OR_VIEW_NOT_FOUND", "NoSuchTableException")):
                return None
            raise

    def exists(self, topic: str) -> bool:
        return self._java_table(topic) is not None

    def landed(self, topic: str) -> LandedState:
        """The offsets, load number and snapshot of the topic's last load."""
        table = self._java_table(topic)
        if table is None:
            return LandedState()
        state, _ = landed_state(self.name(topic), _info(table.currentSnapshot()), lambda i: _info(table.snapshot(i)))
        return state

    def identities(self, topic: str, since_ms: int) -> list[IdentityRange]:
        """The identities the table's loads since ``since_ms`` landed (:func:`identities_since`)."""
        table = self._java_table(topic)
        if table is None:
            return []
        return identities_since(
            self.name(topic), topic, _info(table.currentSnapshot()), lambda i: _info(table.snapshot(i)), since_ms
        )

    def create(self, topic: str, schema: Any, compression: str) -> None:
        """Create the topic's table (if missing) with ``schema``'s columns, by event hour."""
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
        properties = {
            "format-version": "2",
            "write.parquet.compression-codec": COMPRESSION[compression],
            # rows of one hour from every task meet in one writer (one file per hour and run)
            "write.distribution-mode": "hash",
            # a table loaded every few minutes would keep every metadata file otherwise
            "write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": "100",
            "logferry.topic": topic,
            "logferry.identity": "partition,offset,index",
        }
        for column in NO_DICTIONARY:  # as the Parquet files are written (hadoop_loader.writing)
            if column in schema.fieldNames():
                properties[f"write.parquet.dict-encoding-enabled.column.{column}"] = "false"
        props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name(topic)} ({columns}) USING iceberg "
            f"PARTITIONED BY (hours(`timestamp`)) TBLPROPERTIES ({props})"
        )

    def append(self, topic: str, df: Any, properties: Mapping[str, str], shuffle: bool = True) -> SnapshotInfo:
        """Append ``df`` in one commit whose snapshot summary has ``properties``; returns
        that snapshot (its summary has ``added-records``, ``added-data-files``, ...).

        ``shuffle`` False writes without the table's hash distribution: each task writes
        the hours it reads through fanout writers (one open file per hour), as a Parquet
        run with ``files_per_hour = 0`` does; more files, fewer copies of each row."""
        writer = df.writeTo(self.name(topic))
        if not shuffle:
            writer = writer.option("distribution-mode", "none").option("fanout-enabled", "true")
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.append()
        table = self._java_table(topic)
        snap = table.currentSnapshot() if table is not None else None
        while snap is not None and snap.summary().get(RUN_ID) != properties[RUN_ID]:
            parent = snap.parentId()
            snap = table.snapshot(parent) if parent is not None else None
        info = _info(snap)
        if info is None:
            raise StateError(f"table {self.name(topic)}: the load's commit is not in the table's history")
        return info

    def snapshots(self, topic: str) -> list[SnapshotInfo]:
        """Every snapshot of the table, oldest first."""
        table = self._java_table(topic)
        if table is None:
            return []
        out = []
        iterator = table.snapshots().iterator()
        while iterator.hasNext():
            info = _info(iterator.next())
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda s: (s.timestamp_ms, s.snapshot_id))

    def hour_counts(self, topic: str, since_hour: int) -> dict[int, int]:
        """Rows of the table's current snapshot per event hour from ``since_hour`` on
        (hours since the epoch, UTC: its ``hours(timestamp)`` partitions), added up from
        the record counts its manifests keep per data file (the ``files`` metadata table:
        no data file is read). Rows without a timestamp (another writer's) are left out."""
        rows = self.spark.sql(
            f"SELECT partition.timestamp_hour AS hour, sum(record_count) AS n FROM {self.name(topic)}.files "
            f"WHERE content = 0 AND partition.timestamp_hour >= {int(since_hour)} GROUP BY 1"
        ).collect()
        return {int(r["hour"]): int(r["n"]) for r in rows if r["hour"] is not None}

    def history(self, topic: str, since_ms: int) -> list[SnapshotInfo]:
        """The snapshots of the table's current history committed at or after
        ``since_ms``, newest first (walking parents, as :func:`identities_since` does)."""
        table = self._java_table(topic)
        if table is None:
            return []
        out = []
        seen = _info(table.currentSnapshot())
        while seen is not None and seen.timestamp_ms >= since_ms:
            out.append(seen)
            seen = _info(table.snapshot(seen.parent_id)) if seen.parent_id is not None else None
        return out

    def newest_landing(self, topic: str) -> SnapshotInfo | None:
        """The snapshot :meth:`landed` reads (None: never loaded)."""
        table = self._java_table(topic)
        if table is None:
            return None
        _, info = landed_state(self.name(topic), _info(table.currentSnapshot()), lambda i: _info(table.snapshot(i)))
        return info


def _info(snapshot: Any) -> SnapshotInfo | None:
    """A Java ``Snapshot`` as a :class:`SnapshotInfo` (None stays None)."""
    if snapshot is None:
        return None
    parent = snapshot.parentId()
    return SnapshotInfo(
        int(snapshot.snapshotId()),
        None if parent is None else int(parent),
        {str(k): str(v) for k, v in dict(snapshot.summary()).items()},
        int(snapshot.timestampMillis()),
    )


def check_runtime(spark: Any) -> None:
    """Raise :class:`IcebergRuntimeError` unless Iceberg's Spark catalog class loads."""
    found = spark._jvm.org.apache.iceberg.spark.SparkCatalog  # py4j: a JavaClass, or a JavaPackage if absent
    if type(found).__name__ != "JavaClass":
        raise IcebergRuntimeError(RUNTIME_MISSING)


def session_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """Settings a session needs before it starts: Iceberg's SQL extensions (for the
    maintenance procedures), added to any the config gives."""
    extensions = [e.strip() for e in conf.get("spark.sql.extensions", "").split(",") if e.strip()]
    if EXTENSIONS not in extensions:
        extensions.append(EXTENSIONS)
    return {"spark.sql.extensions": ",".join(extensions)}

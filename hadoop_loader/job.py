"""The landing job: topics -> Parquet under ``topic=/dt=/hr=``, exactly once.

One run, under the output's lock:

1. recover: finish publishing committed runs, discard uncommitted staging
   (:meth:`LandingStore.recover`); verify the files earlier runs landed
   (:mod:`hadoop_loader.verify`) and, with ``repair``, land damaged ones again
   (:mod:`hadoop_loader.repair`);
2. plan: per topic-partition from the last committed offsets (``first_run`` for new
   ones) to the visible end read now, capped at ``max_bytes_per_partition``, cut into
   chunks at batch boundaries;
3. write: one Spark job reads the chunks through the ``logferry`` data source and writes
   Parquet (columns: :mod:`hadoop_loader.landed`) partitioned by topic and event hour
   into the run's staging directory; with dedup, copies of landed records are marked
   and written apart (``duplicate=true``, never published; :mod:`hadoop_loader.dedup`);
4. count: the staged files are listed and read back (row counts per file, partition and
   hour) and checked against the plan; the manifest is built;
5. commit the manifest (offsets advance here, and only here), publish, clean up;
6. audit (when enabled) and a summary.

Crash points of :mod:`hadoop_loader.crash` sit between the steps.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from broker.common.lake import STATE_DIR
from hadoop_loader import crash
from hadoop_loader.config import LoaderConfig, config_error
from hadoop_loader.dedup import DUPLICATE_COLUMN, identity_ranges
from hadoop_loader.errors import LoaderError, OutputUnavailableError, StateError, spark_errors
from hadoop_loader.fs import FileSystem, filesystem_for, join, relative
from hadoop_loader.identity import IdentityRange, ranges_to_keep
from hadoop_loader.lake_cache import LakeCache
from hadoop_loader.manifest import FileEntry, Manifest, RangeEntry, next_offsets
from hadoop_loader.offsets import PartitionRange, offset_mover
from hadoop_loader.options import Endpoint
from hadoop_loader.plan_driver import RangePlan, first_run_position, plan_load
from hadoop_loader.repair import repair_lake
from hadoop_loader.results import Clock, LoadResult, LoadSession, TopicStats
from hadoop_loader.store import LandingStore, PublishHooks, seq_name
from hadoop_loader.verify import verify_store
from hadoop_loader.writing import landed_rows, write_parquet

log = logging.getLogger("logferry.loader")

StagedCounts = dict[tuple[str, str, int, str, str], tuple[int, int, int, int]]
"""A run's staged rows: (file, topic, partition, dt, hr) -> (rows, min offset, max
offset, undecodable rows)."""


def run_load(
    config: LoaderConfig,
    spark: Any = None,
    master: str | None = None,
    repair: bool = False,
    session: LoadSession | None = None,
    cache: LakeCache | None = None,
) -> LoadResult:
    """Run one landing job; reuses ``spark`` when given (tests), else builds a session.

    ``repair``: first land again the files the verification found missing or damaged
    (:mod:`hadoop_loader.repair`), then land what is new. ``session``: a session shared
    by several runs (``--every``: one JVM, started by the first run that needs it).
    ``cache``: the manifests and footers earlier runs of this process read (``--every``),
    so the verification reads only those of files new or changed since; None reads all.
    """
    started = time.time()
    iceberg = config.output.format == "iceberg"
    if iceberg and repair:
        raise config_error("output.format", "--repair is for Parquet output (Iceberg checks its own commits)")
    session = session or LoadSession(config, spark, master)
    fs, store = _output(config, session)

    def land() -> LoadResult:
        if iceberg:
            from hadoop_loader.iceberg_job import land_into_iceberg

            return land_into_iceberg(config, session, fs, started)
        return _run_locked(config, session, fs, store, started, repair, cache)

    result = _locked(store, land)
    if config.audit.enabled:
        from hadoop_loader.audit import audit_after_load

        try:
            spark = session.get() if iceberg else None  # the tables' counts: the run's session
            result.audit = audit_after_load(config, store, started, _landed_now(result), spark)
        except LoaderError as exc:  # the landing stands; report the audit's failure
            result.audit_error = exc
        else:
            _keep_audit(fs, store, result.audit, started)
    result.seconds = time.time() - started
    return result


def run_maintenance(config: LoaderConfig, spark: Any = None, master: str | None = None) -> Any:
    """``logferry load --maintain``: compaction, snapshot expiry and orphan-file removal
    on the topics' Iceberg tables (:func:`hadoop_loader.iceberg_job.maintain`), under
    the output's lock so no load writes meanwhile."""
    if config.output.format != "iceberg":
        raise config_error("output.format", "--maintain is for Iceberg tables (output.format = 'iceberg')", config.path)
    from hadoop_loader.iceberg_job import maintain

    session = LoadSession(config, spark, master)
    _, store = _output(config, session)
    return _locked(store, lambda: maintain(config, session))


def _output(config: LoaderConfig, session: LoadSession) -> tuple[FileSystem, LandingStore]:
    """The output's file system and store, its state folder created."""
    if config.output.filesystem == "hadoop" or (
        config.output.filesystem == "auto" and not config.output.uri.startswith("file:")
    ):
        fs = filesystem_for(config.output.uri, config.output.filesystem, session.get())
    else:
        fs = filesystem_for(config.output.uri, config.output.filesystem)
    store = LandingStore(fs, config.output.uri)
    prepare_output(fs, store)
    return fs, store


T = TypeVar("T")


def _locked(store: LandingStore, work: Callable[[], T]) -> T:
    """``work()`` under the output's lock."""
    store.acquire_lock()
    try:
        result = work()
    except BaseException:
        # The run's own error is the one to report. Releasing may fail for the same
        # reason (a NameNode restarting): the lock then stays, and the next run, in a
        # process of its own, takes over a lock whose process is gone.
        with contextlib.suppress(LoaderError):
            store.release_lock()
        raise
    store.release_lock()
    return result


def prepare_output(fs: FileSystem, store: LandingStore) -> None:
    """Create the output's state folder, or say in one line that the output cannot be
    written (a path below a file, a read-only mount; HDFS's refusals come as
    :class:`OutputUnavailableError` from :mod:`hadoop_loader.fs` already)."""
    try:
        fs.mkdirs(store.state)
    except OSError as exc:
        raise OutputUnavailableError(
            f"output.uri: cannot write below {store.root}: {exc.strerror or exc} ({store.state}); nothing was written"
        ) from None


_PUBLISH_HOOKS: PublishHooks = {
    "on_moved": lambda n: crash.crash_point("during-publish"),
    "before_cleanup": lambda: crash.crash_point("after-publish"),
}
"""Crash points inside publishing, for a run's own publish and for recovery's."""


def _landed_now(result: LoadResult) -> dict[tuple[str, str], int] | None:
    """Rows really in the lake per (topic, hour) after the run: the verified files of
    earlier runs, the files repaired and this run's (counted from its staged files)."""
    if result.lake is None:
        return None
    landed = dict(result.lake.landed)
    if result.repair is not None:
        for key, rows in result.repair.landed_delta().items():
            landed[key] = landed.get(key, 0) + rows
    for topic, stats in result.topics.items():
        for hour, rows in stats.hours.items():
            landed[(topic, hour)] = landed.get((topic, hour), 0) + rows
    return landed


def _keep_audit(fs: FileSystem, store: LandingStore, report: Any, started: float) -> None:
    """The audit report as JSON under ``_logferry/audit/`` (one file per run)."""
    uri = join(store.state, "audit", f"{int(started * 1000):020d}.json")
    try:
        fs.create_new(uri, report.to_json())
    except (OSError, FileExistsError) as exc:
        log.warning("could not keep the audit report at %s: %s", uri, exc)


def _run_locked(
    config: LoaderConfig,
    session: LoadSession,
    fs: FileSystem,
    store: LandingStore,
    started: float,
    repair: bool = False,
    cache: LakeCache | None = None,
) -> LoadResult:
    clock = Clock()
    recovery = store.recover(**_PUBLISH_HOOKS)
    clock.lap("recover")
    if recovery.rolled_forward or recovery.discarded:
        log.info("recovery: %s", recovery.describe())
    manifests, lake = verify_store(store, cache)
    clock.lap("verify")
    for damage in lake.damaged:
        log.error("landed file damaged: %s", damage.describe())
    repaired = None
    if repair and lake.damaged:
        repaired = repair_lake(config, session, fs, store, manifests, lake.damaged, _PUBLISH_HOOKS)
        clock.lap("repair")
    previous = store.latest()
    sequence = (previous.sequence if previous else 0) + 1
    landed = previous.offsets if previous else {}
    source = config.source
    first = first_run_position(config)
    plan, executors = plan_load(config, landed)
    clock.lap("plan")
    result = LoadResult(
        None,
        recovery,
        {t: TopicStats() for t in source.topics},
        plan.gaps,
        0.0,
        plan.walked_bytes,
        phases=clock.phases,
        lake=lake,
        dedup=config.dedup.enabled,
        repair=repaired,
    )
    earlier: list[IdentityRange] = []
    if config.dedup.enabled:
        keep_since = int(started * 1000) - config.dedup.keep_hours * 3600 * 1000
        earlier = ranges_to_keep(store.newest_first(), keep_since)
    for gap in plan.gaps:
        log.warning("skipped a retention gap: %s", gap.describe())
    moves = offset_mover(landed, first)
    if not plan.chunks and not any(moves(r) for r in plan.ranges):
        log.info("nothing new to land")
        return result

    data_uri = store.begin(sequence)
    files: list[tuple[str, int]] = []
    counts: StagedCounts = {}
    if plan.chunks:
        spark = session.get()
        clock.lap("spark")
        with spark_errors(f"the Spark job writing run {sequence}"):
            _write(config, spark, fs, store, sequence, plan, executors, data_uri, earlier)
        clock.lap("write")
        with spark_errors(f"the Spark job counting run {sequence}"):
            files, counts, identities = _count(spark, fs, data_uri, config.dedup.enabled)
        clock.lap("count")
    else:
        identities = []
    manifest = _manifest(config, sequence, started, previous, plan, files, counts, moves)
    manifest.identities = identities
    crash.crash_point("after-write")
    store.commit(manifest)
    clock.lap("commit")
    crash.crash_point("after-commit")
    store.publish(manifest, _PUBLISH_HOOKS["on_moved"])
    _PUBLISH_HOOKS["before_cleanup"]()
    store.cleanup(sequence)
    clock.lap("publish")

    result.sequence = sequence
    result.undecodable = manifest.undecodable
    for f in manifest.files:
        stats = result.topics[_topic_of(f.path)]
        stats.files += 1
        stats.parquet_bytes += f.size
    for r in manifest.ranges:
        stats = result.topics[r.topic]
        stats.rows += r.rows
        stats.duplicates += r.duplicates
        stats.log_bytes += r.end - r.start
        stats.ranges.append(r)
    for topic, hours in manifest.hours.items():
        result.topics[topic].hours = hours
    return result


def _write(
    config: LoaderConfig,
    spark: Any,
    fs: FileSystem,
    store: LandingStore,
    sequence: int,
    plan: RangePlan,
    executors: Endpoint,
    data_uri: str,
    earlier: list[IdentityRange],
) -> None:
    """One Spark job: read the chunks, write Parquet by topic and hour into staging."""
    df = landed_rows(config, spark, plan.chunks, executors, earlier if config.dedup.enabled else None)
    crash.watch_for(
        "during-write", lambda: any(f.uri.endswith(".parquet") for f in fs.list_files(store.staging_dir(sequence)))
    )
    write_parquet(config, spark, df, data_uri)


def _count(
    spark: Any, fs: FileSystem, data_uri: str, dedup: bool = False
) -> tuple[list[tuple[str, int]], StagedCounts, list[IdentityRange]]:
    """List the staged Parquet files and count their rows per file, partition and hour.

    Returns ``(files, counts, identities)``: files as (path relative to ``data_uri``,
    size); counts keyed by (file, topic, partition, dt, hr) -> (rows, min offset, max
    offset, undecodable); with ``dedup`` the identity ranges of the landed rows.
    """
    from pyspark.sql import functions as F

    files = [
        (relative(data_uri, f.uri), f.size)
        for f in fs.list_files(data_uri)
        if f.uri.endswith(".parquet")
        and "/_" not in relative(data_uri, f.uri)
        and not relative(data_uri, f.uri).startswith("_")
    ]
    if not files:
        return [], {}, []
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    old = spark.conf.get(key)
    spark.conf.set(key, "false")  # topic "007" stays a string, hr "03" stays "03"
    try:
        staged = spark.read.option("basePath", data_uri).parquet(data_uri)
        has_decoded = "decoded" in staged.columns
        bad = F.sum(F.when(F.col("decoded") == F.lit(False), 1).otherwise(0)) if has_decoded else F.lit(0)
        rows = (
            staged.groupBy(F.input_file_name().alias("file"), "topic", "partition", "dt", "hr")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min("offset").alias("lo"),
                F.max("offset").alias("hi"),
                bad.alias("bad"),
            )
            .collect()
        )
        identities = identity_ranges(staged) if dedup and "file_id" in staged.columns else []
    finally:
        spark.conf.set(key, old)
    base = _path_of(data_uri) + "/"
    counts: StagedCounts = {}
    for r in rows:
        path = _path_of(r["file"])
        if not path.startswith(base):
            raise StateError(f"Spark read {r['file']}, which is not below {data_uri}")
        rel = path[len(base) :]
        counts[(rel, r["topic"], int(r["partition"]), r["dt"], r["hr"])] = (
            int(r["rows"]),
            int(r["lo"]),
            int(r["hi"]),
            int(r["bad"]),
        )
    return files, counts, identities


def _manifest(
    config: LoaderConfig,
    sequence: int,
    started: float,
    previous: Manifest | None,
    plan: RangePlan,
    files: list[tuple[str, int]],
    counts: StagedCounts,
    moves: Callable[[PartitionRange], bool],
) -> Manifest:
    """Build the run's manifest from the plan and the staged counts, checking them."""
    per_file: dict[str, int] = {}
    per_partition: dict[tuple[str, int], list[int]] = {}
    hours: dict[str, dict[str, int]] = {}
    dup_hours: dict[str, dict[str, int]] = {}
    dup_partition: dict[tuple[str, int], int] = {}
    undecodable = 0
    for (rel, topic, partition, dt, hr), (rows, lo, hi, bad) in counts.items():
        per_file[rel] = per_file.get(rel, 0) + rows
        acc = per_partition.setdefault((topic, partition), [0, lo, hi])
        acc[0] += rows
        acc[1], acc[2] = min(acc[1], lo), max(acc[2], hi)
        hour = f"{dt}T{hr}"
        if _is_duplicates(rel):
            dup_hours.setdefault(topic, {})[hour] = dup_hours.get(topic, {}).get(hour, 0) + rows
            dup_partition[(topic, partition)] = dup_partition.get((topic, partition), 0) + rows
            continue
        hours.setdefault(topic, {})[hour] = hours.get(topic, {}).get(hour, 0) + rows
        undecodable += bad
    planned = {(r.topic, r.partition): r for r in plan.ranges}
    ranges = []
    for key, r in sorted(planned.items()):
        rows, lo, hi = per_partition.pop(key, [0, r.start, r.start])
        if r.end > r.start and (rows == 0 or lo < r.start or hi >= r.end):
            raise StateError(
                f"run {sequence}: staged data of {r.topic}/{r.partition} does not "
                f"match the planned range [{r.start}, {r.end}) ({rows} rows, "
                f"offsets {lo}..{hi}); nothing was committed"
            )
        dups = dup_partition.get(key, 0)
        ranges.append(RangeEntry(r.topic, r.partition, r.start, r.end, rows - dups, dups))
    if per_partition:
        stray = sorted(per_partition)[0]
        raise StateError(
            f"run {sequence}: staged data holds {stray[0]}/{stray[1]}, which was not planned; nothing was committed"
        )
    entries = []
    for rel, size in sorted(files):
        if rel not in per_file:
            raise StateError(f"run {sequence}: staged file {rel} was not counted; nothing was committed")
        if _is_duplicates(rel):
            continue  # counted, never published
        entries.append(FileEntry(final_path(rel, sequence), rel, size, per_file[rel]))
    if sum(e.rows for e in entries) != sum(r.rows for r in ranges):
        raise StateError(f"run {sequence}: file and range row counts differ")
    return Manifest(
        sequence=sequence,
        run_id=uuid.uuid4().hex,
        started_ms=int(started * 1000),
        committed_ms=int(time.time() * 1000),
        source=config.source.zk or ",".join(config.source.brokers or ()),
        ranges=[r for r in ranges if moves(PartitionRange(r.topic, r.partition, r.start, r.end))],
        files=entries,
        hours=hours,
        offsets=next_offsets(
            previous.offsets if previous else {},
            [r for r in ranges if moves(PartitionRange(r.topic, r.partition, r.start, r.end))],
        ),
        gaps=plan.gaps,
        undecodable=undecodable,
        duplicates=dup_hours,
    )


def _is_duplicates(rel: str) -> bool:
    return f"/{DUPLICATE_COLUMN}=true/" in rel


def final_path(rel: str, sequence: int, prefix: str = "") -> str:
    """Where a staged file is published: its ``topic=/dt=/hr=`` directory (without the
    staging-only ``duplicate=`` one), named after the run: ``r<run>-<Spark's name>``."""
    directory, _, name = rel.rpartition("/")
    parts = [p for p in directory.split("/") if p and not p.startswith(f"{DUPLICATE_COLUMN}=")]
    return "/".join(parts) + f"/r{seq_name(sequence)[-8:]}-{prefix}{name}"


def _path_of(uri: str) -> str:
    """The unquoted path of a URI (``file:/x``, ``file:///x`` and ``/x`` give ``/x``)."""
    return unquote(urlparse(uri).path).rstrip("/")


def _topic_of(path: str) -> str:
    first = path.split("/", 1)[0]
    return unquote(first.partition("=")[2])


def landed_files(fs: FileSystem, root: str) -> list[str]:
    """Published Parquet files under ``root`` (outside ``_logferry``), relative paths."""
    return sorted(
        relative(root, f.uri)
        for f in fs.list_files(root)
        if f.uri.endswith(".parquet") and f"/{STATE_DIR}/" not in f.uri
    )

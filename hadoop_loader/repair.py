"""``logferry load --repair``: land missing or damaged files again from the cluster.

A landed file holds rows of one run, one topic and one event hour (its ``topic=/dt=/hr=``
directory), and which rows of them went into which file of that hour is Spark's choice.
So the unit of repair is the *group*: every file of run N in one directory. Run N's
manifest names the offset ranges it read per partition; reading those ranges of the
topic again, shaping them exactly as the landing job does (dedup included, with the
identities landed before run N), and keeping the rows of the group's hour gives the
group's rows again. They are written into a repair run's staging, counted from their
footers and must number exactly the rows run N's manifest gives for the group
(otherwise nothing of that group changes: the config's columns or time zone changed
since, say). The repair run commits a manifest of its own (same offsets as the one
before it, the new files, and which files they replace); publishing moves the new
files in and deletes the replaced ones, idempotently, so a crash is finished by the
next run's recovery like any run.

A group whose ranges are no longer all retained by the cluster cannot be repaired:
it is reported with the partition and the offsets retention deleted.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hadoop_loader.config import LoaderConfig
from hadoop_loader.dedup import DUPLICATE_COLUMN
from hadoop_loader.errors import LoaderError, spark_errors
from hadoop_loader.fs import FileSystem, join, relative
from hadoop_loader.identity import ranges_to_keep
from hadoop_loader.manifest import FileEntry, Manifest, Repair
from hadoop_loader.offsets import PartitionRange
from hadoop_loader.options import Endpoint
from hadoop_loader.plan_driver import DriverPlanner
from hadoop_loader.planning import Chunk, plan
from hadoop_loader.store import LandingStore, PublishHooks
from hadoop_loader.verify import Damage, expected_files, footer_rows, topic_hour
from hadoop_loader.writing import landed_rows, write_parquet

log = logging.getLogger("logferry.loader")

HOUR_MS = 3600 * 1000


@dataclass(frozen=True)
class Group:
    """Run ``origin``'s files in one ``topic=/dt=/hr=`` directory."""

    origin: int
    directory: str

    def describe(self) -> str:
        return f"{self.directory} of run {self.origin}"


@dataclass
class RepairResult:
    """What a repair did: groups landed again, groups it could not repair and why."""

    sequence: int | None = None
    """The repair run's committed sequence (None: nothing was repaired)."""
    repaired: dict[Group, int] = field(default_factory=dict)
    """Group -> rows landed again."""
    failed: dict[Group, str] = field(default_factory=dict)
    """Group -> why it could not be repaired."""
    counted_before: dict[Group, int] = field(default_factory=dict)
    """Rows the verification counted in the group's files before the repair."""

    def landed_delta(self) -> dict[tuple[str, str], int]:
        """How the rows really in the lake per (topic, hour) changed."""
        out: dict[tuple[str, str], int] = {}
        for group, rows in self.repaired.items():
            key = topic_hour(group.directory + "/x")
            out[key] = out.get(key, 0) + rows - self.counted_before.get(group, 0)
        return out


def groups_of(damaged: list[Damage]) -> list[Group]:
    """The groups holding damaged files, sorted (sans-IO)."""
    return sorted({Group(d.origin, d.directory) for d in damaged}, key=lambda g: (g.origin, g.directory))


def repair_lake(
    config: LoaderConfig,
    session: Any,
    fs: FileSystem,
    store: LandingStore,
    manifests: list[Manifest],
    damaged: list[Damage],
    hooks: PublishHooks,
) -> RepairResult:
    """Land the groups of ``damaged`` again and commit them as one repair run."""
    result = RepairResult()
    by_seq = {m.sequence: m for m in manifests}
    current = expected_files(manifests)
    found = {d.path: d for d in damaged}
    groups = groups_of(damaged)
    members = {
        g: [e for e in current if e.origin == g.origin and e.entry.path.rpartition("/")[0] == g.directory]
        for g in groups
    }
    for g, files in members.items():
        result.counted_before[g] = sum(
            (found[e.entry.path].found_rows or 0) if e.entry.path in found else e.entry.rows for e in files
        )
    previous = store.latest()
    assert previous is not None  # damaged files come from committed manifests
    sequence = previous.sequence + 1
    source = config.source
    endpoint = Endpoint(source.zk, source.brokers, config.tls, config.sasl, source.listener)
    wanted: dict[tuple[int, str], list[Group]] = {}
    with DriverPlanner(endpoint) as planner:
        for g in groups:
            topic = topic_hour(g.directory + "/x")[0]
            why = _unrepairable(planner, config, by_seq.get(g.origin), topic)
            if why:
                result.failed[g] = why
            else:
                wanted.setdefault((g.origin, topic), []).append(g)
        if not wanted:
            return result
        executors = planner.executor_endpoint()
        chunks = {key: plan(_ranges(by_seq[key[0]], key[1]), config.load.chunk_bytes, planner.finder) for key in wanted}
    data_uri = store.begin(sequence)
    spark = session.get()
    entries: list[FileEntry] = []
    repairs: list[Repair] = []
    for (origin, topic), gs in sorted(wanted.items()):
        sub = join(data_uri, f"origin={origin}")
        with spark_errors(f"the Spark job repairing run {origin}'s {topic}"):
            _land_again(config, spark, manifests, by_seq[origin], topic, gs, chunks[(origin, topic)], executors, sub)
        staged = _staged_rows(fs, data_uri, sub)
        for g in gs:
            mine = [
                (rel, size, rows)
                for rel, size, rows in staged
                if rel.rpartition("/")[0] == f"origin={origin}/{g.directory}"
            ]
            rows = sum(r for _, _, r in mine)
            expected = sum(e.entry.rows for e in members[g])
            if rows != expected:
                result.failed[g] = (
                    f"reading run {origin}'s ranges again gave {rows:,} rows for "
                    f"this hour, its manifest says {expected:,} (was the config "
                    "changed since? columns, time zone, dedup); left as it is"
                )
                for rel, _, _ in mine:
                    fs.delete(join(data_uri, rel))
                continue
            for rel, size, n in mine:
                name = rel.rpartition("/")[2]
                entries.append(FileEntry(f"{g.directory}/r{sequence:08d}-o{origin}-{name}", rel, size, n, origin))
            repairs.append(Repair(origin, g.directory, tuple(e.entry.path for e in members[g]), rows))
            result.repaired[g] = rows
    if not repairs:
        store.cleanup(sequence)
        return result
    manifest = Manifest(
        sequence=sequence,
        run_id=uuid.uuid4().hex,
        started_ms=int(time.time() * 1000),
        committed_ms=int(time.time() * 1000),
        source=previous.source,
        offsets=previous.offsets,
        files=entries,
        repairs=repairs,
    )
    store.commit(manifest)
    store.publish(manifest, hooks["on_moved"])
    hooks["before_cleanup"]()
    store.cleanup(sequence)
    result.sequence = sequence
    for g, rows in result.repaired.items():
        log.info("repaired %s: %d rows landed again", g.describe(), rows)
    return result


def _ranges(origin: Manifest, topic: str) -> list[PartitionRange]:
    return [
        PartitionRange(r.topic, r.partition, r.start, r.end)
        for r in origin.ranges
        if r.topic == topic and r.end > r.start
    ]


def _unrepairable(planner: DriverPlanner, config: LoaderConfig, origin: Manifest | None, topic: str) -> str | None:
    """Why a group of ``topic`` from run ``origin`` cannot be landed again, or None."""
    if origin is None:
        return "its run's manifest is gone"
    if topic not in config.source.topics:
        return f"topic {topic!r} is no longer in source.topics"
    ranges = _ranges(origin, topic)
    if not ranges:
        return f"run {origin.sequence}'s manifest names no offsets of {topic!r}"
    for r in ranges:
        try:
            start, end = planner.log_range(r.topic, r.partition)
        except LoaderError as exc:
            return f"the cluster cannot say what it holds of {r.topic}/{r.partition}: {exc}"
        if r.start < start:
            return (
                f"retention removed the data: {r.topic}/{r.partition} offsets "
                f"[{r.start}, {min(r.end, start)}) are deleted (the first retained offset "
                f"is {start}); these rows cannot be landed again"
            )
        if r.end > end:
            return (
                f"{r.topic}/{r.partition} ends at {end} in the cluster, before the "
                f"landed offset {r.end} (another cluster, or its log was truncated)"
            )
    return None


def _land_again(
    config: LoaderConfig,
    spark: Any,
    manifests: list[Manifest],
    origin: Manifest,
    topic: str,
    groups: list[Group],
    chunks: list[Chunk],
    executors: Endpoint,
    data_uri: str,
) -> None:
    """Read run ``origin``'s ranges of ``topic`` again and write the groups' hours."""
    from pyspark.sql import functions as F

    earlier = None
    if config.dedup.enabled:
        before = [m for m in sorted(manifests, key=lambda m: -m.sequence) if m.sequence < origin.sequence]
        earlier = ranges_to_keep(before, origin.started_ms - config.dedup.keep_hours * HOUR_MS)
    df = landed_rows(config, spark, chunks, executors, earlier)
    hours = [topic_hour(g.directory + "/x")[1] for g in groups]
    keep = F.lit(False)
    for hour in hours:
        day, _, hr = hour.partition("T")
        keep = keep | ((F.col("dt") == day) & (F.col("hr") == hr))
    df = df.where((F.col("topic") == topic) & keep)
    if DUPLICATE_COLUMN in df.columns:
        df = df.where(~F.col(DUPLICATE_COLUMN)).drop(DUPLICATE_COLUMN)
    write_parquet(config, spark, df, data_uri)


def _staged_rows(fs: FileSystem, data_uri: str, sub: str) -> list[tuple[str, int, int]]:
    """(path relative to ``data_uri``, size, rows from the footer) of the Parquet files
    a repair job staged under ``sub``."""
    out = []
    for f in fs.list_files(sub):
        rel = relative(data_uri, f.uri)
        name = rel.rpartition("/")[2]
        if not f.uri.endswith(".parquet") or name.startswith(("_", ".")):
            continue
        out.append((rel, f.size, footer_rows(functools.partial(fs.read_range, f.uri), f.size)))
    return sorted(out)

"""Audit (the paper, section 5): landed rows per topic and hour against the agents' counts.

Agents publish, to the audit topic, one :class:`broker.client.AuditRecord` per host,
topic and window (``docs/agent.md``, "Audit"; the schema is the client library's).
A message belongs to the window holding its timestamp (the agent's time read), the
same timestamp the loader partitions by, so a topic's expected count for an event hour
is the sum of ``acked`` (or ``sent``) over the windows starting in that hour, every host
and every record (an agent restarted inside a window publishes it twice, with disjoint
counts). The landed count is what is really in the lake: the rows the footers of the
verified files count (:mod:`hadoop_loader.verify`), not what the manifests claim.
Duplicates are the rows dedup dropped as copies (from the manifests; 0 without dedup).
Each hour is a :class:`broker.client.WindowCounts` (the audit's one formula): missing =
expected - landed - duplicates when positive, completeness = (landed + duplicates) /
expected; more than 100% means copies the tier did not count (a mirror's) arrived. The
mirror copies the audit topic with the data, so its duplicates can move the expectation
either way (docs/operations.md, "Duplicates").

Every stage found on the audit topic, and on ``<audit topic>.mirror`` where a mirror
publishes its own counts, is also summed (:func:`stage_counts`), so the report
shows the chain of tiers per topic and hour (:meth:`AuditReport.chain`): agent -> mirror
(the mirror's own counts, ``mirror/audit.py``) -> landed, each tier's completeness
against the tier before it with the same formula. Landed against the mirror is the exact
step (the mirror counts what it wrote to this cluster); duplicates a mirror made show as
its tier above 100% of the agents'.

With ``output.format = "iceberg"`` the lake is one table per topic and the counts come
from the tables (:func:`iceberg_counts`): landed rows per event hour are the record
counts Iceberg's manifests keep for each data file of the current snapshot, by its
``hours(timestamp)`` partition (no data file is read), and duplicates per hour are what
the landing snapshots' summaries say dedup dropped (:data:`broker.common.lake.
DUPLICATE_HOURS`). Iceberg's hours are UTC hours; each is named by the hour of
``load.timezone`` it starts in, exact for every zone whose offset is whole hours.

An audit topic that does not exist yet (no agent has published an audit record, as on a
new cluster) is not an error: there is nothing to audit, the report says so
(:attr:`AuditReport.missing_topic`) and the run's exit code is unaffected. Any other
failure to read it (brokers unreachable, say) is an :class:`AuditError`.

An hour is *judged* (counts toward ``--require-complete``) only once it ended at least
``settle_minutes`` before the run started: later hours are still filling.

The comparison (:func:`compare`) is pure; reading the topic and the manifests is at
the edges.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from broker.client import LANDED_STAGE, AuditRecord, WindowCounts, stage_rank
from broker.common.errors import UnknownTopicOrPartitionError
from broker.common.lake import DUPLICATE_HOURS, HOUR_MS, hour_key, iceberg_hour_key, summary_duplicates
from hadoop_loader.errors import AuditError, IncompleteError, LoaderError, SourceError, source_errors, spark_errors
from hadoop_loader.iceberg import SnapshotInfo

log = logging.getLogger("logferry.loader")


@dataclass(frozen=True)
class HourAudit:
    """One tier, topic and event hour."""

    topic: str
    hour: str
    """``YYYY-MM-DDTHH`` in the output's time zone (the ``dt=``/``hr=`` of the files)."""
    expected: int | None
    """From the audit topic; None when no audit record covers the hour."""
    landed: int
    """Rows really in the lake (each record once with dedup on)."""
    judged: bool
    duplicates: int = 0
    """Rows dedup dropped as copies of landed ones."""
    tier: str = "agent"
    """The stage whose audit records give ``expected``."""

    @property
    def counts(self) -> WindowCounts:
        return WindowCounts(self.expected, self.landed, self.duplicates)

    @property
    def completeness(self) -> float | None:
        """(landed + duplicates) / expected, or None without an expectation."""
        return self.counts.completeness

    @property
    def missing(self) -> int | None:
        return self.counts.missing

    @property
    def extra(self) -> int | None:
        return self.counts.extra

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "topic": self.topic,
            "hour": self.hour,
            "expected": self.expected,
            "landed": self.landed,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "extra": self.extra,
            "completeness": self.completeness,
            "judged": self.judged,
        }


@dataclass
class AuditReport:
    """Completeness per topic and hour, and what reading the audit topic found."""

    hours: list[HourAudit] = field(default_factory=list)
    records: int = 0
    """Audit records used."""
    skipped: int = 0
    """Audit values that were not audit records, or of another stage."""
    threshold: float | None = None
    missing_topic: str | None = None
    """The audit topic, when it does not exist yet: nothing to audit (not an error)."""
    tiers: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    """Every stage's summed count per (topic, hour) (:func:`stage_counts`)."""

    def chain(self, hour: HourAudit) -> list[tuple[str, int | None, float | None]]:
        """``[(stage, count, completeness against the tier before)]`` in pipeline order,
        ending with ``landed`` (rows, copies included); the first tier has no completeness."""
        out: list[tuple[str, int | None, float | None]] = []
        previous: int | None = None
        key = (hour.topic, hour.hour)
        for stage in sorted(self.tiers, key=stage_rank):
            count = self.tiers[stage].get(key)
            out.append((stage, count, None if not out or count is None else WindowCounts(previous, count).completeness))
            if count is not None:
                previous = count
        arrived = hour.counts.arrived
        out.append((LANDED_STAGE, arrived, WindowCounts(previous, arrived).completeness if out else None))
        return out

    def to_json(self) -> bytes:
        """The report as JSON (the loader keeps it under ``_logferry/audit/``)."""
        data = {
            "format": "logferry-audit/1",
            "records": self.records,
            "skipped": self.skipped,
            "threshold": self.threshold,
            "missing_topic": self.missing_topic,
            "hours": [
                {**h.to_json(), "tiers": [{"stage": st, "count": n, "completeness": c} for st, n, c in self.chain(h)]}
                for h in self.hours
            ],
        }
        return (json.dumps(data, indent=1) + "\n").encode()

    def failing(self, threshold: float | None = None) -> list[HourAudit]:
        """Judged hours below ``threshold`` (the configured one by default)."""
        limit = self.threshold if threshold is None else threshold
        if limit is None:
            return []
        return [h for h in self.hours if h.judged and h.expected and (h.completeness or 0.0) < limit]


def hour_end_ms(key: str, tz: dt.tzinfo) -> int:
    """End of the hour ``key`` (exclusive) in ms since the epoch."""
    start = dt.datetime.strptime(key, "%Y-%m-%dT%H").replace(tzinfo=tz)
    return int(start.timestamp() * 1000) + HOUR_MS


def expected_counts(
    records: Iterable[Mapping[str, Any]], stage: str, count: str, tz: dt.tzinfo
) -> tuple[dict[tuple[str, str], int], int, int]:
    """Sum audit records per (topic, hour of window start).

    Returns ``(expected, used, skipped)``; records of another stage or malformed ones
    are skipped, not fatal.
    """
    expected: dict[tuple[str, str], int] = {}
    used = skipped = 0
    for r in records:
        try:
            record = AuditRecord.from_map(r)
        except ValueError:
            skipped += 1
            continue
        if record.stage != stage:
            skipped += 1
            continue
        key = (record.topic, hour_key(record.window_start, tz))
        expected[key] = expected.get(key, 0) + (record.sent if count == "sent" else record.acked)
        used += 1
    return expected, used, skipped


def stage_counts(
    records: Iterable[Mapping[str, Any]], count: str, tz: dt.tzinfo
) -> dict[str, dict[tuple[str, str], int]]:
    """Every stage's records summed per (topic, hour of window start): ``{stage: counts}``."""
    out: dict[str, dict[tuple[str, str], int]] = {}
    for r in records:
        try:
            record = AuditRecord.from_map(r)
        except ValueError:
            continue
        counts = out.setdefault(record.stage, {})
        key = (record.topic, hour_key(record.window_start, tz))
        counts[key] = counts.get(key, 0) + (record.sent if count == "sent" else record.acked)
    return out


def compare(
    expected: Mapping[tuple[str, str], int],
    landed: Mapping[tuple[str, str], int],
    topics: Iterable[str],
    since_ms: int,
    judge_before_ms: int,
    tz: dt.tzinfo,
    threshold: float | None = None,
    duplicates: Mapping[tuple[str, str], int] | None = None,
    tier: str = "agent",
) -> AuditReport:
    """Completeness of every hour of ``topics`` from ``since_ms`` that has any count."""
    wanted = set(topics)
    first = hour_key(since_ms, tz)
    dups = duplicates or {}
    keys = sorted(k for k in set(expected) | set(landed) | set(dups) if k[0] in wanted and k[1] >= first)
    report = AuditReport(threshold=threshold)
    for topic, hour in keys:
        report.hours.append(
            HourAudit(
                topic,
                hour,
                expected.get((topic, hour)),
                landed.get((topic, hour), 0),
                judged=hour_end_ms(hour, tz) <= judge_before_ms,
                duplicates=dups.get((topic, hour), 0),
                tier=tier,
            )
        )
    return report


def landed_counts(manifests: Iterable[Any], since_ms: int) -> dict[tuple[str, str], int]:
    """Rows per (topic, hour) from manifests, newest first, stopping at older ones.

    A manifest committed before ``since_ms`` cannot hold rows of hours after it (rows
    land after their event time), so the walk stops there.
    """
    out: dict[tuple[str, str], int] = {}
    for m in manifests:
        if m.committed_ms < since_ms:
            break
        for topic, hours in m.hours.items():
            for hour, rows in hours.items():
                out[(topic, hour)] = out.get((topic, hour), 0) + rows
    return out


def duplicate_counts(manifests: Iterable[Any], since_ms: int) -> dict[tuple[str, str], int]:
    """Rows dropped by dedup per (topic, hour), from manifests newest first (the walk
    stops as :func:`landed_counts` does)."""
    out: dict[tuple[str, str], int] = {}
    for m in manifests:
        if m.committed_ms < since_ms:
            break
        for topic, hours in m.duplicates.items():
            for hour, rows in hours.items():
                out[(topic, hour)] = out.get((topic, hour), 0) + rows
    return out


def table_hours(topic: str, counts: Mapping[int, int], tz: dt.tzinfo) -> dict[tuple[str, str], int]:
    """A table's rows per Iceberg hour (hours since the epoch, UTC) as rows per
    (topic, hour key of ``tz``), the keys :func:`compare` takes."""
    out: dict[tuple[str, str], int] = {}
    for hour, rows in counts.items():
        key = (topic, iceberg_hour_key(hour, tz))
        out[key] = out.get(key, 0) + rows
    return out


def snapshot_duplicates(
    topic: str, snapshots: Iterable[SnapshotInfo], tz: dt.tzinfo
) -> tuple[dict[tuple[str, str], int], int]:
    """Rows dedup dropped per (topic, hour) from landing snapshots' summaries
    (:data:`DUPLICATE_HOURS`), and the copies of snapshots that counted them without
    hours (loads from before the property existed), which no hour can take."""
    out: dict[tuple[str, str], int] = {}
    unplaced = 0
    for snapshot in snapshots:
        try:
            hours, without_hours = summary_duplicates(snapshot.summary)
        except ValueError as exc:
            log.warning("audit: snapshot %s: %s", snapshot.snapshot_id, exc)
            continue
        unplaced += without_hours
        for key, rows in table_hours(topic, hours, tz).items():
            out[key] = out.get(key, 0) + rows
    return out, unplaced


def iceberg_counts(
    config: Any, spark: Any, since_ms: int
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(rows, duplicates) per (topic, hour) of the topics' Iceberg tables, from their
    metadata: the current snapshot's data files' record counts by hour partition, and
    the duplicate counts of the snapshots committed since ``since_ms`` (a snapshot
    committed before it cannot hold rows of a later hour)."""
    from hadoop_loader.iceberg import IcebergTables

    tz = zoneinfo.ZoneInfo(config.load.timezone)
    landed: dict[tuple[str, str], int] = {}
    duplicates: dict[tuple[str, str], int] = {}
    with spark_errors("counting the Iceberg tables' rows for the audit"):
        tables = IcebergTables(spark, config.output.uri, config.output.namespace)
        for topic in config.source.topics:
            if not tables.exists(topic):
                continue
            landed.update(table_hours(topic, tables.hour_counts(topic, since_ms // HOUR_MS), tz))
            dups, unplaced = snapshot_duplicates(topic, tables.history(topic, since_ms), tz)
            duplicates.update(dups)
            if unplaced:
                log.warning(
                    "audit: %s: %d duplicate(s) of loads from before %s are counted in no hour",
                    tables.name(topic),
                    unplaced,
                    DUPLICATE_HOURS,
                )
    return landed, duplicates


def read_audit_records(consumer: Any, topic: str, since_ms: int) -> tuple[list[dict[str, Any]], int] | None:
    """Every audit record published since ``since_ms`` (driver side; the topic is small).

    Records are published after their window ends, so anything published before
    ``since_ms`` is about earlier windows. Returns None when ``topic`` does not exist.
    """
    records: list[dict[str, Any]] = []
    bad = 0
    with source_errors(f"reading the audit topic {topic!r}"):
        try:
            partitions = consumer.partitions(topic)
        except UnknownTopicOrPartitionError:
            return None
        for partition in partitions:
            start = consumer.offset_for_time(topic, partition, since_ms)
            end = consumer.offsets(topic, partition).end
            pos = start
            while pos < end:
                result = consumer.fetch(topic, partition, pos, max_bytes=4 * 1024 * 1024)
                if result.next_offset == pos:
                    break
                for batch in result.batches:
                    for value in batch.values:
                        try:
                            record = msgpack.unpackb(value, raw=False)
                        except Exception:
                            bad += 1
                            continue
                        if isinstance(record, dict):
                            records.append(record)
                        else:
                            bad += 1
                pos = result.next_offset
    return records, bad


def audit_after_load(
    config: Any,
    store: Any,
    started: float,
    landed: Mapping[tuple[str, str], int] | None = None,
    spark: Any = None,
) -> AuditReport:
    """The audit step of a run: read the audit topic and compare with ``landed`` (rows
    really in the lake per topic and hour, from the verification; the manifests' counts
    when None) and the duplicates the manifests record; with ``format = "iceberg"``,
    with the tables' counts instead (:func:`iceberg_counts`, through ``spark``)."""
    from broker.client import SimpleConsumer

    a = config.audit
    tz = zoneinfo.ZoneInfo(config.load.timezone)
    started_ms = int(started * 1000)
    since_ms = (started_ms - a.lookback_hours * HOUR_MS) // HOUR_MS * HOUR_MS
    try:
        with source_errors("connecting to the cluster for the audit"):
            consumer = SimpleConsumer(
                zk=config.source.zk,
                brokers=list(config.source.brokers) if config.source.brokers else None,
                tls=config.tls,
                sasl=config.sasl_credentials(),
                listener=config.source.listener,
            )
        try:
            found = read_audit_records(consumer, a.topic, since_ms)
            # a mirror's own counts go to <topic>.mirror (mirror/audit.py): more tiers
            mirror_found = read_audit_records(consumer, a.topic + ".mirror", since_ms)
        finally:
            consumer.close()
    except SourceError as exc:
        raise AuditError(f"audit: {exc}") from exc
    if found is None:
        log.warning(
            "audit: topic %r does not exist yet (no agent has published audit records): nothing to audit", a.topic
        )
    records, bad = found if found is not None else ([], 0)
    expected, used, skipped = expected_counts(records, a.stage, a.count, tz)
    if config.output.format == "iceberg":
        try:
            landed, duplicates = iceberg_counts(config, spark, since_ms)
        except LoaderError as exc:
            raise AuditError(f"audit: {exc}") from exc
    else:
        if landed is None:
            landed = landed_counts(store.newest_first(), since_ms)
        duplicates = duplicate_counts(store.newest_first(), since_ms)
    report = compare(
        expected,
        landed,
        config.source.topics,
        since_ms,
        started_ms - a.settle_minutes * 60 * 1000,
        tz,
        a.require_complete,
        duplicates,
        a.stage,
    )
    report.records, report.skipped = used, skipped + bad
    report.tiers = stage_counts(records + (mirror_found[0] if mirror_found else []), a.count, tz)
    report.missing_topic = a.topic if found is None else None
    return report


def require_complete(report: AuditReport, threshold: float) -> None:
    """Raise :class:`IncompleteError` naming the hours below ``threshold``."""
    failing = report.failing(threshold)
    if failing:
        worst = ", ".join(f"{h.topic} {h.hour} {h.completeness:.2%}" for h in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        raise IncompleteError(f"{len(failing)} audited hour(s) below {threshold:.2%} complete: {worst}{more}")

"""Human-readable reports of a run: the landing summary and the audit table."""

from __future__ import annotations

from typing import Any, TextIO

from hadoop_loader.audit import AuditReport
from hadoop_loader.results import LoadResult


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _hours(hours: dict[str, int]) -> str:
    if not hours:
        return "-"
    keys = sorted(hours)
    if len(keys) == 1:
        return keys[0]
    return f"{len(keys)} ({keys[0]} .. {keys[-1]})"


def print_summary(result: LoadResult, out: TextIO) -> None:
    """Per topic rows, bytes, offset ranges and hours; duration and rows/s."""
    seconds = max(result.seconds, 1e-9)
    if result.recovery.rolled_forward or result.recovery.discarded:
        print(f"recovery: {result.recovery.describe()}", file=out)
    print_lake(result, out)
    if result.sequence is None:
        print(f"nothing new to land ({seconds:.1f} s)", file=out)
    else:
        print(
            f"run {result.sequence} committed: {result.rows:,} rows in {seconds:.1f} s "
            f"({result.rows / seconds:,.0f} rows/s)",
            file=out,
        )
    for topic, stats in result.topics.items():
        print(
            f"  {topic}: {stats.rows:,} rows, {_size(stats.log_bytes)} read, "
            f"{_size(stats.parquet_bytes)} Parquet in {stats.files} file(s), "
            f"hours {_hours(stats.hours)}" + (f", {stats.duplicates:,} duplicate(s) dropped" if result.dedup else ""),
            file=out,
        )
        if stats.table is not None:
            print(f"    table {stats.table}, snapshot {stats.snapshot_id}", file=out)
            for r in sorted(stats.ranges, key=lambda r: r.partition):
                print(f"    partition {r.partition}: offsets [{r.start}, {r.end})", file=out)
            continue
        for r in sorted(stats.ranges, key=lambda r: r.partition):
            print(f"    partition {r.partition}: offsets [{r.start}, {r.end}) {r.rows:,} rows", file=out)
    for gap in result.gaps:
        print(f"  GAP skipped: {gap.describe()}", file=out)
    if result.undecodable:
        print(f"  {result.undecodable:,} value(s) were not agent records (kept raw, decoded = false)", file=out)
    if result.phases:
        print("  steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.phases.items()), file=out)
    if result.walked_bytes:
        print(f"  planning walked {_size(result.walked_bytes)} of batch boundaries", file=out)


def print_lake(result: LoadResult, out: TextIO) -> None:
    """What the verification of earlier runs' files found, and what a repair did."""
    lake = result.lake
    if lake is None:
        return
    if lake.ok:
        print(f"lake: {lake.files:,} landed file(s) verified, {lake.rows:,} rows", file=out)
    else:
        print(f"lake: {len(lake.damaged)} of {lake.files:,} landed file(s) MISSING OR DAMAGED", file=out)
        for d in lake.damaged:
            print(f"  DAMAGED {d.describe()}", file=out)
    repair = result.repair
    if repair is None:
        return
    for group, rows in sorted(repair.repaired.items(), key=lambda x: x[0].describe()):
        print(f"  REPAIRED {group.describe()}: {rows:,} rows landed again (run {repair.sequence})", file=out)
    for group, why in sorted(repair.failed.items(), key=lambda x: x[0].describe()):
        print(f"  CANNOT REPAIR {group.describe()}: {why}", file=out)


def print_audit(report: AuditReport, out: TextIO) -> None:
    """Completeness per topic and hour; ``*`` marks hours still settling (not judged)."""
    if report.missing_topic is not None:
        print(
            f"audit: topic {report.missing_topic!r} does not exist yet (no agent has "
            "published audit records): nothing to audit",
            file=out,
        )
    else:
        print(f"audit: {report.records} record(s) used, {report.skipped} skipped", file=out)
    if not report.hours:
        print("  no audited hours", file=out)
        return
    print(
        f"  {'tier':<6} {'topic':<24} {'hour':<14} {'expected':>12} {'landed':>12} "
        f"{'duplicates':>10} {'missing':>9} {'complete':>9}",
        file=out,
    )
    failing = set(id(h) for h in report.failing())
    for h in report.hours:
        pct = "n/a" if h.completeness is None else f"{h.completeness:.2%}"
        mark = " *" if not h.judged else (" LOW" if id(h) in failing else "")
        expected = "-" if h.expected is None else f"{h.expected:,}"
        missing = "-" if h.missing is None else f"{h.missing:,}"
        print(
            f"  {h.tier:<6} {h.topic:<24} {h.hour:<14} {expected:>12} {h.landed:>12,} "
            f"{h.duplicates:>10,} {missing:>9} {pct:>9}{mark}",
            file=out,
        )
    print("  (* = hour still settling, not judged)", file=out)
    if len(report.tiers) > 1:  # a mirror's tier beside the agents'
        print("  tiers (each against the one before it; over 100% = copies that tier made):", file=out)
        for h in report.hours:
            chain = "  ->  ".join(
                f"{stage} {'-' if n is None else f'{n:,}'}" + ("" if c is None else f" ({c:.2%})")
                for stage, n, c in report.chain(h)
            )
            print(f"  {h.topic:<24} {h.hour:<14} {chain}", file=out)


def print_maintenance(result: Any, out: TextIO) -> None:
    """What ``--maintain`` did per table (:class:`hadoop_loader.iceberg_job.MaintenanceResult`)."""
    if not result.tables:
        print("maintenance: no table to maintain", file=out)
    for topic, t in result.tables.items():
        print(
            f"maintenance: {topic} ({t.table}): {t.rewritten_files:,} file(s) compacted into {t.added_files:,}, "
            f"{t.expired_snapshots:,} snapshot(s) expired, {t.orphans_removed:,} orphan file(s) removed",
            file=out,
        )
    print(f"maintenance done in {result.seconds:.1f} s", file=out)

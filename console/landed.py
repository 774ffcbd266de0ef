"""The landed tier: rows the loader landed per topic and event hour, against the tier
before it (the analysis cluster's), read-only from the lake.

A lake is the loader's ``output.uri``, in either of its formats (``[[lake]] format``,
detected by default, :meth:`LakeReader.poll`):

- **Parquet**: ``logferry load`` commits one manifest per run under
  ``<lake>/_logferry/manifests/`` (``hadoop_loader/manifest.py``, format
  ``logferry-manifest/1``): among others, rows per topic and event hour (``hours``, in
  the loader's ``load.timezone``) and rows dedup dropped as copies (``duplicates``). A
  committed manifest never changes, so :class:`LakeReader` reads each one once and adds
  it up; each poll only lists the folder.
- **Iceberg**: a table per topic in ``<lake>/<namespace>/``; the rows per hour are the
  record counts the current snapshot's manifests keep per data file, the duplicates,
  runs and times the snapshots' summaries (:mod:`console.iceberg_tables`). A table is
  read again only when its metadata changed.

The lake is a local (or mounted) folder, or HDFS read over WebHDFS
(:mod:`console.lake_files`). The loader's report (``logferry load``,
:mod:`hadoop_loader.audit`) puts the same numbers at the end of its tier chain; the
console does not import the loader (import contract), it reads what the loader
publishes, with the shared names of :mod:`broker.common.lake`.

Completeness of an hour is (landed + duplicates) / the count of the last tier before
it, the one the page shows last in the pipeline (the mirror's on the analysis cluster,
or the agents' when no mirror counts), summed over the audit windows that start in that
hour, the loader's own formula (``hadoop_loader.audit.expected_counts``).

An hour is judged only once the loader could have landed all of it: when it ended (and
then the audit's settle time passed, so every tier had published its counts and the
mirror caught up) before the last run started. A later hour is ``open``: the hosts may
still be writing it, or the loader has not run since; its figure is shown, unjudged
(the audit view's rule for its windows), so a nightly load does not paint today red.
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from collections.abc import Iterable
from typing import Any

from broker.client import LANDED_STAGE, stage_rank
from broker.common.lake import MANIFEST_FORMAT, MANIFESTS_DIR, STATE_DIR, hour_key, iceberg_hour_key
from console.iceberg_tables import IcebergTables, one_line
from console.lake_files import LakeFiles, join, lake_files

MAX_HOURS = 48
"""Hours shown per topic (the newest)."""
FORMATS = ("auto", "parquet", "iceberg")
"""A lake's ``format``: ``auto`` detects it (:meth:`LakeReader.poll`)."""


class LakeReader:
    """One lake's landed rows per (topic, hour), from the loader's committed manifests
    (Parquet) or its tables' metadata (Iceberg)."""

    def __init__(
        self,
        name: str,
        path: str,
        cluster: str,
        timezone: str = "UTC",
        format: str = "auto",
        namespace: str = "logferry",
        webhdfs: str | None = None,
        files: LakeFiles | None = None,
    ):
        self.name = name
        self.path = path
        """The lake's location as configured (a folder, ``file://`` or ``hdfs://`` URI)."""
        self.cluster = cluster
        """The console cluster the loader reads (where its tier before "landed" is)."""
        self.timezone = timezone
        self.tz = zoneinfo.ZoneInfo(timezone)
        self.format = format
        """``parquet`` or ``iceberg``; ``auto`` until a poll found which."""
        self.namespace = namespace
        self.files = files if files is not None else lake_files(path, webhdfs)
        self.landed: dict[tuple[str, str], int] = {}
        self.duplicates: dict[tuple[str, str], int] = {}
        self.runs = 0
        self.last_committed_ms = 0
        self.last_started_ms = 0
        """When the newest run started: hours that ended (and settled) before it are judged."""
        self.error: str | None = None
        self.unplaced = 0
        """Iceberg: copies dedup dropped that loads from before ``logferry.duplicate-hours``
        counted in no hour (no hour's completeness can include them)."""
        self._read: set[str] = set()
        self.tables = IcebergTables(self.files, path, namespace)

    def poll(self) -> None:
        """Read what the loader committed since the last poll (errors are kept in :attr:`error`).

        With ``format = "auto"`` each poll looks for the format until it finds one: a
        Parquet lake has ``_logferry/manifests/``, an Iceberg one the namespace's folder
        ``<lake>/<namespace>/`` (an Iceberg warehouse has ``_logferry/`` too, for the
        loader's lock, but no manifests)."""
        try:
            if self.format == "auto":
                self.format = self._detect()
            if self.format == "parquet":
                self._poll_manifests()
            elif self.format == "iceberg":
                self._poll_tables()
        except FileNotFoundError:
            self.error = self._missing()
        except OSError as exc:
            self.error = one_line(str(exc))

    def _detect(self) -> str:
        names = {e.name: e.directory for e in self.files.list(self.path)}
        parquet = names.get(STATE_DIR, False) and any(
            join(STATE_DIR, e.name) == MANIFESTS_DIR for e in self.files.list(join(self.path, STATE_DIR))
        )
        iceberg = names.get(self.namespace, False)
        if parquet and iceberg:
            raise OSError(
                f"{self.path} has Parquet manifests ({MANIFESTS_DIR}) and an Iceberg namespace "
                f"({self.namespace}/): name the lake's format (format = 'parquet' or 'iceberg')"
            )
        self.error = None
        return "parquet" if parquet else "iceberg" if iceberg else "auto"

    def _missing(self) -> str | None:
        """The error when a folder the format reads is missing: none while the lake is
        there (nothing landed yet), else the lake's own absence."""
        try:
            self.files.list(self.path)
        except FileNotFoundError:
            return f"{self.path} does not exist"
        except OSError as exc:
            return one_line(str(exc))
        return None

    def _poll_manifests(self) -> None:
        directory = join(self.path, MANIFESTS_DIR)
        names = sorted(
            e.name for e in self.files.list(directory) if e.name.endswith(".json") and e.name not in self._read
        )
        self.error = None
        for name in names:
            try:
                self.add(json.loads(self.files.read(join(directory, name))))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                self.error = one_line(f"manifest {join(directory, name)}: {exc}")
                continue
            self._read.add(name)

    def add(self, manifest: dict[str, Any]) -> None:
        """Count one committed Parquet manifest (sans IO)."""
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format is {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}")
        for field, into in (("hours", self.landed), ("duplicates", self.duplicates)):
            for topic, hours in (manifest.get(field) or {}).items():
                for hour, rows in hours.items():
                    key = (str(topic), str(hour))
                    into[key] = into.get(key, 0) + int(rows)
        self.runs += 1
        self.last_committed_ms = max(self.last_committed_ms, int(manifest.get("committed_ms", 0)))
        self.last_started_ms = max(self.last_started_ms, int(manifest.get("started_ms", 0)))

    def _poll_tables(self) -> None:
        tables = self.tables
        if tables.poll():
            self.landed, self.duplicates = {}, {}
            runs: set[str] = set()
            committed = started = loads = unplaced = 0
            for reading in tables.tables.values():
                for counts, into in ((reading.hours, self.landed), (reading.facts.duplicates, self.duplicates)):
                    for hour, rows in counts.items():
                        key = (reading.topic, iceberg_hour_key(hour, self.tz))
                        into[key] = into.get(key, 0) + rows
                runs |= reading.facts.runs
                committed = max(committed, reading.facts.last_committed_ms)
                started = max(started, reading.facts.last_started_ms)
                loads = max(loads, reading.facts.loads)
                unplaced += reading.facts.unplaced
            # the runs the kept snapshots name; once some expired, at least a table's load count
            self.runs = max(len(runs), loads)
            self.last_committed_ms, self.last_started_ms = committed, started
            self.unplaced = unplaced
        errors = sorted(tables.errors.values())
        more = f" (and {len(errors) - 1} more tables)" if len(errors) > 1 else ""
        self.error = errors[0] + more if errors else None

    def rows(self, tiers: dict[tuple[str, int], dict[str, int]], settle_s: float = 60.0) -> list[dict[str, Any]]:
        """Per landed topic and hour, newest first: landed rows, duplicates, and
        completeness against the last tier before landed in ``tiers`` (``(topic,
        window_start) -> {stage: acked}``, windows summed into this lake's hours); each
        hour ``settled`` (judged) or ``open`` (see the module's docstring)."""
        topics = {t for t, _ in self.landed} | {t for t, _ in self.duplicates}
        before: dict[tuple[str, str], dict[str, int]] = {}
        for (topic, start), stages in tiers.items():
            if topic not in topics:
                continue
            bucket = before.setdefault((topic, hour_key(start, self.tz)), {})
            for stage, acked in stages.items():
                bucket[stage] = bucket.get(stage, 0) + acked
        keys = set(self.landed) | set(self.duplicates) | set(before)
        out = []
        for topic in sorted(topics):
            for hour in sorted((h for t, h in keys if t == topic), reverse=True)[:MAX_HOURS]:
                row = landed_row(
                    topic,
                    hour,
                    self.landed.get((topic, hour), 0),
                    self.duplicates.get((topic, hour), 0),
                    before.get((topic, hour), {}),
                )
                row["state"] = hour_state(hour, self.tz, self.last_started_ms, settle_s)
                out.append(row)
        return out

    def view(self, tiers: dict[tuple[str, int], dict[str, int]], settle_s: float = 60.0) -> dict[str, Any]:
        """The page's landed view of this lake."""
        return {
            "name": self.name,
            "path": self.path,
            "format": None if self.format == "auto" else self.format,
            "tables": len(self.tables.tables) if self.format == "iceberg" else None,
            "duplicates_without_hour": self.unplaced,
            "cluster": self.cluster,
            "timezone": self.timezone,
            "runs": self.runs,
            "last_committed_ms": self.last_committed_ms or None,
            "last_started_ms": self.last_started_ms or None,
            "error": self.error,
            "rows": self.rows(tiers, settle_s),
        }


def hour_state(hour: str, tz: dt.tzinfo, last_started_ms: int, settle_s: float) -> str:
    """``settled`` when the event hour ``hour`` (``YYYY-MM-DDTHH`` in ``tz``) ended,
    plus ``settle_s``, before the newest run started at ``last_started_ms``; else ``open``."""
    start = dt.datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=tz)
    end_ms = (start.timestamp() + 3600 + settle_s) * 1000
    return "settled" if end_ms <= last_started_ms else "open"


def landed_row(topic: str, hour: str, landed: int, duplicates: int, before: dict[str, int]) -> dict[str, Any]:
    """One hour: landed (+ duplicates) against the last tier of ``before`` (sans IO)."""
    earlier = [s for s in sorted(before, key=stage_rank) if stage_rank(s) < stage_rank(LANDED_STAGE)]
    of = earlier[-1] if earlier else None
    expected = before[of] if of is not None else None
    pct = round(100.0 * (landed + duplicates) / expected, 2) if expected else None
    return {
        "topic": topic,
        "hour": hour,
        "landed": landed,
        "duplicates": duplicates,
        "of": of,
        "expected": expected,
        "complete_pct": pct,
    }


def merge_tiers(
    tallies: Iterable[tuple[str, dict[tuple[str, int], dict[str, int]]]],
) -> dict[tuple[str, int], dict[str, int]]:
    """Each stage's acked per (topic, window) from the first cluster that has it (live
    first), as :func:`console.audit.pipeline_rows` joins the clusters."""
    home: dict[str, str] = {}
    listed = list(tallies)
    for name, totals in listed:
        for stages in totals.values():
            for stage in stages:
                home.setdefault(stage, name)
    out: dict[tuple[str, int], dict[str, int]] = {}
    for name, totals in listed:
        for key, stages in totals.items():
            for stage, acked in stages.items():
                if home[stage] == name:
                    out.setdefault(key, {})[stage] = acked
    return out


__all__ = ["FORMATS", "LakeReader", "hour_key", "hour_state", "landed_row", "merge_tiers"]

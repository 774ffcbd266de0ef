"""The landed tier: rows the loader landed as Parquet per topic and event hour, against
the tier before it (the analysis cluster's), read-only from the lake.

``logferry load`` commits one manifest per run under ``<lake>/_logferry/manifests/``
(``hadoop_loader/manifest.py``, format ``logferry-manifest/1``): among others, rows per
topic and event hour (``hours``, in the loader's ``load.timezone``) and rows dedup
dropped as copies (``duplicates``). A committed manifest never changes, so
:class:`LakeReader` reads each one once and adds it up; each poll only lists the
directory. The loader's report (``logferry load``, :mod:`hadoop_loader.audit`) puts
the same numbers at the end of its tier chain; the console does not import the
loader (import contract), it reads the files the loader publishes.

Completeness of an hour is (landed + duplicates) / the count of the last tier before
it, the one the page shows last in the pipeline (the mirror's on the analysis cluster,
or the agents' when no mirror counts), summed over the audit windows that start in that
hour, the loader's own formula (``hadoop_loader.audit.expected_counts``).

An hour is judged only once the loader could have landed all of it: when it ended (and
then the audit's settle time passed, so every tier had published its counts and the
mirror caught up) before the last run started. A later hour is ``open``: the hosts may
still be writing it, or the loader has not run since; its figure is shown, unjudged
(the audit view's rule for its windows), so a nightly load does not paint today red.

Only a lake on a local (or locally mounted) file system is read: ``path`` or
``file://path``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import zoneinfo
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from broker.client import LANDED_STAGE, stage_rank

MANIFESTS = Path("_logferry") / "manifests"
MANIFEST_FORMAT = "logferry-manifest/1"
MAX_HOURS = 48
"""Hours shown per topic (the newest)."""


def lake_path(path: str) -> Path:
    """A lake location from the config as a local directory (``file://`` stripped)."""
    return Path(path[len("file://") :] if path.startswith("file://") else path)


def hour_key(ms: int, tz: dt.tzinfo) -> str:
    """The event hour of a timestamp as the loader names it (``YYYY-MM-DDTHH``)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz).strftime("%Y-%m-%dT%H")


class LakeReader:
    """One lake's landed rows per (topic, hour), from the loader's committed manifests."""

    def __init__(self, name: str, path: str, cluster: str, timezone: str = "UTC"):
        self.name = name
        self.path = lake_path(path)
        self.cluster = cluster
        """The console cluster the loader reads (where its tier before "landed" is)."""
        self.timezone = timezone
        self.tz = zoneinfo.ZoneInfo(timezone)
        self.landed: dict[tuple[str, str], int] = {}
        self.duplicates: dict[tuple[str, str], int] = {}
        self.runs = 0
        self.last_committed_ms = 0
        self.last_started_ms = 0
        """When the newest run started: hours that ended (and settled) before it are judged."""
        self.error: str | None = None
        self._read: set[str] = set()

    def poll(self) -> None:
        """Read manifests committed since the last poll (errors are kept in :attr:`error`)."""
        directory = self.path / MANIFESTS
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json") and n not in self._read)
        except FileNotFoundError:
            self.error = None if self.path.is_dir() else f"{self.path} does not exist"
            return
        except OSError as exc:
            self.error = f"listing {directory}: {exc.strerror or exc}"
            return
        self.error = None
        for name in names:
            try:
                self.add(json.loads((directory / name).read_bytes()))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                self.error = f"manifest {directory / name}: {exc}"
                continue
            self._read.add(name)

    def add(self, manifest: dict[str, Any]) -> None:
        """Count one committed manifest (sans IO)."""
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
            "path": str(self.path),
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


__all__ = ["LakeReader", "hour_key", "hour_state", "lake_path", "landed_row", "merge_tiers"]

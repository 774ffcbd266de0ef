"""What the loader writes into a lake and every reader of it reads: event hours, and the
logferry properties of an Iceberg table's commits.

The loader (``hadoop_loader``) writes them; its audit and the console's landed tier
(``console.landed``) read them. Neither may import the other (import contracts), so the
names and the few rules both need live here, sans IO:

- a Parquet output keeps one manifest per committed run in :data:`MANIFESTS_DIR`, in
  the format :data:`MANIFEST_FORMAT`;
- an **event hour** is named ``YYYY-MM-DDTHH`` in the loader's ``load.timezone``
  (:func:`hour_key`): the ``dt=``/``hr=`` of Parquet, the hours of the audit;
- an Iceberg table is partitioned by ``hours(timestamp)``, whose value is the hour since
  the epoch in UTC (:func:`iceberg_hour_key` names it; exact for every zone whose offset
  is whole hours);
- each load is one Iceberg commit whose snapshot summary carries logferry's properties
  (docs/loader.md, "Exactly once: the table's commit carries the offsets"); those a
  reader of the lake needs are named here, the loader's other ones in
  ``hadoop_loader/iceberg.py``;
- the copies dedup dropped, per hour, are in :data:`DUPLICATE_HOURS`
  (:func:`summary_duplicates` reads them).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

HOUR_MS = 3600 * 1000

STATE_DIR = "_logferry"
"""The loader's own folder in an output (its lock; with Parquet, its manifests)."""
MANIFESTS_DIR = f"{STATE_DIR}/manifests"
"""Parquet output: one committed manifest per run, ``<20-digit sequence>.json``."""
MANIFEST_FORMAT = "logferry-manifest/1"
"""The ``format`` a committed manifest names (``hadoop_loader/manifest.py`` writes it)."""

TABLE_TOPIC = "logferry.topic"
"""Table property: the topic a table holds."""
LOAD = "logferry.load"
"""The table's load number: 1, 2, ... (``VERSION AS OF`` the snapshot of load N)."""
RUN_ID = "logferry.run-id"
"""A unique id of the run (the same in every table a run commits to)."""
STARTED_MS = "logferry.started-ms"
"""When the run started (ms since the epoch, the same in every table a run commits to):
an hour that ended before it could be landed whole by that run."""
DUPLICATES = "logferry.duplicates"
"""With dedup: rows this load read and did not append, as copies of landed records."""
DUPLICATE_HOURS = "logferry.duplicate-hours"
"""With dedup, when the load dropped copies: JSON ``{"<hour>": rows}``, the copies per
event hour (hours since the epoch, UTC: the value of the table's ``hours(timestamp)``
partition), for the audit's duplicates per hour."""


def hour_key(ms: int, tz: dt.tzinfo) -> str:
    """The event hour of a millisecond timestamp, as the loader names it (``YYYY-MM-DDTHH``)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz).strftime("%Y-%m-%dT%H")


def iceberg_hour_key(hour: int, tz: dt.tzinfo) -> str:
    """The event hour ``hour`` (Iceberg's ``hours`` transform: hours since the epoch, UTC)
    named in ``tz``: the hour of ``tz`` it starts in."""
    return hour_key(hour * HOUR_MS, tz)


def summary_duplicates(summary: Mapping[str, str]) -> tuple[dict[int, int], int]:
    """The copies one snapshot's summary says dedup dropped: ``({hour: rows}, unplaced)``,
    hours as Iceberg's (:func:`iceberg_hour_key`); ``unplaced`` are copies counted
    without hours (:data:`DUPLICATES` alone: loads from before :data:`DUPLICATE_HOURS`
    existed), which no hour can take. ValueError when :data:`DUPLICATE_HOURS` is
    unreadable."""
    text = summary.get(DUPLICATE_HOURS)
    if text is None:
        count = summary.get(DUPLICATES, "0")
        return {}, int(count) if count.isdigit() else 0
    try:
        hours = json.loads(text)
        return {int(h): int(n) for h, n in hours.items()}, 0
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"unreadable {DUPLICATE_HOURS} {text[:80]!r}: {exc}") from None


__all__ = [
    "DUPLICATES",
    "DUPLICATE_HOURS",
    "HOUR_MS",
    "LOAD",
    "MANIFESTS_DIR",
    "MANIFEST_FORMAT",
    "RUN_ID",
    "STARTED_MS",
    "STATE_DIR",
    "TABLE_TOPIC",
    "hour_key",
    "iceberg_hour_key",
    "summary_duplicates",
]

"""The landed tier of an Iceberg lake: rows per topic and event hour from the tables' metadata.

The loader (``output.format = "iceberg"``, docs/loader.md "Iceberg") lands each topic as
a table of a Hadoop catalog: ``<warehouse>/<namespace>/<table>/metadata/`` holds
``vN.metadata.json`` and ``version-hint.text`` (the N of the current one). Per table,
from its metadata only (no data file is read):

- **rows per event hour**: the current snapshot's manifest list (Avro) names its
  manifests (Avro); each entry of a data manifest is a data file with its
  ``record_count`` and its partition, whose ``hours(timestamp)`` value is the event hour
  (hours since the epoch, UTC). Entries ADDED or EXISTING are live; DELETED ones (files a
  compaction rewrote) are not. So a compaction (a ``replace`` snapshot: the old files
  DELETED, the new one ADDED with their rows) and a snapshot expiry (old snapshots go,
  live files stay) leave the counts as they were. Delete files (merge-on-read deletes)
  are not read: the loader writes none.
- **duplicates per hour, runs, the last commit and the last run's start**: from the
  snapshots of the current history (the current one, then its parents while kept): the
  loader's summary properties (:mod:`broker.common.lake`). A landing snapshot is one
  with ``logferry.run-id``; compactions have none and count for nothing here. What an
  expired snapshot said is gone with it: its run and its copies are no longer counted
  (its rows are: they are in live files).
- **the topic**: the table property ``logferry.topic``; a table without it is another
  writer's and is passed over.

Each table is re-read only when its metadata changed: a poll reads ``version-hint.text``
(a few bytes) and compares the metadata file it names with the one read last; a
manifest never changes once written, so each is decoded once and kept while the current
snapshot lists it. The Avro files are decoded by pyiceberg (the ``console`` extra),
imported when the first table is read. The counting (:func:`live_rows`,
:func:`history_facts`, :func:`hour_positions`) is sans IO; the file access is
:mod:`console.lake_files`'.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.common.lake import LOAD, RUN_ID, STARTED_MS, TABLE_TOPIC, summary_duplicates
from console.lake_files import LakeFiles, join

HOUR_TRANSFORM = "hour"
DELETED = 2
"""A manifest entry's status: 0 EXISTING, 1 ADDED, 2 DELETED (the Iceberg spec)."""
DATA = 0
"""A manifest's content: 0 data files, 1 delete files."""
METADATA_FILE = re.compile(r"v(\d+)(\.gz)?\.metadata\.json")
"""The Hadoop catalog's metadata file names."""


class TableError(ValueError):
    """A table's metadata says something this reader cannot count (the message names it)."""


# -- sans IO ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestRef:
    """One manifest of a snapshot's manifest list."""

    location: str
    content: int
    """:data:`DATA` or delete files."""
    spec_id: int
    handle: Any = field(default=None, compare=False)
    """The decoder's own object, to read its entries with (:mod:`console.iceberg_avro`)."""


@dataclass(frozen=True)
class EntryRow:
    """One manifest entry: a data file's status, rows and partition tuple."""

    status: int
    record_count: int
    partition: tuple[Any, ...]


@dataclass(frozen=True)
class HistoryFacts:
    """What the snapshots of a table's current history say (:func:`history_facts`)."""

    duplicates: dict[int, int] = field(default_factory=dict)
    """Copies dedup dropped per Iceberg hour."""
    unplaced: int = 0
    """Copies counted without hours (loads from before ``logferry.duplicate-hours``)."""
    runs: frozenset[str] = frozenset()
    """The run ids of its landing snapshots."""
    last_committed_ms: int = 0
    last_started_ms: int = 0
    loads: int = 0
    """The newest load's number (``logferry.load``): the table's loads, expired ones too."""
    bad: tuple[str, ...] = ()
    """Snapshots whose logferry properties could not be read, one line each."""


@dataclass(frozen=True)
class TableReading:
    """One table, as its metadata file :attr:`metadata` says."""

    topic: str
    metadata: str
    """The metadata file read (its location)."""
    hours: dict[int, int]
    """Live rows per Iceberg hour (hours since the epoch, UTC)."""
    facts: HistoryFacts
    manifests: frozenset[str] = frozenset()
    """The manifests of its current snapshot (their decoded counts are kept)."""


def current_history(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The current snapshot and its parents while the metadata keeps them, newest first."""
    snapshots = {s["snapshot-id"]: s for s in meta.get("snapshots") or []}
    out: list[Mapping[str, Any]] = []
    seen = snapshots.get(meta.get("current-snapshot-id"))
    while seen is not None and len(out) < len(snapshots):
        out.append(seen)
        seen = snapshots.get(seen.get("parent-snapshot-id"))
    return out


def history_facts(history: Iterable[Mapping[str, Any]]) -> HistoryFacts:
    """Duplicates per hour, runs, last commit and last start of a table's snapshots
    (their ``summary`` and ``timestamp-ms``); only landing snapshots (with a run id) count."""
    duplicates: dict[int, int] = {}
    unplaced = committed = started = loads = 0
    runs = set()
    bad = []
    for snapshot in history:
        summary = snapshot.get("summary") or {}
        run = summary.get(RUN_ID)
        if run is None:
            continue
        runs.add(str(run))
        committed = max(committed, int(snapshot.get("timestamp-ms", 0)))
        started = max(started, _number(summary.get(STARTED_MS)))
        loads = max(loads, _number(summary.get(LOAD)))
        try:
            hours, without = summary_duplicates(summary)
        except ValueError as exc:
            bad.append(f"snapshot {snapshot.get('snapshot-id')}: {exc}")
            continue
        unplaced += without
        for hour, rows in hours.items():
            duplicates[hour] = duplicates.get(hour, 0) + rows
    return HistoryFacts(duplicates, unplaced, frozenset(runs), committed, started, loads, tuple(bad))


def _number(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def hour_positions(meta: Mapping[str, Any]) -> dict[int, int | None]:
    """Per partition spec id, the position of its ``hours`` field in a data file's
    partition tuple (None: the spec has none, its files have no event hour)."""
    specs = meta.get("partition-specs")
    if specs is None:  # format version 1 may have only the current spec
        specs = [{"spec-id": meta.get("default-spec-id", 0), "fields": meta.get("partition-spec") or []}]
    out: dict[int, int | None] = {}
    for spec in specs:
        fields = [str(f.get("transform", "")) for f in spec.get("fields") or []]
        out[int(spec["spec-id"])] = fields.index(HOUR_TRANSFORM) if HOUR_TRANSFORM in fields else None
    return out


def live_rows(entries: Iterable[EntryRow], position: int | None) -> dict[int, int]:
    """Rows per Iceberg hour of a manifest's live entries (ADDED or EXISTING, never
    DELETED) from the partition value at ``position``; files without an hour (a null
    timestamp, another writer's) are left out, as the loader's audit leaves them."""
    out: dict[int, int] = {}
    if position is None:
        return out
    for entry in entries:
        if entry.status == DELETED:
            continue
        hour = entry.partition[position] if position < len(entry.partition) else None
        if hour is None:
            continue
        out[int(hour)] = out.get(int(hour), 0) + int(entry.record_count)
    return out


def newest_metadata(names: Iterable[str]) -> str | None:
    """The highest ``vN[.gz].metadata.json`` of a metadata folder's names (None: none)."""
    found = [(int(m.group(1)), n) for n in names if (m := METADATA_FILE.fullmatch(n))]
    return max(found)[1] if found else None


# -- reading ------------------------------------------------------------------------------------


class IcebergTables:
    """The tables of one namespace of an Iceberg warehouse, each read again only when its
    metadata changed (:meth:`poll`)."""

    def __init__(self, files: LakeFiles, warehouse: str, namespace: str):
        self.files = files
        self.folder = join(warehouse, namespace)
        self.tables: dict[str, TableReading] = {}
        """By table folder name: the last good reading."""
        self.errors: dict[str, str] = {}
        """By table folder name: why its last reading failed (one line)."""
        self._manifests: dict[str, dict[int, int]] = {}
        """Decoded manifests: location -> live rows per Iceberg hour."""

    def poll(self) -> bool:
        """Read the tables whose metadata changed; True when any reading changed. A
        namespace folder that is not there raises FileNotFoundError (nothing landed, or
        a wrong ``namespace``); a table that cannot be read keeps its last reading and
        an entry in :attr:`errors`."""
        names = {e.name for e in self.files.list(self.folder) if e.directory}
        changed = False
        for name in sorted(names):
            try:
                changed |= self._poll_table(name)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self.errors[name] = one_line(f"table {join(self.folder, name)}: {exc}")
                continue
            reading = self.tables.get(name)
            if reading is not None and reading.facts.bad:
                self.errors[name] = one_line(f"table {reading.metadata}: {reading.facts.bad[0]}")
            else:
                self.errors.pop(name, None)
        for gone in set(self.tables) - names:
            del self.tables[gone]
            changed = True
        for gone in set(self.errors) - names:
            del self.errors[gone]
        return changed

    def _poll_table(self, name: str) -> bool:
        metadata = join(self.folder, name, "metadata")
        known = self.tables.get(name)
        found = self._read_metadata(metadata, known.metadata if known else None)
        if found is None:  # not a table (yet): no metadata file
            return self.tables.pop(name, None) is not None
        location, raw = found
        if raw is None:
            return False
        meta = json.loads(gzip.decompress(raw) if location.endswith(".gz.metadata.json") else raw)
        topic = (meta.get("properties") or {}).get(TABLE_TOPIC)
        if not topic:  # another writer's table
            return self.tables.pop(name, None) is not None
        history = current_history(meta)
        refs = self._manifest_list(history[0]["manifest-list"]) if history else []
        hours = self._rows(refs, hour_positions(meta))
        facts = history_facts(history)
        self.tables[name] = TableReading(str(topic), location, hours, facts, frozenset(r.location for r in refs))
        kept = {m for t in self.tables.values() for m in t.manifests}
        for gone in set(self._manifests) - kept:
            del self._manifests[gone]
        return True

    def _read_metadata(self, metadata: str, known: str | None) -> tuple[str, bytes | None] | None:
        """The table's current metadata file: its location and bytes (None when it is
        ``known``, the one read last), from ``version-hint.text`` or, without one, the
        folder's newest ``vN.metadata.json``; None when the folder has none."""
        try:
            hint = self.files.read(join(metadata, "version-hint.text")).decode("ascii", "replace").strip()
        except FileNotFoundError:
            hint = ""
        if hint.isdigit():
            for candidate in (join(metadata, f"v{hint}.metadata.json"), join(metadata, f"v{hint}.gz.metadata.json")):
                if candidate == known:
                    return known, None
                try:
                    return candidate, self.files.read(candidate)
                except FileNotFoundError:
                    continue
        try:
            name = newest_metadata(e.name for e in self.files.list(metadata))
        except FileNotFoundError:
            return None
        if name is None:
            return None
        location = join(metadata, name)
        return location, None if location == known else self.files.read(location)

    def _manifest_list(self, location: str) -> list[ManifestRef]:
        from console import iceberg_avro  # pyiceberg: imported with the first table read

        return [ManifestRef(*m) for m in iceberg_avro.manifest_list(location, self.files.read(location))]

    def _rows(self, refs: Iterable[ManifestRef], positions: Mapping[int, int | None]) -> dict[int, int]:
        """Live rows per Iceberg hour of a snapshot's data manifests ``refs``."""
        from console import iceberg_avro

        total: dict[int, int] = {}
        for ref in refs:
            if ref.content != DATA:
                continue
            if ref.spec_id not in positions:
                raise TableError(f"manifest {ref.location} has partition spec {ref.spec_id}, which the metadata lacks")
            if positions[ref.spec_id] is None:
                raise TableError(f"partition spec {ref.spec_id} has no hours() field: its rows have no event hour")
            counted = self._manifests.get(ref.location)
            if counted is None:
                entries = [EntryRow(*e) for e in iceberg_avro.manifest_entries(ref.handle, self.files.read)]
                counted = self._manifests[ref.location] = live_rows(entries, positions[ref.spec_id])
            for hour, rows in counted.items():
                total[hour] = total.get(hour, 0) + rows
        return total


def one_line(text: str) -> str:
    """The first line of ``text``."""
    return text.strip().splitlines()[0] if text.strip() else text


__all__ = [
    "EntryRow",
    "HistoryFacts",
    "IcebergTables",
    "ManifestRef",
    "TableError",
    "TableReading",
    "current_history",
    "history_facts",
    "hour_positions",
    "live_rows",
    "newest_metadata",
]

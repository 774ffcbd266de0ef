"""The manifest: what one committed run landed, and the offsets that follow from it.

A run's manifest names every Parquet file it published (with sizes and row counts),
the offset range it read per topic-partition (with row counts), rows per topic and
event hour (for the audit), retention gaps it skipped, and ``offsets``: the full map
of next offsets to read for every topic-partition ever landed, carried forward from the
previous manifest. So the latest manifest alone says where the next run starts, and
committing a manifest is the single step that advances offsets and makes its files
part of the output (see :mod:`hadoop_loader.store`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from broker.common.lake import MANIFEST_FORMAT as FORMAT
from hadoop_loader.errors import Gap, StateError
from hadoop_loader.identity import IdentityRange


@dataclass(frozen=True)
class RangeEntry:
    """Offsets ``[start, end)`` of one topic-partition landed by the run."""

    topic: str
    partition: int
    start: int
    end: int
    rows: int
    duplicates: int = 0
    """Rows read from the range and dropped as copies of rows already landed (dedup)."""


@dataclass(frozen=True)
class FileEntry:
    """One Parquet file of the run."""

    path: str
    """Final location, relative to the output root (``topic=a/dt=.../hr=../r...parquet``)."""
    staged: str
    """Where Spark wrote it, relative to the run's staging data directory."""
    size: int
    rows: int
    origin: int | None = None
    """The run whose offsets the rows come from, for a file landed again by a repair
    (None: this manifest's own run)."""


@dataclass(frozen=True)
class Repair:
    """One group of files landed again: run ``origin``'s rows of ``directory``
    (``topic=/dt=/hr=``), replacing ``replaced`` (paths relative to the output root)."""

    origin: int
    directory: str
    replaced: tuple[str, ...]
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "directory": self.directory, "replaced": list(self.replaced), "rows": self.rows}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Repair:
        return cls(
            int(data["origin"]), str(data["directory"]), tuple(str(p) for p in data["replaced"]), int(data["rows"])
        )


@dataclass
class Manifest:
    """One committed run."""

    sequence: int
    run_id: str
    started_ms: int
    committed_ms: int
    source: str
    """The cluster read (ZooKeeper connect string or broker list)."""
    ranges: list[RangeEntry] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    hours: dict[str, dict[str, int]] = field(default_factory=dict)
    """topic -> ``YYYY-MM-DDTHH`` (event hour, in the output's time zone) -> rows."""
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    """topic -> partition -> next offset to read, after this run (all topics ever landed)."""
    gaps: list[Gap] = field(default_factory=list)
    undecodable: int = 0
    """Values of decoded topics that were not agent records (kept raw)."""
    duplicates: dict[str, dict[str, int]] = field(default_factory=dict)
    """topic -> event hour -> rows dropped by dedup as copies of rows already landed."""
    identities: list[IdentityRange] = field(default_factory=list)
    """Record identities this run landed, as ranges per file generation (dedup's state)."""
    repairs: list[Repair] = field(default_factory=list)
    """Groups of files landed again by ``logferry load --repair`` (a repair run reads no
    new offsets: its ``offsets`` are the previous manifest's)."""

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.ranges)

    def to_json(self) -> bytes:
        data = {
            "format": FORMAT,
            "sequence": self.sequence,
            "run_id": self.run_id,
            "started_ms": self.started_ms,
            "committed_ms": self.committed_ms,
            "source": self.source,
            "ranges": [{k: v for k, v in r.__dict__.items() if k != "duplicates" or v} for r in self.ranges],
            "files": [{k: v for k, v in f.__dict__.items() if k != "origin" or v is not None} for f in self.files],
            "hours": self.hours,
            "offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.offsets.items())},
            "gaps": [g.to_json() for g in self.gaps],
            "undecodable": self.undecodable,
        }
        if self.duplicates:
            data["duplicates"] = self.duplicates
        if self.identities:
            data["identities"] = [list(r) for r in self.identities]
        if self.repairs:
            data["repairs"] = [r.to_json() for r in self.repairs]
        return (json.dumps(data, indent=1, sort_keys=False) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Manifest:
        """Parse a manifest; a malformed one is a :class:`StateError` naming ``where``."""
        try:
            data: dict[str, Any] = json.loads(raw)
            if data.get("format") != FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
            return cls(
                sequence=int(data["sequence"]),
                run_id=str(data["run_id"]),
                started_ms=int(data["started_ms"]),
                committed_ms=int(data["committed_ms"]),
                source=str(data["source"]),
                ranges=[RangeEntry(**r) for r in data["ranges"]],
                files=[
                    FileEntry(**{k: v for k, v in f.items() if k != "origin" or v is not None}) for f in data["files"]
                ],
                hours={t: {h: int(n) for h, n in hs.items()} for t, hs in data["hours"].items()},
                offsets={t: {int(p): int(o) for p, o in ps.items()} for t, ps in data["offsets"].items()},
                gaps=[Gap(**g) for g in data.get("gaps", [])],
                undecodable=int(data.get("undecodable", 0)),
                duplicates={t: {h: int(n) for h, n in hs.items()} for t, hs in data.get("duplicates", {}).items()},
                identities=[
                    IdentityRange(str(t), None if h is None else str(h), int(f), int(lo), int(hi))
                    for t, h, f, lo, hi in data.get("identities", [])
                ],
                repairs=[Repair.from_json(r) for r in data.get("repairs", [])],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(
                f"manifest {where} is malformed ({exc}); it was written by another program or edited by hand"
            ) from None


def next_offsets(previous: dict[str, dict[int, int]], ranges: list[RangeEntry]) -> dict[str, dict[int, int]]:
    """The offsets after a run: the previous map with each landed range's end applied."""
    out = {t: dict(ps) for t, ps in previous.items()}
    for r in ranges:
        out.setdefault(r.topic, {})[r.partition] = r.end
    return out

"""The lake's truth: what earlier runs landed, checked against their manifests.

Every run starts by checking each file the committed manifests name (less the files a
later repair replaced): it must be there, have the manifest's size, end in a readable
Parquet footer, and that footer must count the manifest's rows. Cost: one recursive
listing of the output plus, per file, two small reads at its end (the 8-byte tail and
the footer itself); data pages are never read, so a file whose pages were damaged
behind an intact footer is not found here (Parquet's page checksums find it on read).

Runs of one process (``logferry load --every``) share a
:class:`~hadoop_loader.lake_cache.LakeCache`: a manifest or footer read once is not read
again while the listing shows its file with the same size and modification time, so a
run's cost after the first is one recursive listing plus the manifests and footers of files new
or changed since (what that trusts: :mod:`hadoop_loader.lake_cache`).

The rows counted from the footers are what the audit compares (:mod:`hadoop_loader.audit`):
the lake's content, not the manifests' claims (a cached count is the footer's count). A
damaged or missing file is a :class:`Damage`, reported with its path and what was
expected and found; ``logferry load --repair`` lands its rows again
(:mod:`hadoop_loader.repair`).

:func:`footer_rows`, :func:`judge` and :func:`expected_files` are sans-IO (callbacks
and manifests in, facts out); :func:`verify_lake` and :func:`verify_store` do the I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from hadoop_loader.fs import FileSystem, join
from hadoop_loader.lake_cache import LakeCache, ReadCache, Stamp
from hadoop_loader.manifest import FileEntry, Manifest
from hadoop_loader.store import LandingStore

MAGIC = b"PAR1"
TAIL = 8
"""A Parquet file ends in the footer's length (4 bytes, little endian) and ``PAR1``."""


class FooterError(Exception):
    """The file does not end in a readable Parquet footer (the reason is the message)."""


def footer_rows(read: Callable[[int, int], bytes], size: int) -> int:
    """Rows a Parquet file of ``size`` bytes holds, from its footer alone.

    ``read(offset, length)`` reads bytes of the file. Raises :class:`FooterError` when
    the file is too short, lacks the magic, or the footer does not parse.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if size < len(MAGIC) + TAIL:
        raise FooterError(f"{size} bytes is too short for a Parquet file")
    tail = read(size - TAIL, TAIL)
    if len(tail) != TAIL or tail[4:] != MAGIC:
        raise FooterError("no Parquet footer at the end (truncated or overwritten?)")
    length = int.from_bytes(tail[:4], "little")
    if length <= 0 or length > size - len(MAGIC) - TAIL:
        raise FooterError(f"footer length {length} does not fit in {size} bytes")
    footer = read(size - TAIL - length, length)
    if len(footer) != length:
        raise FooterError("the footer could not be read whole")
    try:
        meta = pq.read_metadata(pa.BufferReader(MAGIC + footer + tail))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise FooterError(f"the footer does not parse ({exc})") from None
    return int(meta.num_rows)


@dataclass(frozen=True)
class Expected:
    """A file the committed manifests say is in the lake."""

    run: int
    """The manifest naming it."""
    entry: FileEntry

    @property
    def origin(self) -> int:
        """The run whose offsets its rows come from (a repair keeps the original's)."""
        return self.entry.origin if self.entry.origin is not None else self.run


def expected_files(manifests: Iterable[Manifest]) -> list[Expected]:
    """Every file of the committed ``manifests`` (any order) except those a later repair
    replaced, sorted by path."""
    ordered = sorted(manifests, key=lambda m: m.sequence)
    replaced = {p for m in ordered for r in m.repairs for p in r.replaced}
    return sorted(
        (Expected(m.sequence, f) for m in ordered for f in m.files if f.path not in replaced),
        key=lambda e: e.entry.path,
    )


def directory_of(path: str) -> str:
    """``topic=a/dt=2024-03-01/hr=07`` of a landed file's relative path."""
    return path.rpartition("/")[0]


def topic_hour(path: str) -> tuple[str, str]:
    """(topic, ``YYYY-MM-DDTHH``) of a landed file, from its directories."""
    parts = dict(p.split("=", 1) for p in directory_of(path).split("/") if "=" in p)
    return unquote(parts.get("topic", "")), f"{unquote(parts.get('dt', ''))}T{unquote(parts.get('hr', ''))}"


@dataclass(frozen=True)
class Damage:
    """A landed file that is missing or does not match its manifest."""

    run: int
    path: str
    origin: int
    expected_size: int
    found_size: int | None
    """None: the file is missing."""
    expected_rows: int
    found_rows: int | None
    """None: missing, or no readable footer."""
    reason: str

    @property
    def directory(self) -> str:
        return directory_of(self.path)

    def describe(self) -> str:
        """One line: path, run, what was expected and what was found."""
        found = (
            "missing"
            if self.found_size is None
            else f"found {self.found_size:,} bytes, "
            + ("no readable footer" if self.found_rows is None else f"{self.found_rows:,} rows")
        )
        return (
            f"{self.path} (run {self.run}): expected {self.expected_size:,} bytes, "
            f"{self.expected_rows:,} rows; {found}: {self.reason}"
        )


def judge(expected: Expected, found_size: int | None, count: Callable[[], int]) -> tuple[int, Damage | None]:
    """Rows really in one file, and its :class:`Damage` if it does not match.

    ``count()``: the rows its footer counts (:func:`footer_rows`, or a cached count),
    raising :class:`FooterError` when it has no readable footer; not called for a
    missing file.
    """
    e = expected.entry

    def damage(rows: int | None, reason: str) -> Damage:
        return Damage(expected.run, e.path, expected.origin, e.size, found_size, e.rows, rows, reason)

    if found_size is None:
        return 0, damage(None, "the file is gone")
    try:
        rows = count()
    except FooterError as exc:
        return 0, damage(None, str(exc))
    if found_size != e.size:
        return rows, damage(rows, "the size differs from the manifest")
    if rows != e.rows:
        return rows, damage(rows, "the row count differs from the manifest")
    return rows, None


@dataclass
class LakeCheck:
    """What :func:`verify_lake` found."""

    files: int = 0
    """Files the manifests name (less replaced ones), all checked."""
    rows: int = 0
    """Rows really in them (from their footers)."""
    damaged: list[Damage] = field(default_factory=list)
    landed: dict[tuple[str, str], int] = field(default_factory=dict)
    """(topic, event hour) -> rows really there."""
    footers_read: int = 0
    """Footers read by this check; the other files' counts came from the cache (their
    listing unchanged: :mod:`hadoop_loader.lake_cache`)."""
    manifests_read: int = 0
    """Manifests :func:`verify_store` read; the others came from the cache."""

    @property
    def ok(self) -> bool:
        return not self.damaged


def verify_lake(
    fs: FileSystem,
    root: str,
    manifests: Iterable[Manifest],
    footers: ReadCache[int] | None = None,
    listed: Mapping[str, Stamp] | None = None,
) -> LakeCheck:
    """Check every landed file of ``manifests`` under ``root`` (one listing, footers only).

    ``footers``: the counts of footers read by earlier checks of this process (updated
    here); None reads every footer. ``listed``: the listing of ``root`` (:func:`listing`)
    when the caller made it already; None lists here.
    """
    footers = footers if footers is not None else ReadCache()
    reads = footers.reads
    listed = listed if listed is not None else listing(fs, root)
    check = LakeCheck()
    present = set()
    for expected in expected_files(manifests):
        uri = join(root, expected.entry.path)
        stamp = listed.get(uri)
        if stamp is not None:
            present.add(uri)
        # not listed: under another form of the URI, or really missing (then no stamp, no cache)
        size = stamp.size if stamp is not None else fs.size(uri)
        read = functools.partial(footer_rows, functools.partial(fs.read_range, uri), size or 0)
        rows, damage = judge(expected, size, functools.partial(footers.get, uri, stamp, read))
        check.files += 1
        check.rows += rows
        key = topic_hour(expected.entry.path)
        check.landed[key] = check.landed.get(key, 0) + rows
        if damage is not None:
            check.damaged.append(damage)
    footers.keep_only(present)
    check.footers_read = footers.reads - reads
    return check


def listing(fs: FileSystem, root: str) -> dict[str, Stamp]:
    """Every file below ``root`` with what tells it unchanged (size, modification time)."""
    return {f.uri: Stamp(f.size, f.mtime_ns) for f in fs.list_files(root)}


def verify_store(store: LandingStore, cache: LakeCache | None = None) -> tuple[list[Manifest], LakeCheck]:
    """A run's verify step: the committed manifests, and :func:`verify_lake` of them.

    ``cache``: what earlier runs of this process read (updated here); None reads every
    manifest and footer.
    """
    cache = cache if cache is not None else LakeCache()
    reads = cache.manifests.reads
    listed = listing(store.fs, store.root)  # the manifests too: they are below the root
    manifests = []
    for sequence in store.committed():
        uri = store.manifest_uri(sequence)
        manifests.append(cache.manifests.get(uri, listed.get(uri), functools.partial(store.read_manifest, sequence)))
    cache.manifests.keep_only(listed)
    check = verify_lake(store.fs, store.root, manifests, cache.footers, listed)
    check.manifests_read = cache.manifests.reads - reads
    return manifests, check

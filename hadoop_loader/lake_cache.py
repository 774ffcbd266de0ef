"""What a process already read of the lake, kept while the listing shows it unchanged.

Each Parquet run starts with the verify step (:func:`hadoop_loader.verify.verify_store`):
it reads every committed manifest and every landed file's Parquet footer.
``logferry load --every 5m`` would do so every few minutes, a cost that grows with the
lake until it exceeds the interval. A :class:`LakeCache` lives as long as the loop's
process and remembers, per file, what was read from it (a manifest, a footer's row
count) with the :class:`Stamp` (size, modification time) the run's listing showed
then. A later run whose listing shows the same stamp takes the fact from here instead
of reading the file again; any other stamp (the file rewritten, truncated, appended to,
touched) reads it again. Missing files and size changes are still found every run from
its listings: the cache only spares the reads of files the listing says are as they
were.

What it trusts: that a file whose size and modification time are unchanged holds what
it held. Bytes overwritten in place with the same size and the old modification time
set back (deliberate tampering) are missed until the process restarts: the cache is in
memory only, never written to the lake, so a new process, and every nightly run (a
process of its own), reads everything again. Only successful reads are kept: a file
without a readable footer is read again by every run until it is repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from hadoop_loader.manifest import Manifest

T = TypeVar("T")


class Stamp(NamedTuple):
    """What a listing shows of a file, enough to tell that it changed."""

    size: int
    mtime_ns: int


class ReadCache(Generic[T]):
    """Facts read from files, by file URI and the stamp listed when they were read."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Stamp, T]] = {}
        self.reads = 0
        """Calls of ``read`` so far (the files really read)."""

    def __len__(self) -> int:
        return len(self._known)

    def get(self, uri: str, stamp: Stamp | None, read: Callable[[], T]) -> T:
        """What ``uri`` holds: from the cache when ``stamp`` is the one listed when it
        was last read; otherwise ``read()``, kept under ``stamp`` when it succeeds (an
        exception passes and nothing is kept). ``stamp`` None (the file was not in the
        listing) always reads. A file changed between its listing and its read is kept
        under the older stamp, so the next listing (the newer one) reads it again.
        """
        known = self._known.get(uri)
        if stamp is not None and known is not None and known[0] == stamp:
            return known[1]
        self._known.pop(uri, None)
        self.reads += 1
        value = read()
        if stamp is not None:
            self._known[uri] = (stamp, value)
        return value

    def keep_only(self, uris: Collection[str]) -> None:
        """Forget every file but ``uris`` (the expected files the listing shows): one
        replaced by a repair or gone is dropped, so the cache holds at most the lake."""
        for uri in [u for u in self._known if u not in uris]:
            del self._known[uri]


@dataclass
class LakeCache:
    """What the runs of one process read of one output (``--every``)."""

    manifests: ReadCache[Manifest] = field(default_factory=ReadCache)
    """Committed manifests, parsed (shared: treat them as read-only)."""
    footers: ReadCache[int] = field(default_factory=ReadCache)
    """Landed files' footers: the rows each counts."""

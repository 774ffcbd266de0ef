"""Footers already read: a landed file's row count, kept while its listing is unchanged.

Verification (:mod:`hadoop_loader.verify`) reads each landed file's Parquet footer.
``logferry load --every 5m`` would read every footer of the lake every few minutes, a
cost that grows with the lake until it exceeds the interval. A :class:`FooterCache`
lives as long as the loop's process and remembers, per file, the row count its footer
gave and the :class:`Stamp` (size, modification time) the run's listing showed for it.
A later run whose listing shows the same stamp takes the count from here instead of
reading the footer again; any other stamp (the file rewritten, truncated, appended to,
touched) reads it again. Missing files and size changes are still found every run from
the one listing: the cache only spares the reads of files the listing says are as they
were.

What it trusts: that a file whose size and modification time are unchanged has the
footer it had. A file overwritten in place with the same size and its old modification
time set back (deliberate tampering, or a clock reset in the same tick) is missed until
the process restarts: the cache is in memory only, so a new process, and every nightly
run (a process of its own), reads every footer again. Only successful reads are kept: a
file without a readable footer is read again by every run until it is repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple


class Stamp(NamedTuple):
    """What a listing shows of a file, enough to tell that it changed."""

    size: int
    mtime_ns: int


class FooterCache:
    """Row counts of footers read, by file URI and the stamp listed when they were read."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Stamp, int]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def rows(self, uri: str, stamp: Stamp | None, read: Callable[[], int]) -> int:
        """The rows the footer of ``uri`` counts.

        From the cache when ``stamp`` is the one listed when the footer was last read;
        otherwise ``read()``, kept under ``stamp`` when it succeeds (it raises
        :class:`~hadoop_loader.verify.FooterError` for a damaged file: nothing is kept
        then). ``stamp`` None (the file was not in the listing) always reads. A file
        changed between its listing and its read is kept under the older stamp, so the
        next listing (the newer one) reads it again.
        """
        known = self._known.get(uri)
        if stamp is not None and known is not None and known[0] == stamp:
            return known[1]
        self._known.pop(uri, None)
        rows = read()
        if stamp is not None:
            self._known[uri] = (stamp, rows)
        return rows

    def keep_only(self, uris: Collection[str]) -> None:
        """Forget every file but ``uris`` (the expected files the listing shows): one
        replaced by a repair or gone is dropped, so the cache holds at most the lake."""
        for uri in [u for u in self._known if u not in uris]:
            del self._known[uri]

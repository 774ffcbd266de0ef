"""Landed record identities as ranges: the state of the loader's dedup (sans-IO).

An agent record is identified by ``(host, fid, offset)`` (docs/agent.md, "Identity";
landed as ``host``, ``file_id``, ``file_offset``), and by its topic. The agent sends the
lines of one file generation in order and re-sends only from its checkpoint, and every
later stage keeps order within a partition, so the lines of one file generation that a
run lands from one partition are every line between the lowest and the highest offset
it landed. A run's identities are therefore a few ranges: per topic, partition, host and
file id, ``[lo, hi]`` of ``file_offset``. A row whose offset falls in a range landed
earlier is a copy of a landed row.

Ranges live in the run's manifest (committed with it, so the dedup state moves exactly
once with the offsets) and are read back from the manifests of the last
``dedup.keep_hours``: that bounds the state (one range per file generation and
partition per run) and is how late a copy can arrive and still be recognised.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class IdentityRange(NamedTuple):
    """Landed offsets ``[lo, hi]`` (both inclusive) of one file generation in one topic."""

    topic: str
    host: str | None
    file_id: int
    lo: int
    hi: int


def merge_ranges(ranges: Iterable[IdentityRange]) -> list[IdentityRange]:
    """Overlapping ranges of the same file generation merged into one, sorted.

    Lookups join a row with at most one range this way (ranges that only touch are
    kept apart: byte offsets do not say whether lines lie between them).
    """
    out: list[IdentityRange] = []
    key = None
    for r in sorted(ranges, key=lambda r: (r.topic, r.host or "", r.host is None, r.file_id, r.lo, r.hi)):
        this = (r.topic, r.host, r.file_id)
        if out and this == key and r.lo <= out[-1].hi:
            last = out[-1]
            out[-1] = last._replace(hi=max(last.hi, r.hi))
        else:
            out.append(r)
            key = this
    return out


def ranges_to_keep(manifests: Iterable[object], since_ms: int) -> list[IdentityRange]:
    """Identity ranges of the manifests committed at or after ``since_ms`` (newest first,
    the walk stops at the first older one), merged."""
    found: list[IdentityRange] = []
    for m in manifests:
        # getattr, not m.committed_ms: the manifests are typed `object` here
        if getattr(m, "committed_ms") < since_ms:  # noqa: B009
            break
        found.extend(getattr(m, "identities"))  # noqa: B009
    return merge_ranges(found)


def is_landed(ranges: list[IdentityRange], topic: str, host: str | None, file_id: int, offset: int) -> bool:
    """Whether a record's identity falls in one of ``ranges`` (the rule the Spark job
    applies as a join; here for tests and small checks)."""
    return any(r.topic == topic and r.host == host and r.file_id == file_id and r.lo <= offset <= r.hi for r in ranges)

"""Where a partition's copy resumes, from the target's and the source's ends (sans IO).

The offset-preserving mirror resumes at the target's log end, after checking that the
target is still a copy of the source:

* an empty target never written (end 0) starts where ``start`` says on the source
  (its log start for ``earliest``: possibly past 0, retention on the source);
* an empty target emptied by its own retention resumes at its end, or, if the source
  no longer has that offset, at the source's log start only with ``on_gap = "skip"``;
* a non-empty target must end inside the source's log (else the source lost the bytes
  after it, or the target holds bytes the source never had), and its last batch must
  be the source's batch at that offset, byte for byte (compared by length and crc32 of
  all its bytes); when the source deleted that batch already, the end must at least be
  a batch boundary of the source.

Anything else is a divergence: the partition stops and the reason is reported.
"""

from __future__ import annotations

from typing import NamedTuple


class TargetEnd(NamedTuple):
    """What the target leader said (an append-at query's answer)."""

    start: int
    end: int
    last: int
    """Offset of its last batch (-1: empty)."""
    last_len: int
    last_crc: int


class Plan(NamedTuple):
    """The resume decision, before the source batch check (if any)."""

    position: int
    """Source offset to copy from (= the target's end, unless an empty target starts)."""
    start_flag: bool
    """The first append may start the empty target log at ``position``."""
    verify_last: bool
    """Compare the target's last batch with the source's batch at ``TargetEnd.last``."""
    check_boundary: bool
    """``position`` must be a batch boundary of the source (fetch there to check)."""
    diverged: str | None
    """Why the partition must stop (then the other fields do not matter)."""


def plan_resume(
    target: TargetEnd, source_start: int, source_end: int, start: str = "earliest", on_gap: str = "stop"
) -> Plan:
    """Decide where to resume; see the module docstring."""
    if target.end == target.start:  # empty
        if target.end == 0:
            position = source_start if start == "earliest" else source_end
            return Plan(position, position != 0, False, False, None)
        if source_start <= target.end <= source_end:
            return Plan(target.end, False, False, target.end < source_end, None)
        if target.end < source_start and on_gap == "skip":
            return Plan(source_start, True, False, False, None)
        return Plan(target.end, False, False, False, _outside(target.end, source_start, source_end, empty=True))
    if not source_start <= target.end <= source_end:
        return Plan(target.end, False, False, False, _outside(target.end, source_start, source_end, empty=False))
    if target.last >= source_start:
        return Plan(target.end, False, True, False, None)
    return Plan(target.end, False, False, target.end < source_end, None)


def _outside(end: int, source_start: int, source_end: int, empty: bool) -> str:
    if end < source_start:
        return (
            f"the target ends at {end} but the source's log now starts at {source_start}: "
            f"retention on the source deleted {source_start - end} bytes the target never "
            "got" + (' (on_gap = "skip" restarts an empty target there)' if empty else "")
        )
    return (
        f"the target ends at {end}, past the source's end {source_end}: the target holds "
        "bytes the source does not have (written by someone else, or the source lost them)"
    )


def batch_differs(target: TargetEnd, source_batch: bytes | memoryview | None) -> str | None:
    """Why the source's batch at ``target.last`` is not the target's last batch (None: same)."""
    import zlib

    if source_batch is None:
        return (
            f"offset {target.last} (the target's last batch) is no batch of the source: the "
            "target was written by someone else"
        )
    if len(source_batch) != target.last_len or zlib.crc32(source_batch) != target.last_crc:
        return (
            f"the target's last batch at offset {target.last} ({target.last_len} bytes) "
            f"differs from the source's batch there ({len(source_batch)} bytes): the target "
            "was written by someone else"
        )
    return None


__all__ = ["Plan", "TargetEnd", "batch_differs", "plan_resume"]

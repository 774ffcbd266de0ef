"""Where a returning replica's log parts from its leader's (sans IO).

A replica that was away (crashed, paused, demoted) may hold batches past the high
watermark that the new leader never got: they were never acknowledged with acks=all
and must go, or the replicas would differ. Below the high watermark every in-sync
replica holds the same bytes, so the follower compares its log with the leader's
from its last known high watermark on, batch by batch, and truncates at the first
batch that differs or that the leader does not have. Comparing bytes (instead of
trusting a possibly stale high watermark) keeps every batch the leader does have:
truncating to a stale watermark and then losing the leader would lose acknowledged
messages (the case Kafka's KIP-101 fixed with leader epochs).
"""

from __future__ import annotations

import struct

from broker.wire.records import LENGTH_SIZE

_length = struct.Struct(">I").unpack_from


def matching_prefix(leader: bytes | memoryview, local: bytes | memoryview) -> tuple[int, bool]:
    """Compare whole batches of ``leader`` with ``local`` from the same offset.

    Returns ``(matched, diverged)``: ``matched`` bytes (a whole number of batches)
    are identical in both; ``diverged`` is True when a whole leader batch differs
    from the local bytes there, or the local log has bytes where the leader's data
    ends. When neither is known yet (the leader's data ran out inside a batch, or the
    local log ended first) ``diverged`` is False.
    """
    leader = memoryview(leader)
    local = memoryview(local)
    pos = 0
    end = len(leader)
    while end - pos >= LENGTH_SIZE:
        stop = pos + LENGTH_SIZE + _length(leader, pos)[0]
        if stop > end:
            return pos, False  # leader's slice ends inside a batch: fetch on from pos
        if stop > len(local):
            # The local log ends inside (or at the start of) this batch: a partial
            # local batch means divergence; none at all means local is a prefix.
            return pos, pos < len(local)
        if leader[pos:stop] != local[pos:stop]:
            return pos, True
        pos = stop
    return pos, False


def reconcile_step(
    offset: int, leader: bytes | memoryview, local: bytes | memoryview, leader_end: int, local_end: int
) -> tuple[int, bool]:
    """One comparison of a returning replica's log with its leader's, from ``offset``.

    ``leader`` is the leader's data from ``offset`` (a fetch answer), ``local`` the
    replica's own bytes from there, ``leader_end`` the leader's log end and
    ``local_end`` the replica's. Returns ``(at, done)``: when ``done`` the logs agree
    below ``at`` and part there (the replica cuts what it holds past ``at``, if
    anything, and fetches on from ``at``); otherwise they agree up to ``at`` so far
    and the next comparison starts there.
    """
    matched, diverged = matching_prefix(leader, local)
    at = offset + matched
    done = diverged or (not len(leader) and leader_end <= offset) or at >= local_end
    return at, done


__all__ = ["matching_prefix", "reconcile_step"]

"""The leader's bookkeeping for one partition in one leader epoch (sans IO).

A follower fetching at offset ``o`` says "I have every byte below ``o``": that is its
log end (LEO) as far as the leader knows. From those the leader derives:

* the **replicated end**: the smallest LEO among the in-sync replicas (the leader
  included). An acks=all batch is acknowledged once the replicated end passes it; the
  high watermark (what consumers see) is the replicated end capped by the leader's own
  flushed end, and it never moves back.
* **ISR changes**: a follower leaves the ISR when it has not been caught up for
  ``lag`` seconds, and comes back once its LEO reaches the high watermark. "Caught up"
  follows Kafka's rule: a fetch at or past the leader's end *as of the previous fetch*
  proves the follower was caught up at the time of that previous fetch, so a follower
  that keeps pace with a steady stream of appends counts as caught up even though a
  new batch always lands between its fetches.

Times are plain floats (seconds, monotonic) passed in by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass
class FollowerProgress:
    """What the leader knows about one follower."""

    leo: int
    caught_up_at: float
    last_fetch_at: float
    last_fetch_leader_end: int


class LeaderTracker:
    """Followers' progress, the ISR and the high watermark of a partition this broker leads."""

    def __init__(self, me: int, replicas: Sequence[int], isr: Iterable[int],
                 high_watermark: int, now: float):
        self.me = me
        self.isr: tuple[int, ...] = tuple(isr)
        self.high_watermark = high_watermark
        # A follower not heard from yet is assumed to hold the high watermark (every
        # ISR member does) and to have been caught up now: it has ``lag`` to fetch. It
        # has not fetched in this epoch, so it cannot rejoin the ISR before it does.
        self.followers = {r: FollowerProgress(high_watermark, now, float("-inf"),
                                              high_watermark)
                          for r in replicas if r != me}

    def record_fetch(self, follower: int, offset: int, leader_end: int, now: float) -> bool:
        """Note a fetch by ``follower`` at ``offset``; True if its LEO grew."""
        progress = self.followers.get(follower)
        if progress is None:
            return False
        if offset >= leader_end:
            progress.caught_up_at = now
        elif offset >= progress.last_fetch_leader_end:
            progress.caught_up_at = max(progress.caught_up_at, progress.last_fetch_at)
        progress.last_fetch_at = now
        progress.last_fetch_leader_end = leader_end
        if offset > progress.leo:
            progress.leo = offset
            return True
        return False

    def replicated_end(self, leader_end: int) -> int:
        """The smallest log end among the ISR (the leader's own is ``leader_end``)."""
        end = leader_end
        for r in self.isr:
            progress = self.followers.get(r)
            if progress is not None and progress.leo < end:
                end = progress.leo
        return end

    def advance_high_watermark(self, leader_end: int, flushed_end: int) -> bool:
        """Recompute the high watermark; True if it moved forward."""
        hw = min(self.replicated_end(leader_end), flushed_end)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def proposed_isr(self, now: float, lag: float) -> tuple[int, ...] | None:
        """The ISR the leader should write, or None when it is right as it is."""
        isr = []
        for r in self.isr:
            progress = self.followers.get(r)
            if r == self.me or progress is None or now - progress.caught_up_at <= lag:
                isr.append(r)
        for r, progress in sorted(self.followers.items()):
            if r not in self.isr and progress.leo >= self.high_watermark \
                    and now - progress.last_fetch_at <= lag:
                isr.append(r)
        if self.me not in isr:
            isr.insert(0, self.me)
        new = tuple(isr)
        return None if set(new) == set(self.isr) else new

    def set_isr(self, isr: tuple[int, ...]) -> None:
        """Adopt an ISR written elsewhere (the controller dropped a dead follower). A
        follower taken out must fetch again before it may come back."""
        for r in set(self.isr) - set(isr):
            progress = self.followers.get(r)
            if progress is not None:
                progress.last_fetch_at = float("-inf")
        self.isr = tuple(isr)

    def lag_bytes(self, leader_end: int) -> dict[int, int]:
        """Bytes each follower is behind the leader's end."""
        return {r: max(leader_end - p.leo, 0) for r, p in self.followers.items()}


__all__ = ["FollowerProgress", "LeaderTracker"]

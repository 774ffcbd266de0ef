"""The leader's bookkeeping for one partition in one leader epoch (sans IO).

A follower fetching at offset ``o`` says "I have every byte below ``o``", and no more
than that: ``o`` becomes its log end (LEO) as far as the leader knows, also when it is
lower than before (a follower that lost an unflushed tail and came back).

* The **ack set** is the committed ISR (as last written to or read from ZooKeeper)
  plus every follower the leader has decided to add but whose addition is not known
  to be committed: *joining* followers, and the members of an ISR write whose
  outcome is not known yet. This is Kafka's "maximal ISR" (KIP-497): ZooKeeper may
  already name a member that the leader would otherwise not wait for, and any member
  ZooKeeper names may be elected.
* The **replicated end** is the smallest LEO in the ack set (the leader included):
  an acks=all batch is acknowledged once it passes the batch. The high watermark
  (what consumers see) is the replicated end capped by the leader's flushed end, and
  it never moves back.
* **Joining**: a follower outside the ack set joins when a fetch of its reaches the
  replicated end, and the leader's log end at the start of its epoch (Kafka's rule in
  ``Partition.isFollowerInSync``: whatever the leader held when it was elected may have been
  acknowledged in an earlier epoch, and the ISR members' ends are not known yet, only
  assumed to be the high watermark, which a leader restarted after kill -9 knows only
  up to its flushed end). That is checked at the fetch, when no acknowledgement can
  slip in between, and from then on the follower counts for acks; so when ZooKeeper
  names it, it holds every acknowledged batch. (Comparing with the high watermark
  instead would be wrong here: it lags the replicated end by the leader's unflushed
  bytes.)
* **Leaving**: a committed member leaves when it has not been caught up for ``lag``
  seconds. "Caught up" follows Kafka's rule: a fetch at or past the leader's end *as
  of the previous fetch* proves the follower was caught up at the time of that
  previous fetch, so a follower that keeps pace with a steady stream of appends counts
  as caught up even though a new batch always lands between its fetches. A joining
  follower that stalls for ``lag`` stops joining (ZooKeeper never heard of it).

Times are plain floats (seconds, monotonic) passed in by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass
class FollowerProgress:
    """What the leader knows about one follower."""

    leo: int
    caught_up_at: float
    last_fetch_at: float
    last_fetch_leader_end: int


class LeaderTracker:
    """Followers' progress, the ISR and the high watermark of a partition this broker leads."""

    def __init__(
        self,
        me: int,
        replicas: Sequence[int],
        isr: Iterable[int],
        high_watermark: int,
        now: float,
        epoch_start: int = 0,
    ):
        self.me = me
        self.epoch_start = epoch_start
        """The leader's log end when it became leader: no follower joins below it."""
        self.isr: tuple[int, ...] = tuple(isr)
        """The committed ISR: as last written to or read from ZooKeeper."""
        self.joining: set[int] = set()
        """Followers that caught up and count for acks, not yet written as in sync."""
        self.proposal: tuple[int, ...] | None = None
        """An ISR write in flight or of unknown outcome; its members count for acks."""
        self.proposal_base = -1
        """The state znode version that write was conditional on."""
        self.high_watermark = high_watermark
        # A follower not heard from yet is assumed to hold the high watermark (every
        # ISR member does) and to have been caught up now: it has ``lag`` to fetch. It
        # has not fetched in this epoch, so it cannot join before it does.
        self.followers = {
            r: FollowerProgress(high_watermark, now, float("-inf"), high_watermark) for r in replicas if r != me
        }

    def ack_set(self) -> set[int]:
        """Every replica an acks=all batch must reach (see the module docstring)."""
        members = set(self.isr) | self.joining | {self.me}
        if self.proposal is not None:
            members.update(self.proposal)
        return members

    def record_fetch(self, follower: int, offset: int, leader_end: int, now: float) -> bool:
        """Note a fetch by ``follower`` at ``offset``; True if the replicated end may
        have grown."""
        progress = self.followers.get(follower)
        if progress is None:
            return False
        if offset >= leader_end:
            progress.caught_up_at = now
        elif offset >= progress.last_fetch_leader_end:
            progress.caught_up_at = max(progress.caught_up_at, progress.last_fetch_at)
        progress.last_fetch_at = now
        progress.last_fetch_leader_end = leader_end
        grew = offset > progress.leo
        progress.leo = offset
        if follower not in self.ack_set() and offset >= max(self.replicated_end(leader_end), self.epoch_start):
            self.joining.add(follower)  # from now on acks wait for it too
            progress.caught_up_at = now
        return grew

    def replicated_end(self, leader_end: int) -> int:
        """The smallest log end in the ack set (the leader's own is ``leader_end``)."""
        end = leader_end
        for r in self.ack_set():
            progress = self.followers.get(r)
            if progress is not None and progress.leo < end:
                end = progress.leo
        return end

    def advance_high_watermark(self, leader_end: int, publishable_end: int) -> bool:
        """Recompute the high watermark: what every in-sync replica has, and the leader
        may publish by its visibility rule (flushed, or written); True if it moved."""
        hw = min(self.replicated_end(leader_end), publishable_end)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def _caught_up(self, r: int, now: float, lag: float) -> bool:
        progress = self.followers.get(r)
        return r == self.me or progress is None or now - progress.caught_up_at <= lag

    def proposed_isr(self, now: float, lag: float) -> tuple[int, ...] | None:
        """The ISR the leader should write, or None when it is right as it is (or a
        write is still unsettled). Joining followers that stalled stop joining."""
        if self.proposal is not None:
            return None
        self.joining = {r for r in self.joining if self._caught_up(r, now, lag)}
        isr = [r for r in self.isr if self._caught_up(r, now, lag)]
        isr += sorted(self.joining - set(isr))
        if self.me not in isr:
            isr.insert(0, self.me)
        new = tuple(isr)
        return None if set(new) == set(self.isr) else new

    def begin_write(self, isr: tuple[int, ...], base_version: int) -> None:
        """An ISR write conditional on ``base_version`` is on its way."""
        self.proposal = tuple(isr)
        self.proposal_base = base_version

    def adopt(self, isr: Iterable[int], version: int, read_after_write: bool = False) -> None:
        """Take the ISR of a state read from (or written to) ZooKeeper at ``version``.

        A state newer than the base of the unsettled write settles it: it holds
        whatever that write did. So does one read after the write failed
        (``read_after_write``): if its version is still the base, the write never
        happened. A follower taken out must fetch again before it may come back.
        """
        isr = tuple(isr)
        for r in set(self.isr) - set(isr):
            progress = self.followers.get(r)
            if progress is not None:
                progress.last_fetch_at = float("-inf")
        self.isr = isr
        self.joining -= set(isr)
        if self.proposal is not None and (
            version > self.proposal_base or (read_after_write and version >= self.proposal_base)
        ):
            self.proposal = None

    def set_replicas(self, replicas: Sequence[int], now: float) -> None:
        """The replica list changed (a reassignment): track added followers from
        offset 0 (they join once caught up); forget removed ones, so a late fetch of
        theirs never brings them back into the ISR."""
        for r in replicas:
            if r != self.me and r not in self.followers:
                self.followers[r] = FollowerProgress(0, now, float("-inf"), 0)
        for r in [r for r in self.followers if r not in replicas]:
            del self.followers[r]
            self.joining.discard(r)

    def lag_bytes(self, leader_end: int) -> dict[int, int]:
        """Bytes each follower is behind the leader's end."""
        return {r: max(leader_end - p.leo, 0) for r, p in self.followers.items()}


__all__ = ["FollowerProgress", "LeaderTracker"]

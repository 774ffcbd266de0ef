"""Topics the mirror may not copy for want of an ACL, and when to try them again.

A secured target (or source) refuses a topic whose ACL the mirror's principal lacks
(``TopicAuthorizationFailedError``: produce, create, describe...). That is about one
topic, not the mirror: the copy loops halt that topic only, keep copying the others,
and try the refused one again every ``refused_retry_s``, so an operator's ``logferry acl
add`` resumes it without a restart (docs/security.md, "The mirror and ACLs").

Per topic::

    refuse() ──► REFUSED ──(retry_s later: due())──► PROBING ──(a batch copied: granted())──► gone
                    ▲                                   │
                    └──────────── refuse() ◄────────────┘ (still refused: wait again)

While REFUSED, the loops send nothing of the topic and stop fetching it; while PROBING
they copy it as usual, from where it stopped. Only the first refusal of a topic is news
(the loops log it at ERROR, one line naming principal, operation and topic); repeats
while probing are counted. No IO, no clock of its own: callers pass ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

REFUSED, PROBING = "refused", "probing"


@dataclass
class Refusal:
    """One refused topic."""

    reason: str
    """The broker's message (principal, operation, topic)."""
    since: float
    retry_at: float
    state: str = REFUSED
    attempts: int = 1
    """Refusals so far (the first and every failed probe)."""


class Refusals:
    """Refused topics of one mirror process; see the module docstring."""

    def __init__(self, retry_s: float):
        if retry_s <= 0:
            raise ValueError("retry_s must be positive")
        self.retry_s = retry_s
        self.topics: dict[str, Refusal] = {}

    def refuse(self, topic: str, reason: str, now: float) -> bool:
        """The target refused ``topic``: halt it until ``now + retry_s``. True when this
        is news (the topic was not refused before: log it), False for a failed probe or
        a refusal already known."""
        known = self.topics.get(topic)
        if known is None:
            self.topics[topic] = Refusal(reason, now, now + self.retry_s)
            return True
        if known.state == PROBING:
            known.state, known.retry_at, known.reason = REFUSED, now + self.retry_s, reason
            known.attempts += 1
        return False

    def halted(self, topic: str) -> bool:
        """Whether nothing of ``topic`` is to be sent now."""
        known = self.topics.get(topic)
        return known is not None and known.state == REFUSED

    def due(self, now: float) -> list[str]:
        """Refused topics whose retry time came: now PROBING (copy them again)."""
        out = [t for t, r in self.topics.items() if r.state == REFUSED and r.retry_at <= now]
        for topic in out:
            self.topics[topic].state = PROBING
        return sorted(out)

    def granted(self, topic: str) -> Refusal | None:
        """A batch of ``topic`` sent while PROBING was copied: it is allowed again. The
        refusal it ends (None if the topic was not probing: an answer to a batch sent
        before the refusal proves nothing)."""
        known = self.topics.get(topic)
        if known is None or known.state != PROBING:
            return None
        return self.topics.pop(topic)

    def next_retry(self) -> float | None:
        """The earliest retry time of a REFUSED topic (None: none waits)."""
        times = [r.retry_at for r in self.topics.values() if r.state == REFUSED]
        return min(times) if times else None

    def document(self) -> dict[str, dict[str, object]]:
        """For the status file: topic -> state, reason, refusals, since."""
        return {
            t: {"state": r.state, "reason": r.reason, "refusals": r.attempts, "since": r.since}
            for t, r in sorted(self.topics.items())
        }

    def __len__(self) -> int:
        return len(self.topics)


__all__ = ["PROBING", "REFUSED", "Refusal", "Refusals"]

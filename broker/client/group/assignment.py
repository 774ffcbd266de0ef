"""Who consumes what: partition assignment for consumer groups, without any IO.

Every member of a group runs the same pure function over the same inputs (the
members' subscriptions and the topics' partitions, both read from ZooKeeper) and so
reaches the same answer without talking to the others; that is the paper's rebalance
(section 3.2). Keeping it free of IO makes it exhaustively testable and lets the
coordinator (:mod:`broker.client.group.rebalance`) stay a thin layer of ZooKeeper calls.

Vocabulary:

thread
    ``(consumer id, stream index)``: one consuming stream of one member, the paper's
    "consumer thread". A member subscribed to topic ``t`` with ``n`` streams brings
    threads ``(id, 0) .. (id, n-1)`` to ``t``. Threads sort by id, then by index as a
    number, so ``(a, 10)`` follows ``(a, 9)``.
subscription
    What a member registered: explicit ``{topic: streams}`` or a regular expression
    plus a stream count. :func:`resolve_subscription` turns either into
    ``{topic: streams}`` against the current topic list, so members subscribed by
    pattern are assigned exactly like explicit ones.

Strategies:

``range`` (the paper's)
    Per topic, sort its partitions and the threads subscribed to it; thread ``k`` of
    ``T`` takes a contiguous run of ``P // T`` partitions, the first ``P % T`` threads
    one more. A member's partitions of a topic are adjacent.
``roundrobin``
    Every subscribed ``(topic, partition)`` in sorted order is dealt to the threads in
    sorted cyclic order, skipping threads not subscribed to that topic. With many
    topics of few partitions each it spreads load evenly where ``range`` piles the
    remainders of every topic onto the first threads.

Both are deterministic, give every subscribed partition exactly one thread when any
thread exists, and give a thread nothing of a topic it does not subscribe to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""
Thread = tuple[str, int]
"""``(consumer id, stream index)``."""
Assignment = dict[TopicPartition, Thread]
"""Which thread consumes each partition."""


class Subscription(NamedTuple):
    """What one member asked for, as registered in ZooKeeper."""

    topics: Mapping[str, int] | None
    """Explicit subscription ``{topic: streams}``; None for a pattern subscription."""
    pattern: str | None
    """A regular expression that whole topic names must match; None for explicit."""
    streams: int = 1
    """Streams per matching topic, for a pattern subscription."""

    def to_json(self) -> dict[str, object]:
        """The fields stored in the member's ``ids`` znode."""
        return {
            "subscription": dict(self.topics) if self.topics is not None else None,
            "pattern": self.pattern,
            "streams": self.streams,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Subscription:
        """Parse what :meth:`to_json` wrote; malformed fields give an empty subscription."""
        topics = data.get("subscription")
        pattern = data.get("pattern")
        streams = data.get("streams", 1)
        if not isinstance(streams, int) or streams < 1:
            streams = 1
        if isinstance(topics, dict):
            clean = {str(t): n for t, n in topics.items() if isinstance(n, int) and n > 0}
            return cls(clean, None, streams)
        if isinstance(pattern, str):
            return cls(None, pattern, streams)
        return cls({}, None, streams)


STRATEGIES = ("range", "roundrobin")


def thread_sort_key(thread: Thread) -> tuple[str, int]:
    """Threads sort by consumer id, then numerically by stream index."""
    return thread[0], thread[1]


def resolve_subscription(sub: Subscription, topics: Iterable[str]) -> dict[str, int]:
    """``{topic: streams}`` of ``sub`` against the existing ``topics``.

    An explicit subscription keeps only topics that exist (a topic created later
    triggers another rebalance); a pattern must match the whole name. A pattern that
    is not a valid regular expression matches nothing (the member that registered it
    failed at construction, so this only guards against hand-edited znodes).
    """
    existing = set(topics)
    if sub.topics is not None:
        return {t: n for t, n in sub.topics.items() if t in existing and n > 0}
    try:
        regex = re.compile(sub.pattern or "")
    except re.error:
        return {}
    return {t: sub.streams for t in sorted(existing) if regex.fullmatch(t)}


def threads_per_topic(subscriptions: Mapping[str, Mapping[str, int]]) -> dict[str, list[Thread]]:
    """For each topic, the sorted threads of every member subscribed to it."""
    out: dict[str, list[Thread]] = {}
    for consumer_id, topics in subscriptions.items():
        for topic, streams in topics.items():
            out.setdefault(topic, []).extend((consumer_id, i) for i in range(streams))
    for threads in out.values():
        threads.sort(key=thread_sort_key)
    return out


def range_assign(partitions: Mapping[str, Iterable[int]], subscriptions: Mapping[str, Mapping[str, int]]) -> Assignment:
    """The paper's range assignment (see the module docstring).

    ``partitions`` maps each topic to its partition numbers; ``subscriptions`` maps
    each member id to its resolved ``{topic: streams}``.
    """
    result: Assignment = {}
    for topic, threads in sorted(threads_per_topic(subscriptions).items()):
        parts = sorted(partitions.get(topic, ()))
        if not parts:
            continue
        share, extra = divmod(len(parts), len(threads))
        start = 0
        for k, thread in enumerate(threads):
            count = share + (1 if k < extra else 0)
            for p in parts[start : start + count]:
                result[(topic, p)] = thread
            start += count
    return result


def roundrobin_assign(
    partitions: Mapping[str, Iterable[int]], subscriptions: Mapping[str, Mapping[str, int]]
) -> Assignment:
    """Deal sorted partitions to sorted threads in turn (see the module docstring)."""
    by_topic = threads_per_topic(subscriptions)
    every = sorted({t for threads in by_topic.values() for t in threads}, key=thread_sort_key)
    if not every:
        return {}
    position = {thread: i for i, thread in enumerate(every)}
    result: Assignment = {}
    cursor = 0  # index into `every` of the next thread to deal to
    for topic in sorted(by_topic):
        subscribed = set(by_topic[topic])
        for p in sorted(partitions.get(topic, ())):
            # Next thread at or after the cursor (cyclically) that wants this topic.
            for step in range(len(every)):
                thread = every[(cursor + step) % len(every)]
                if thread in subscribed:
                    break
            result[(topic, p)] = thread
            cursor = (position[thread] + 1) % len(every)
    return result


ASSIGNORS: dict[str, Callable[[Mapping[str, Iterable[int]], Mapping[str, Mapping[str, int]]], Assignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}


def assign(
    strategy: str, partitions: Mapping[str, Iterable[int]], subscriptions: Mapping[str, Mapping[str, int]]
) -> Assignment:
    """Run the named strategy (``range`` or ``roundrobin``)."""
    try:
        assignor = ASSIGNORS[strategy]
    except KeyError:
        raise ValueError(f"assignment strategy must be one of {STRATEGIES}, not {strategy!r}") from None
    return assignor(partitions, subscriptions)


def group_strategy(strategies: Mapping[str, str]) -> str:
    """The strategy the whole group uses: that of the first member by id.

    Members configured differently would otherwise compute different answers and
    wait on each other forever; picking one rule every member can evaluate keeps them
    convergent (and the odd member logs a warning).
    """
    for consumer_id in sorted(strategies):
        if strategies[consumer_id] in ASSIGNORS:
            return strategies[consumer_id]
    return "range"


def member_share(assignment: Assignment, consumer_id: str) -> dict[TopicPartition, int]:
    """The partitions ``consumer_id`` owns in ``assignment``, with their stream index."""
    return {tp: thread[1] for tp, thread in assignment.items() if thread[0] == consumer_id}


class Changes(NamedTuple):
    """How a member's share changes between two assignments."""

    revoked: list[TopicPartition]
    """Owned before, not now: stop, commit, release."""
    gained: list[TopicPartition]
    """Not owned before, owned now: claim, then fetch."""
    moved: list[TopicPartition]
    """Owned in both but by another of the member's streams: hand over locally."""


def diff(current: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int]) -> Changes:
    """Compare a member's share now (``{tp: stream}``) with its target share."""
    revoked = sorted(tp for tp in current if tp not in target)
    gained = sorted(tp for tp in target if tp not in current)
    moved = sorted(tp for tp in target if tp in current and current[tp] != target[tp])
    return Changes(revoked, gained, moved)


__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Changes",
    "STRATEGIES",
    "Subscription",
    "Thread",
    "TopicPartition",
    "assign",
    "diff",
    "group_strategy",
    "member_share",
    "range_assign",
    "resolve_subscription",
    "roundrobin_assign",
    "thread_sort_key",
    "threads_per_topic",
]

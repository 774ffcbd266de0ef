"""Who owns a group's partitions, read from ZooKeeper once and again only when it changes.

A dashboard that describes a group every second read every ownership znode every
second: 500 partitions cost 500 ZooKeeper reads a second (about 60 ms of the
dashboard's CPU and work for the ZooKeeper server), although owners change only when
the group rebalances. Ownership znodes are ephemeral and are only ever created or
deleted, never rewritten (:mod:`.rebalance`), so a one-shot children watch on a topic's
owners directory says exactly when its cached owners are stale. :class:`OwnersCache`
keeps one entry per (group, topic) and per group's topic list, each valid until its
watch fires, and reads an entry again after :data:`MAX_AGE_S` whatever happens (a
watch lost with an expired session must not freeze the view).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from broker.client.group.offsets import TopicPartition, owner_path, owners_path

MAX_AGE_S = 60.0
"""An entry is read again after this long even if no watch fired."""


class OwnersCache:
    """Owners per (topic, partition) of groups, re-read only after a change (watches)."""

    def __init__(self, client: KazooClient, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic):
        self._zk = client
        self.max_age_s = max_age_s
        self._clock = clock
        self._owners: dict[tuple[str, str], tuple[float, dict[int, str]]] = {}
        self._topics: dict[str, tuple[float, list[str]]] = {}
        self._stale: set[tuple[str, str | None]] = set()
        """Entries whose watch fired ((group, topic), or (group, None) for the topic list);
        added from ZooKeeper's event thread, read here."""
        self.reads = 0
        """Ownership znodes read so far (what the cache saves shows here)."""

    def read(self, group: str, topics: Iterable[str] | None = None) -> dict[TopicPartition, str]:
        """``{(topic, partition): owner consumer id}`` of the given (default: all) topics."""
        names = sorted(topics) if topics is not None else self._topic_list(group)
        out: dict[TopicPartition, str] = {}
        for topic in names:
            for partition, owner in self._topic_owners(group, topic).items():
                out[(topic, partition)] = owner
        return out

    def _fresh(self, key: tuple[str, str | None], read_at: float) -> bool:
        return key not in self._stale and self._clock() - read_at < self.max_age_s

    def _watch(self, key: tuple[str, str | None]) -> Callable[[WatchedEvent], None]:
        def fired(event: WatchedEvent) -> None:
            self._stale.add(key)

        return fired

    def _topic_list(self, group: str) -> list[str]:
        cached = self._topics.get(group)
        if cached is not None and self._fresh((group, None), cached[0]):
            return cached[1]
        self._stale.discard((group, None))  # before the read: a change after it fires again
        read_at = self._clock()
        try:
            names = sorted(self._zk.get_children(owners_path(group), watch=self._watch((group, None))))
        except NoNodeError:  # no watch is set on a missing node: not cached
            self._topics.pop(group, None)
            return []
        self._topics[group] = (read_at, names)
        return names

    def _topic_owners(self, group: str, topic: str) -> dict[int, str]:
        key = (group, topic)
        cached = self._owners.get(key)
        if cached is not None and self._fresh(key, cached[0]):
            return cached[1]
        self._stale.discard(key)
        read_at = self._clock()
        try:
            children = self._zk.get_children(owners_path(group, topic), watch=self._watch(key))
        except NoNodeError:
            self._owners.pop(key, None)
            return {}
        asyncs = [(int(c), self._zk.get_async(owner_path(group, topic, int(c)))) for c in children if c.isdigit()]
        owners: dict[int, str] = {}
        for partition, result in asyncs:
            try:
                raw, _ = result.get()
            except NoNodeError:  # released while read: the watch has fired already
                continue
            owners[partition] = (raw or b"").decode("utf-8", "replace")
        self.reads += len(asyncs)
        self._owners[key] = (read_at, owners)
        return owners


__all__ = ["MAX_AGE_S", "OwnersCache"]

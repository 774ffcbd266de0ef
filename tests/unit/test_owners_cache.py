"""OwnersCache: owners are read once, again only after a watch fires or the entry ages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NoNodeError

from broker.client.group.owners_cache import OwnersCache


class _Result:
    def __init__(self, value: Any):
        self.value = value

    def get(self) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class FakeZk:
    """Just the reads OwnersCache makes, with one-shot children watches."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.watches: dict[str, list[Callable[[Any], None]]] = {}
        self.gets = 0

    def get_children(self, path: str, watch: Callable[[Any], None] | None = None) -> list[str]:
        prefix = path + "/"
        if path not in self.nodes and not any(n.startswith(prefix) for n in self.nodes):
            raise NoNodeError()
        if watch is not None:
            self.watches.setdefault(path, []).append(watch)
        return sorted({n[len(prefix) :].split("/")[0] for n in self.nodes if n.startswith(prefix)})

    def get_async(self, path: str) -> _Result:
        self.gets += 1
        if path not in self.nodes:
            return _Result(NoNodeError())
        return _Result((self.nodes[path], None))

    def change(self, path: str, data: bytes | None) -> None:
        """Create (data) or delete (None) a node; fires its parent's children watches."""
        if data is None:
            self.nodes.pop(path, None)
        else:
            self.nodes[path] = data
        parent = path.rsplit("/", 1)[0]
        for watch in self.watches.pop(parent, []):
            watch(object())


OWNERS = "/consumers/g/owners/t"


def _cache(zk: FakeZk, now: list[float]) -> OwnersCache:
    return OwnersCache(zk, max_age_s=60, clock=lambda: now[0])  # type: ignore[arg-type]


def test_owners_are_read_once_until_a_watch_fires() -> None:
    zk, now = FakeZk(), [0.0]
    zk.nodes.update({OWNERS: b"", f"{OWNERS}/0": b"c1", f"{OWNERS}/1": b"c2"})
    cache = _cache(zk, now)
    assert cache.read("g") == {("t", 0): "c1", ("t", 1): "c2"}
    assert cache.read("g", ["t"]) == {("t", 0): "c1", ("t", 1): "c2"}
    assert zk.gets == 2  # the second reading came from the cache

    zk.change(f"{OWNERS}/1", None)  # released in a rebalance ...
    zk.change(f"{OWNERS}/1", b"c3")  # ... and claimed by another member
    assert cache.read("g") == {("t", 0): "c1", ("t", 1): "c3"}
    assert zk.gets == 4
    assert cache.reads == 4


def test_an_entry_is_read_again_when_it_ages() -> None:
    zk, now = FakeZk(), [0.0]
    zk.nodes.update({OWNERS: b"", f"{OWNERS}/0": b"c1"})
    cache = _cache(zk, now)
    cache.read("g", ["t"])
    zk.nodes[f"{OWNERS}/0"] = b"c9"  # a change whose watch was lost (an expired session)
    now[0] = 30.0
    assert cache.read("g", ["t"]) == {("t", 0): "c1"}
    now[0] = 61.0
    assert cache.read("g", ["t"]) == {("t", 0): "c9"}


def test_a_group_without_owners_reads_empty_and_is_not_cached() -> None:
    zk, now = FakeZk(), [0.0]
    cache = _cache(zk, now)
    assert cache.read("g") == {}
    assert cache.read("g", ["t"]) == {}
    zk.nodes.update({OWNERS: b"", f"{OWNERS}/2": b"c1"})  # no watch could be set: read again
    assert cache.read("g") == {("t", 2): "c1"}


def test_a_new_topic_in_the_owners_list_is_seen() -> None:
    zk, now = FakeZk(), [0.0]
    zk.nodes.update({OWNERS: b"", f"{OWNERS}/0": b"c1"})
    cache = _cache(zk, now)
    assert cache.read("g") == {("t", 0): "c1"}
    zk.change("/consumers/g/owners/u", b"")  # the topic list's watch fires
    zk.change("/consumers/g/owners/u/0", b"c2")
    assert cache.read("g") == {("t", 0): "c1", ("u", 0): "c2"}

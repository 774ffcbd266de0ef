"""GroupAdmin(cache_owners=True) against a real ZooKeeper: owners read once, a rebalance seen."""

from __future__ import annotations

import time

import pytest

from broker.client import GroupAdmin, GroupConsumer
from tests.groups.conftest import create_topic

pytestmark = pytest.mark.integration


def _wait_owners(admin: GroupAdmin, want: set[str], members: list[GroupConsumer], timeout: float = 30.0) -> dict:
    """The cached owners once every partition is owned by exactly the members ``want``
    (the members poll meanwhile, so a rebalance under way goes on)."""
    deadline = time.monotonic() + timeout
    while True:
        owners = admin.owners("watchers")
        if len(owners) == 4 and set(owners.values()) == want:
            return owners
        if time.monotonic() > deadline:
            raise AssertionError(f"owners {owners}, wanted every partition owned by {want}")
        for member in members:
            member.poll(0.05)


def test_cached_owners_follow_a_rebalance(broker_cluster):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    create_topic(zk, "watched", 4)
    first = GroupConsumer("watchers", ["watched"], zk=zk, auto_commit_ms=0)
    second = None
    admin = GroupAdmin(zk, brokers=False, cache_owners=True)
    plain = GroupAdmin(zk, brokers=False)
    try:
        first.poll(0.5)
        owners = _wait_owners(admin, {first.consumer_id}, [first])
        cache = admin._owners
        assert cache is not None
        reads = cache.reads
        for _ in range(5):  # nothing changed: no znode is read again
            first.poll(0.05)
            assert admin.owners("watchers") == owners
        assert cache.reads == reads

        second = GroupConsumer("watchers", ["watched"], zk=zk, auto_commit_ms=0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(set(plain.owners("watchers").values())) < 2:
            first.poll(0.1)
            second.poll(0.1)
        both = {first.consumer_id, second.consumer_id}
        after = _wait_owners(admin, both, [first, second])
        assert after == plain.owners("watchers")  # the cache says what ZooKeeper holds
        assert cache.reads > reads
    finally:
        for c in (first, second):
            if c is not None:
                c.close()
        admin.close()
        plain.close()

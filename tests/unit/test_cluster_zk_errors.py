"""A client whose ZooKeeper is away gets logferry's retriable ZooKeeperError, not kazoo's
exception (foreign errors are converted at the edge): the producer's sender retries it
and the mirror waits it out (mirror/outage.py) instead of crashing a thread."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from broker.client.cluster import Cluster
from broker.common.errors import ZooKeeperError


class _AwayZooKeeper:
    def __init__(self, error: Exception, connected: bool = True):
        self.error = error
        self.connected = connected

    def get_children(self, path: str) -> list[str]:
        raise self.error


@pytest.mark.parametrize(
    "away",
    [
        _AwayZooKeeper(ConnectionLoss()),  # dropped while the read was pending
        _AwayZooKeeper(SessionExpiredError()),
        # dropped before: kazoo would queue the read until it reconnects, blocking the caller
        _AwayZooKeeper(AssertionError("not read while disconnected"), connected=False),
    ],
    ids=["connection-loss", "session-expired", "disconnected"],
)
def test_listing_brokers_while_zookeeper_is_away_raises_a_retriable_zookeeper_error(away: _AwayZooKeeper) -> None:
    cluster = Cluster.__new__(Cluster)  # no session: the kazoo client is the fake
    cluster._zk = away  # type: ignore[assignment]
    cluster._zk_connect = "127.0.0.1:2181/analysis"
    cluster.listener = None
    cluster._brokers = {}  # no metadata seen yet: nothing to fall back on
    with pytest.raises(ZooKeeperError) as info:
        cluster._bootstrap_addresses()
    assert info.value.retriable and "127.0.0.1:2181/analysis" in str(info.value)
    assert "is ZooKeeper reachable?" in str(info.value)


def test_while_zookeeper_is_away_the_brokers_of_the_last_metadata_are_asked() -> None:
    """ZooKeeper only finds the brokers: a client that has seen metadata goes on through
    the brokers it named (they serve without ZooKeeper), instead of failing."""
    cluster = Cluster.__new__(Cluster)
    cluster._zk = _AwayZooKeeper(AssertionError("not read while disconnected"), connected=False)  # type: ignore[assignment]
    cluster._zk_connect = "127.0.0.1:2181/live"
    cluster.listener = None
    cluster._brokers = {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}
    assert cluster._bootstrap_addresses() == [("127.0.0.1", 9092), ("127.0.0.1", 9093)]

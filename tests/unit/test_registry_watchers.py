"""kazoo's DataWatch calls ``func(data, stat, event)`` and, on a TypeError, calls
``func(data, stat)`` again: every watcher of the registry takes the event, so it runs
once (a two-argument watcher turned any error inside it into two chained tracebacks)."""

from __future__ import annotations

from types import SimpleNamespace

from broker.coordination import zk
from broker.coordination.registry import BrokerInfo, BrokerRegistry, ClusterView


def test_watchers_take_the_event_kazoo_passes():
    views: list[ClusterView] = []
    registry = BrokerRegistry(SimpleNamespace(), 1, BrokerInfo("h", 1), views.append)
    event = SimpleNamespace(type="CHANGED")
    assert registry._controller_changed(zk.encode({"broker_id": 3}), None, event) is True
    assert views[-1].controller == 3
    # a deleted topic and its partition's state: both watches end (return False)
    assert registry._topic_data_watcher("t")(None, None, event) is False
    assert registry._state_watcher("t", 0)(None, None, event) is False


def test_a_stopped_registry_stops_its_watches():
    registry = BrokerRegistry(SimpleNamespace(), 1, BrokerInfo("h", 1), lambda view: None)
    registry._stopped.set()
    assert registry._controller_changed(None, None, None) is False

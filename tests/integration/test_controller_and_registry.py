"""The controller role and the broker registration on a real ZooKeeper (no broker processes)."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLossException

from broker.coordination import zk
from broker.coordination.registry import BrokerInfo, BrokerRegistry
from broker.replication.controller import Controller
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _wait_active(controller: Controller, expected: bool, timeout: float = 10.0) -> None:
    wait_until(lambda: controller.active == expected, timeout, f"controller.active == {expected}")


def test_a_controller_finishes_taking_office_when_it_finds_its_own_node(zk_client, monkeypatch):
    # The first attempt creates /controller, then the connection drops before it bumped
    # the controller epoch. The node blocks every other broker, so the retry must find
    # it is its own and take office, or the cluster has no controller at all.
    real_ensure_path = zk_client.ensure_path
    failures = [ConnectionLossException()]

    def ensure_path_failing_once(path, *args, **kwargs):
        if path == zk.CONTROLLER_EPOCH and failures:
            raise failures.pop()
        return real_ensure_path(path, *args, **kwargs)

    monkeypatch.setattr(zk_client, "ensure_path", ensure_path_failing_once)
    controller = Controller(zk_client, 1)
    controller.start()
    try:
        _wait_active(controller, True)
        assert not failures  # the first attempt did fail half-way
        _, stat = zk_client.get(zk.CONTROLLER_EPOCH)
        assert stat.version >= 1  # it bumped the controller epoch as a new holder does
    finally:
        controller.stop()
    assert not zk_client.exists(zk.CONTROLLER)  # handed back at the stop


def test_another_sessions_controller_node_is_respected(zk_client, zk_connect):
    other = KazooClient(hosts=zk_connect, timeout=10.0)
    other.start(timeout=15)
    try:
        other.create(zk.CONTROLLER, zk.encode({"broker_id": 2}), ephemeral=True)
        controller = Controller(zk_client, 1)
        controller.start()
        try:
            time.sleep(0.5)
            assert not controller.active
            other.stop()  # the holder's session ends: this one takes over
            _wait_active(controller, True)
        finally:
            controller.stop()
    finally:
        other.close()


def test_a_broker_registers_again_through_a_flapping_connection(zk_client, monkeypatch):
    # After a session loss the broker registers anew; a connection loss during that
    # create (the connection often flaps right then) must not leave it unregistered.
    views = []
    registry = BrokerRegistry(zk_client, 7, BrokerInfo("127.0.0.1", 9999), views.append)
    registry.watch()
    real_create = zk_client.create
    failures = [ConnectionLossException(), ConnectionLossException()]

    def create_failing_twice(path, *args, **kwargs):
        if path == zk.broker_path(7) and failures:
            raise failures.pop()
        return real_create(path, *args, **kwargs)

    monkeypatch.setattr(zk_client, "create", create_failing_twice)
    registry._rejoin()  # what the session listener starts after LOST, then CONNECTED
    assert not failures
    assert zk_client.exists(zk.broker_path(7))
    assert registry.session == zk_client.exists(zk.broker_path(7)).czxid
    assert views and views[-1].session == registry.session
    registry.deregister()

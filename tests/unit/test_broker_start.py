"""A broker binds its ports before it touches its logs or ZooKeeper: a taken port fails
the start at once and leaves nothing open. In-process, no ZooKeeper (the connect string
points nowhere: reaching it would fail the test differently)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from broker.common.errors import ListenError, MetricsError
from broker.server.broker import Broker
from broker.server.config import BrokerConfig
from broker.testing.localrun import free_port


def _held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def _config(tmp_path: Path, port: int, metrics_port: int) -> BrokerConfig:
    return BrokerConfig(
        broker_id=1,
        zk_connect="127.0.0.1:1/nowhere",
        log_dirs=(tmp_path / "data",),
        port=port,
        metrics_port=metrics_port,
    )


@pytest.mark.parametrize("taken, error", [("metrics", MetricsError), ("data", ListenError)])
def test_a_taken_port_fails_the_start_before_logs_and_zookeeper(tmp_path, taken, error):
    held = _held_port()
    busy = held.getsockname()[1]
    data_port, metrics_port = (free_port(), busy) if taken == "metrics" else (busy, free_port())
    broker = Broker(_config(tmp_path, data_port, metrics_port))
    try:
        with pytest.raises(error, match=f"127.0.0.1:{busy}"):
            asyncio.run(broker.start())
    finally:
        held.close()
    assert broker._zk is None and broker.registry is None and broker.controller is None
    assert not (tmp_path / "data").exists()  # the logs were not even opened
    for port in (data_port, metrics_port):  # both released
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
            probe.listen(1)

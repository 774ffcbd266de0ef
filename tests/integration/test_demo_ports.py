"""The demo's brokers pick free ports a moment before they bind them; a port another
program takes in between must not end the demo (demo/processes.py, BrokerChild.wait_ready).

Here the first port handed to the broker is one this test keeps listening on: the
broker's first start fails with the address already in use, the demo starts it again on
new ports, and it serves there.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from demo import processes
from demo.processes import BrokerChild

pytestmark = pytest.mark.integration


def test_a_port_taken_before_the_bind_is_replaced_and_the_broker_serves(zk_connect, tmp_path: Path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    held = taken.getsockname()[1]
    real = processes.free_port
    handed = iter([held])
    monkeypatch.setattr(processes, "free_port", lambda: next(handed, None) or real())
    child = BrokerChild("live-broker-1", 1, zk_connect, tmp_path, {}, {})
    try:
        assert child.port == held
        child.start()
        child.wait_ready(30.0)
        assert child.port != held and child.running()
        log = child.log_text()
        assert log.lower().count("already in use") == 1, log[-3000:]
        socket.create_connection(("127.0.0.1", child.port), timeout=2).close()
    finally:
        taken.close()
        child.stop(30.0)

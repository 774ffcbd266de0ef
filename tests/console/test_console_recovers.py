"""The console goes on reading after its ZooKeeper session expires (a long pause of the
process: GC, a suspended machine), against a real ZooKeeper and broker: the cluster
shows the error for one reading, then is read again with new clients. Before, the
ZooKeeper error ended the console's poll loop and the page froze on its last reading."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

import pytest

from tests.console.browser import ConsoleProcess
from tests.support import waiting

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def snapshot(url: str) -> dict:
    return json.load(urllib.request.urlopen(url + "api/snapshot", timeout=10))


@pytest.mark.timeout(120)
def test_polling_survives_an_expired_zookeeper_session(broker_cluster):
    cluster = broker_cluster(1)
    console = ConsoleProcess(f"live={cluster.zk_connect}", interval=0.5)
    try:
        waiting.wait_until(lambda: snapshot(console.url)["clusters"][0]["ok"], 15, "a first reading")
        console.proc.send_signal(signal.SIGSTOP)
        time.sleep(15)  # longer than the console's ZooKeeper session (10 s)
        console.proc.send_signal(signal.SIGCONT)
        before = snapshot(console.url)["seq"]
        waiting.wait_until(
            lambda: snapshot(console.url)["seq"] >= before + 4 and snapshot(console.url)["clusters"][0]["ok"],
            20,
            "readings to go on, the cluster read again",
        )
    finally:
        console.proc.send_signal(signal.SIGCONT)
        assert console.stop() == 0, "".join(console.stderr)

"""The clusters view lists each broker's listeners (name, protocol, address, security) as
the brokers registered them in ZooKeeper, in a real browser against real brokers with a
plaintext, a TLS + SCRAM and a Kafka listener each."""

from __future__ import annotations

import tomllib

import pytest

from broker.common.config import dumps
from broker.coordination import zk as zkmod
from broker.testing.localrun import free_port
from tests.console.browser import ConsoleProcess, open_browser
from tests.integration.test_listeners import listener_cluster, start_all  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def registrations(zk_connect: str) -> dict[int, dict]:
    """Every broker's registration, read straight from ZooKeeper."""
    client = zkmod.connect(zk_connect, create=False)
    try:
        return {
            int(child): zkmod.decode(client.get(f"{zkmod.BROKER_IDS}/{child}")[0])
            for child in client.get_children(zkmod.BROKER_IDS)
        }
    finally:
        zkmod.close(client)


@pytest.mark.timeout(120)
def test_clusters_view_shows_the_registered_listeners(broker_cluster, pki, monkeypatch):  # noqa: F811
    cluster, _ = listener_cluster(broker_cluster, pki, 2, "local")
    for process in cluster.brokers:  # and a Kafka listener each
        doc = tomllib.loads(process.config_file.read_text())
        doc["listeners"].append({"name": "clients", "protocol": "kafka", "host": "127.0.0.1", "port": free_port()})
        process.config_file.write_text(dumps(doc))
    start_all(cluster, monkeypatch)
    registered = registrations(cluster.zk_connect)
    assert len(registered) == 2
    want = {
        b: [(e["name"], e["protocol"], f"{e['host']}:{e['port']}", e["security"]) for e in data["endpoints"]]
        for b, data in registered.items()
    }
    for rows in want.values():  # what the brokers' configs say
        assert [(name, proto, security) for name, proto, _, security in rows] == [
            ("local", "logferry", "plaintext"),
            ("external", "logferry", "TLS, SASL required"),
            ("clients", "kafka", "plaintext"),
        ]

    console = ConsoleProcess(f"live={cluster.zk_connect}", interval=0.5)
    try:
        for page, errors in open_browser():
            page.goto(console.url)
            for b in want:
                page.wait_for_selector(f'[data-broker="{b}"] [data-listener="clients"]', timeout=15_000)
            shown = page.eval_on_selector_all(
                '[data-cluster="live"] tr[data-broker]',
                """rows =>
                Object.fromEntries(rows.map(r => [r.dataset.broker, [...r.querySelectorAll('[data-listener]')]
                  .map(l => ['name', 'protocol', 'address', 'security'].map(
                    f => l.querySelector(`[data-field="listener-${f}"]`).textContent))]))""",
            )
            assert {int(b): [tuple(x) for x in rows] for b, rows in shown.items()} == want
            assert errors == [], errors
    finally:
        assert console.stop() == 0, "".join(console.stderr)

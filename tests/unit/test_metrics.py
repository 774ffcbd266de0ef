"""broker.common.metrics: rendering through prometheus_client, serving, and every
component's families (broker, agent, mirror) through ``promtool check metrics``."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.metrics import COUNTERS, GAUGES, Snapshot, StatusServer
from agent.metrics import registry as agent_registry
from broker.common.errors import ListenError, MetricsError
from broker.common.metrics import Metrics
from broker.common.metrics_server import MetricsServer
from mirror.status import MirrorMetrics
from tests.support.metrics import promtool_check, samples, scrape, value


def _broker_like() -> Metrics:
    metrics = Metrics()
    bytes_in = metrics.counter("bytes_in_total", "Bytes appended per partition")
    bytes_in[(("topic", "logs"), ("partition", "0"))] += 123_456_789
    metrics.counter("request_seconds_total", "Time handling requests")[(("api", "fetch"),)] += 0.25
    metrics.counter("produce_errors_total", "Rejected message sets by error")
    metrics.gauge_source(
        lambda: [("open_connections", (), 3)],
        {"open_connections": "Open client connections", "offline_partitions": "Partitions without a leader"},
    )
    return metrics


@pytest.mark.integration  # runs promtool as a process
def test_counters_keep_the_declared_name_and_every_integer_digit() -> None:
    metrics = Metrics()
    counter = metrics.counter("bytes_in_total", "Bytes appended per partition")
    counter[(("topic", "t"), ("partition", "1"))] += 123_456_789  # %g once printed 1.23457e+08
    counter[(("topic", "t"), ("partition", "2"))] += 2**53  # the most a float64 sample carries
    text = metrics.render()
    assert "# TYPE logferry_bytes_in_total counter" in text
    parsed = samples(text)
    assert value(parsed, "logferry_bytes_in_total", topic="t", partition="1") == 123_456_789
    assert int(value(parsed, "logferry_bytes_in_total", topic="t", partition="2")) == 2**53
    promtool_check(text)


@pytest.mark.integration  # runs promtool as a process
def test_declared_families_render_without_series_and_names_follow_the_rules() -> None:
    text = _broker_like().render()
    assert "# TYPE logferry_produce_errors_total counter" in text
    assert "# TYPE logferry_offline_partitions gauge" in text
    assert value(samples(text), "logferry_open_connections") == 3
    promtool_check(text)
    metrics = Metrics()
    with pytest.raises(ValueError, match="ends in _total"):
        metrics.counter("bytes_in", "Bytes")
    with pytest.raises(ValueError, match="only counters"):
        metrics.gauge_source(list, {"estimate_total": "Not a counter"})
    with pytest.raises(ValueError, match="help text"):
        metrics.counter("x_total", "")


def test_server_answers_metrics_and_routes_and_a_taken_port_is_one_line() -> None:
    server = MetricsServer(
        _broker_like(), "127.0.0.1", 0, routes={"/status": lambda: ("application/json", b'{"ok": 1}')}
    )
    try:
        text = scrape(f"{server.url}/metrics")
        assert value(samples(text), "logferry_bytes_in_total", topic="logs", partition="0") == 123_456_789
        assert json.loads(scrape(f"{server.url}/status")) == {"ok": 1}
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{server.url}/other", timeout=5)
        assert missing.value.code == 404
        with pytest.raises(MetricsError) as taken:
            MetricsServer(Metrics(), "127.0.0.1", server.port)
        assert isinstance(taken.value, ListenError)
        assert str(taken.value) == (f"cannot serve metrics on 127.0.0.1:{server.port} (Address already in use)")
    finally:
        server.close()


def test_without_routes_every_path_answers_the_metrics() -> None:
    server = MetricsServer(_broker_like(), "127.0.0.1", 0)
    try:
        assert "logferry_bytes_in_total" in scrape(f"{server.url}/")
    finally:
        server.close()


def test_an_asyncio_owner_is_read_on_its_own_loop() -> None:
    seen: list[threading.Thread] = []
    metrics = Metrics()
    metrics.gauge_source(lambda: seen.append(threading.current_thread()) or [("up", (), 1)], {"up": "1 while serving"})

    async def main() -> str:
        server = MetricsServer(metrics, "127.0.0.1", 0, loop=asyncio.get_running_loop())
        try:
            return await asyncio.get_running_loop().run_in_executor(None, scrape, f"{server.url}/metrics")
        finally:
            server.close()

    text = asyncio.run(main())
    assert value(samples(text), "logferry_up") == 1
    assert seen == [threading.main_thread()]


@pytest.mark.integration  # runs promtool as a process
def test_agent_families_from_a_snapshot_pass_promtool() -> None:
    snapshot = Snapshot(
        host='web-1 "a"',
        counters={name: 7 for name in COUNTERS},
        gauges={name: 3 for name in GAUGES},
        files=[{"path": "/var/log/app.log", "inode": 42, "lag": 10}],
    )
    text = agent_registry(lambda: snapshot).render()
    parsed = samples(text)
    assert value(parsed, "logferry_agent_messages_acked_total", host='web-1 "a"') == 7
    assert value(parsed, "logferry_agent_lag_bytes", host='web-1 "a"') == 3
    assert value(parsed, "logferry_agent_file_lag_bytes", host='web-1 "a"', file="/var/log/app.log", inode="42") == 10
    promtool_check(text)


def test_agent_status_server_serves_metrics_and_status() -> None:
    server = StatusServer("127.0.0.1", 0)
    try:
        server.snapshot = Snapshot(host="h", state="running", counters={"errors": 2})
        assert value(samples(scrape(f"{server.url}/metrics")), "logferry_agent_errors_total", host="h") == 2
        assert json.loads(scrape(f"{server.url}/status"))["state"] == "running"
    finally:
        server.close()


@pytest.mark.integration  # runs promtool as a process
def test_mirror_families_pass_promtool() -> None:
    mirror = MirrorMetrics(
        lambda: {"partitions": {"logs-0": {"position": 10, "log_end": 30, "lag_bytes": 20, "active": True}}}
    )
    mirror.record("logs", batches=2, messages=5, nbytes=100)
    mirror.gaps[(("topic", "logs"), ("partition", "0"))] += 1
    mirror.halted[("logs", 1)] = {"offset": 0}
    mirror.tick()
    text = mirror.registry.render()
    parsed = samples(text)
    assert value(parsed, "logferry_mirror_messages_total", topic="logs") == 5
    assert value(parsed, "logferry_mirror_lag_bytes", topic="logs", partition="0") == 20
    assert value(parsed, "logferry_mirror_partition_halted", topic="logs", partition="1") == 1
    promtool_check(text)


def _documented() -> dict[str, tuple[str, frozenset[str]]]:
    """``metric -> (type, label names)`` from the reference tables of docs/operations.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = text.split("### Metric reference", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`logferry_"):
            continue
        labels = frozenset(x.strip() for x in cells[2].split(",") if x.strip())
        for name in re.findall(r"`(logferry_\w+)`", cells[0]):
            documented[name] = (cells[1], labels)
    return documented


def _families(metrics: Metrics) -> dict[str, tuple[str, set[str]]]:
    out = {}
    for family in metrics.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = (family.type, {label for s in family.samples for label in s.labels})
    return out


def test_docs_list_every_family_with_its_type_and_labels(tmp_path: Path) -> None:
    from broker.server.broker import Broker
    from broker.server.config import BrokerConfig

    broker = Broker(BrokerConfig(broker_id=1, zk_connect="127.0.0.1:1", log_dirs=(str(tmp_path),)))
    broker.stats.bytes_in[("t", 0)] += 1  # a series for the label check; the rest is declared only
    broker.stats.produce_errors[(("error", "CorruptBatchError"),)] += 1
    broker.count_request("fetch", 0.1)
    broker.stats.isr_changes[(("direction", "grow"),)] += 1
    snapshot = Snapshot(host="h", files=[{"path": "/a", "inode": 1, "lag": 0}])
    mirror = MirrorMetrics(lambda: {"partitions": {"t-0": {"lag_bytes": 1}}})
    mirror.record("t", 1, 1, 1)
    mirror.gaps[(("topic", "t"), ("partition", "0"))] += 1
    mirror.halted[("t", 0)] = {}
    rendered = {
        **_families(broker.metrics),
        **_families(agent_registry(lambda: snapshot)),
        **_families(mirror.registry),
    }
    documented = _documented()
    assert sorted(rendered) == sorted(documented)
    for name, (kind, labels) in rendered.items():
        assert documented[name][0] == kind, name
        assert labels <= documented[name][1], f"{name}: labels {labels} not documented"
    broker._fsync_pool.shutdown()
    broker._admin_pool.shutdown()

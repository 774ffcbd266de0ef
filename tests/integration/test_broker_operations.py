"""Operating a broker: metrics, ZooKeeper session loss, the command line, topic deletion."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from broker.client import Producer, SimpleConsumer
from broker.coordination import zk
from tests.support.cli import logferry
from tests.support.metrics import promtool_check, samples, scrape, value
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_prometheus_metrics_count_traffic(broker_cluster):
    port = free_port()
    cluster = broker_cluster(1, broker={"metrics_port": port})
    with Producer(brokers=cluster.bootstrap) as producer:
        producer.send("metered", [b"a" * 100] * 500, partition=2).wait(10)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        wait_until(lambda: consumer.offsets("metered", 2).end > 0, 10, "flush")
        consumer.fetch("metered", 2, 0)
    text = scrape(f"http://127.0.0.1:{port}/metrics")
    parsed = samples(text)  # by name and labels: label order is the renderer's business
    assert value(parsed, "logferry_messages_in_total", topic="metered", partition="2") == 500
    assert value(parsed, "logferry_requests_total", api="produce") is not None
    assert value(parsed, "logferry_requests_total", api="fetch") is not None
    assert value(parsed, "logferry_bytes_out_total", topic="metered", partition="2") is not None
    assert "logferry_open_connections" in text
    assert "# TYPE logferry_bytes_in_total counter" in text
    promtool_check(text)


def test_broker_registers_again_after_its_session_expires(broker_cluster, zk_connect):
    """A broker frozen past its session timeout loses its registration, then makes it again.

    (Restarting ZooKeeper would not do: the server restores sessions from its log.)
    """
    cluster = broker_cluster(1)  # zk_session_timeout_s = 6 in the test harness
    broker = cluster.brokers[0]
    with Producer(zk=cluster.zk_connect) as producer:
        producer.send("survive", b"before", partition=0).wait(10)
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        assert client.exists("/brokers/ids/1")
        broker.pause()
        try:
            wait_until(lambda: not client.exists("/brokers/ids/1"), 30, "the session to expire")
        finally:
            broker.resume()
        wait_until(lambda: client.exists("/brokers/ids/1"), 30, "re-registration of broker 1")
        wait_until(lambda: "will register again" in broker.log_text(), 10, "the log line")
    finally:
        client.stop()
        client.close()
    with Producer(zk=cluster.zk_connect) as producer:
        producer.send("survive", b"after", partition=0).wait(20)
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        values = [m.value for m in consumer.messages("survive", 0, follow=True, timeout=1, limit=2)]
    assert values == [b"before", b"after"]


_cli = logferry


@pytest.mark.slow
def test_command_line_round_trip(broker_cluster):
    cluster = broker_cluster(2)
    zk = cluster.zk_connect
    created = _cli("topic", "create", "cli-topic", "-p", "3", zk=zk)
    assert created.returncode == 0 and "3 partitions" in created.stdout, created.stderr
    assert "cli-topic" in _cli("topic", "list", zk=zk).stdout
    described = _cli("topic", "describe", "cli-topic", zk=zk).stdout
    assert described.count("127.0.0.1:") == 3
    lines = [f"line {i}" for i in range(300)]
    produced = _cli("produce", "cli-topic", "--key", "host-1", stdin="\n".join(lines) + "\n", zk=zk)
    assert produced.returncode == 0 and "produced 300" in produced.stderr
    time.sleep(0.3)  # let the flush make them visible
    consumed = _cli("consume", "cli-topic", "-n", "300", "--format", "{partition} {value}", zk=zk)
    assert consumed.returncode == 0, consumed.stderr
    out = consumed.stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in out] == lines  # one key: one partition, in order
    # user mistakes: one line, no traceback
    bad = _cli("topic", "create", "../evil", zk=zk)
    assert bad.returncode == 2 and "invalid topic name" in bad.stderr  # usage error: 2
    assert bad.stderr.startswith("logferry topic create: error: ")
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    bad_from = _cli("consume", "cli-topic", "--from", "yesterday", zk=zk)
    assert bad_from.returncode == 2 and "--from" in bad_from.stderr and "Traceback" not in bad_from.stderr
    assert bad_from.stderr.startswith("logferry consume: error: ")
    deleted = _cli("topic", "delete", "cli-topic", zk=zk)
    assert deleted.returncode == 0
    wait_until(
        lambda: not any((b.log_dir / f"cli-topic-{p}").exists() for b in cluster.brokers for p in range(3)),
        10,
        "partition dirs deleted",
    )


def test_bad_config_is_one_line(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[broker]\nid = 1\nport = 99999\nlog_dirs = ["x"]\nzk_connect = "127.0.0.1:1/x"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "broker", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2  # a config error: exit 2, like every command
    assert f"{config}: broker.port: must be a port number" in proc.stderr
    assert proc.stderr.startswith("logferry broker: error: ")
    assert "Traceback" not in proc.stderr


def test_unreachable_zookeeper_is_a_clear_error(tmp_path):
    port = free_port()
    config = tmp_path / "broker.toml"
    config.write_text(
        f'[broker]\nid = 1\nport = {free_port()}\nlog_dirs = ["{tmp_path / "d"}"]\nzk_connect = "127.0.0.1:{port}/x"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "broker", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "cannot reach ZooKeeper" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("logferry broker: error: ")


@pytest.mark.parametrize("asked, granted", [(0.3, 1.0), (10.0, 10.0), (200.0, 60.0)])
def test_the_session_timeout_zookeeper_granted_is_known(zk_connect, asked, granted):
    """The test server clamps sessions to 1-60 s (two ticks of 500 ms .. its maximum);
    leaders' write leases depend on knowing what it granted, not what was asked."""
    client = zk.connect(zk_connect, create=True, session_timeout=asked)
    try:
        assert zk.granted_session_timeout(client) == pytest.approx(granted)
    finally:
        zk.close(client)


def test_a_broker_warns_when_zookeeper_grants_another_session_timeout(broker_cluster):
    cluster = broker_cluster(1, broker={"zk_session_timeout_s": 200.0})
    text = cluster.brokers[0].log_text()
    assert "ZooKeeper granted a session timeout of 60.0s, not the 200.0s" in text


def test_a_broker_dumps_its_tasks_and_threads_on_request(broker_cluster):
    """kill -USR2 / -USR1 explain a stuck broker without stopping it."""
    broker = broker_cluster(1).brokers[0]

    def logged(marker: str) -> str:
        deadline = time.monotonic() + 30  # under load the dumps were seen taking over 10 s
        text = broker.log_text()
        while marker not in text and time.monotonic() < deadline:
            time.sleep(0.05)
            text = broker.log_text()
        return text

    # One after the other: faulthandler reads the other threads' frames without the GIL,
    # and a full run that sent both at once saw its dump end mid-line and no task dump
    # within 30 s (the main thread was running Python when SIGUSR1 came).
    broker.proc.send_signal(signal.SIGUSR2)
    text = logged("asyncio tasks:")
    assert "asyncio tasks:" in text and "Broker.run" in text  # the main task's stack
    broker.proc.send_signal(signal.SIGUSR1)
    text = logged("Current thread")
    assert "Current thread" in text and "most recent call first" in text  # faulthandler
    assert broker.is_running()

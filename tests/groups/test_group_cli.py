"""``logferry group list|describe|seek|delete`` against a real cluster."""

from __future__ import annotations

import argparse
import json
import time

import pytest

from broker.cli import group_cmd
from broker.client import GroupConsumer, Producer
from broker.common.errors import ConfigError
from tests.groups.conftest import create_topic

pytestmark = pytest.mark.integration


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="logferry")
    sub = parser.add_subparsers(dest="command")
    group_cmd.add_parser(sub)
    args = parser.parse_args(["group", *argv])
    return args.func(args)


def test_list_describe_seek_delete(broker_cluster, capsys):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    create_topic(zk, "cli", 2)
    with Producer(zk=zk) as producer:
        for p in range(2):
            producer.send("cli", [b"v" * 100] * 100, partition=p)  # one batch each
        producer.flush(30)
    consumer = GroupConsumer("readers", ["cli"], zk=zk, auto_commit_ms=0)
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 150 and time.monotonic() < deadline:
        got += consumer.poll(0.2, max_messages=150 - len(got))
    consumer.poll(0)  # the messages handed out so far count as processed
    consumer.commit()

    assert run(["list", "--zk", zk]) == 0
    out = capsys.readouterr().out
    assert "readers" in out and "1" in out.split("readers")[1].split("\n")[0]

    assert run(["describe", "readers", "--zk", zk, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert list(info["members"]) == [consumer.consumer_id]
    rows = {r["partition"]: r for r in info["partitions"]}
    assert set(rows) == {0, 1} and all(r["owner"] == consumer.consumer_id for r in rows.values())
    consumed = sum(r["skip"] + (100 if r["committed"] == r["log_end"] else 0) for r in rows.values())
    assert consumed == len(got)  # committed positions account for every processed message
    lagging = [r for r in rows.values() if r["lag_bytes"]]
    assert lagging and all(r["lag_messages"] == 100 - r["skip"] for r in lagging)
    assert all(time.time() * 1000 - r["committed_at_ms"] < 60_000 for r in rows.values())
    assert info["status"] == "OK" and all(r["status"] == "OK" for r in rows.values())  # one reading
    assert run(["describe", "readers", "--zk", zk]) == 0
    text = capsys.readouterr().out
    assert "LAG-MSGS" in text and consumer.consumer_id in text
    assert "STATUS" in text and "status OK" in text

    with pytest.raises(ConfigError, match="active member"):
        run(["seek", "readers", "--zk", zk, "--topic", "cli", "--to", "earliest"])
    with pytest.raises(ConfigError, match="active member"):
        run(["delete", "readers", "--zk", zk])
    consumer.close()

    assert run(["seek", "readers", "--zk", zk, "--topic", "cli", "--to", "earliest"]) == 0
    capsys.readouterr()
    with GroupConsumer("readers", ["cli"], zk=zk, iter_timeout=1.0) as again:
        assert len(list(again)) == 200  # rewound to the start
    assert run(["seek", "readers", "--zk", zk, "--topic", "cli", "--partition", "1", "--to=-1h"]) == 0
    assert run(["seek", "readers", "--zk", zk, "--topic", "cli", "--to", "latest"]) == 0
    capsys.readouterr()
    with GroupConsumer("readers", ["cli"], zk=zk, iter_timeout=1.0) as again:
        assert list(again) == []

    assert run(["delete", "readers", "--zk", zk]) == 0
    assert "deleted" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="no consumer group"):
        run(["describe", "readers", "--zk", zk])
    with pytest.raises(ConfigError, match="--zk"):
        run(["list", "--brokers", cluster.bootstrap[0]])

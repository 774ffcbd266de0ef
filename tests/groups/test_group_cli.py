"""``logferry group list|describe|seek|delete`` against a real cluster."""

from __future__ import annotations

import argparse
import json
import threading
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


def test_describe_window_judges_a_group_that_stops_committing(broker_cluster):
    """Over ``--window``, a member commits twice and then stops while data waits: STOP, by
    Burrow's rule (silent longer than the window's commits span)."""
    from broker.client import GroupAdmin

    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    create_topic(zk, "judged", 1)
    with Producer(zk=zk) as producer:
        for _ in range(4):
            producer.send("judged", [b"v" * 100] * 10, partition=0)  # four batches
            producer.flush(30)
    consumer = GroupConsumer("judges", ["judged"], zk=zk, auto_commit_ms=0)

    def consume_one_batch() -> None:
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += consumer.poll(0.2, max_messages=10 - len(got))
        consumer.poll(0, max_messages=0)  # what was handed out counts as processed

    consume_one_batch()  # a member (so the group has rows) with a position not yet committed
    result: dict = {}
    with GroupAdmin(zk) as admin:
        reader = threading.Thread(target=lambda: result.update(group_cmd.describe(admin, "judges", 6.0)))
        reader.start()
        time.sleep(0.5)
        consumer.commit()
        consume_one_batch()
        time.sleep(0.5)
        consumer.commit()  # then silence, with batches left to read
        reader.join(30)
    consumer.close(processed=False)
    (row,) = result["partitions"]
    assert row["lag_bytes"] > 0
    assert row["status"] == "STOP" and result["status"] == "STOP"

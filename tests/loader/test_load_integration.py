"""The landing job end to end: real brokers, real Spark local mode, real Parquet files.

Landed files are read back with pyarrow, independently of the loader, and compared with
what the test produced: every message once, in its topic, partition and event hour.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import msgpack
import pytest

from broker.client import Producer, SimpleConsumer
from hadoop_loader import cli
from hadoop_loader.audit import require_complete
from hadoop_loader.errors import IncompleteError, RetentionGapError
from hadoop_loader.fs import LocalFileSystem
from hadoop_loader.job import run_load
from hadoop_loader.store import LandingStore
from tests.loader.conftest import BASE_HOUR_MS, loader_config, produce, read_landed

pytestmark = pytest.mark.integration

TOPICS = {"land-a": 4, "land-b": 2, "land-c": 1}


def hour_of(ts_ms: int) -> tuple[str, str]:
    t = dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def assert_landed_exactly(root: Path, sent: dict[str, dict[int, list[tuple[bytes, int]]]]):
    """The Parquet rows are exactly the sent messages: per partition, in offset order,
    each in the directory of its event hour, no duplicates."""
    table = read_landed(root)
    assert table is not None
    cols = table.select(["topic", "partition", "offset", "index", "value", "timestamp", "dt", "hr"]).to_pydict()
    rows = sorted(
        zip(
            cols["topic"],
            cols["partition"],
            cols["offset"],
            cols["index"],
            cols["value"],
            cols["timestamp"],
            cols["dt"],
            cols["hr"],
            strict=True,
        )
    )
    ids = [(t, p, o, i) for t, p, o, i, *_ in rows]
    assert len(ids) == len(set(ids)), "duplicate rows landed"
    expected_total = sum(len(v) for parts in sent.values() for v in parts.values())
    assert len(rows) == expected_total
    by_partition: dict[tuple[str, int], list] = {}
    for t, p, _, _, value, ts, day, hour in rows:
        by_partition.setdefault((t, p), []).append(value)
        assert (day, hour) == hour_of(int(ts.timestamp() * 1000))
    for topic, parts in sent.items():
        for p, messages in parts.items():
            assert by_partition.get((topic, p), []) == [v for v, _ in messages], f"{topic}/{p}"
    return rows


def merge(into, more):
    for topic, parts in more.items():
        for p, messages in parts.items():
            into.setdefault(topic, {}).setdefault(p, []).extend(messages)


def audit_records(sent, short_topic: str | None = None):
    """What agents would publish: per topic and 10-minute window, acked counts."""
    counts: dict[tuple[str, int], int] = {}
    for topic, parts in sent.items():
        for messages in parts.values():
            for _, ts in messages:
                key = (topic, ts - ts % 600_000)
                counts[key] = counts.get(key, 0) + 1
    out = []
    for (topic, window), n in sorted(counts.items()):
        expected = n
        if topic == short_topic:  # its first window: 10 acked messages never landed
            expected, short_topic = n + 10, None
        out.append(
            msgpack.packb(
                {
                    "host": "web-1",
                    "topic": topic,
                    "window_start": window,
                    "window_end": window + 600_000,
                    "sent": expected,
                    "acked": expected,
                    "stage": "agent",
                }
            )
        )
    return out


@pytest.mark.slow
def test_200k_messages_on_3_topics_land_once_then_only_new_ones(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    sent = {
        "land-a": produce(zk, "land-a", 4, 100_000, hours=5),
        "land-b": produce(zk, "land-b", 2, 60_000, hours=3),
        "land-c": produce(zk, "land-c", 1, 40_000, hours=2),
    }
    with Producer(zk=zk) as producer:
        producer.send("_audit", audit_records(sent, short_topic="land-b"), partition=0).wait(30)
    out = tmp_path / "wh"
    config = loader_config(
        zk, out, list(TOPICS), audit={"enabled": True, "settle_minutes": 0, "lookback_hours": 24 * 365 * 10}
    )

    first = run_load(config, spark=spark)
    assert first.sequence == 1 and first.rows == 200_000
    assert {t: s.rows for t, s in first.topics.items()} == {"land-a": 100_000, "land-b": 60_000, "land-c": 40_000}
    assert_landed_exactly(out, sent)
    # partitioned by topic and event hour; one file per topic and hour (the default)
    dirs = sorted({p.parent.relative_to(out).as_posix() for p in out.rglob("*.parquet") if "_logferry" not in p.parts})
    assert dirs[0] == "topic=land-a/dt=2024-03-01/hr=00"
    assert len(dirs) == 5 + 3 + 2
    assert sum(s.files for s in first.topics.values()) == 10
    # audit: land-a and land-c complete, land-b's first hour short of 10 expected rows
    report = first.audit
    assert report is not None and report.records > 0
    low = report.failing(0.9999)
    assert [(h.topic, h.hour) for h in low] == [("land-b", "2024-03-01T00")]
    assert low[0].expected == low[0].landed + 10
    with pytest.raises(IncompleteError, match="land-b 2024-03-01T00"):
        require_complete(report, 0.9999)

    more = {
        "land-a": produce(zk, "land-a", 4, 3_000, start=100_000, hours=1),
        "land-c": produce(zk, "land-c", 1, 1_000, start=40_000, hours=1),
    }
    merge(sent, more)
    second = run_load(config, spark=spark)
    assert second.sequence == 2 and second.rows == 4_000
    assert second.topics["land-b"].rows == 0
    for r in second.topics["land-a"].ranges:
        assert r.start == next(x.end for x in first.topics["land-a"].ranges if x.partition == r.partition)
    assert_landed_exactly(out, sent)

    third = run_load(config, spark=spark)
    assert third.sequence is None and third.rows == 0
    store = LandingStore(LocalFileSystem(), out.as_uri())
    assert store.committed() == [1, 2]
    assert store.latest().offsets["land-b"] == {r.partition: r.end for r in first.topics["land-b"].ranges}


def test_cli_prints_a_summary(spark, broker_cluster, tmp_path, capsys):
    cluster = broker_cluster(1)
    produce(cluster.zk_connect, "cli-topic", 2, 5_000)
    config_file = tmp_path / "loader.toml"
    config_file.write_text(f"""
[source]
zk = "{cluster.zk_connect}"
topics = ["cli-topic"]
[output]
uri = "{(tmp_path / "wh").as_uri()}"
[spark]
master = "local[2]"
""")
    assert cli.main(["load", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert "run 1 committed: 5,000 rows" in out
    assert "cli-topic: 5,000 rows" in out and "partition 1: offsets [0, " in out
    assert "rows/s" in out
    # no audit topic in this cluster yet (no agent published to it): nothing to audit,
    # which is not a failure: the run commits its data, says so and exits 0
    produce(cluster.zk_connect, "cli-topic", 2, 1_000, start=5_000)
    assert cli.main(["load", "--config", str(config_file), "--require-complete", "0.99"]) == 0
    captured = capsys.readouterr()
    assert "run 2 committed: 1,000 rows" in captured.out
    assert (
        "audit: topic '_audit' does not exist yet (no agent has published audit records): nothing to audit"
    ) in captured.out
    assert "error" not in captured.err
    assert cli.main(["load", "--config", str(config_file), "--require-complete", "0.99"]) == 0
    captured = capsys.readouterr()
    assert "nothing new to land" in captured.out and "nothing to audit" in captured.out
    assert cli.main(["load", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "no such config file" in capsys.readouterr().err


def test_cli_exits_1_when_the_cluster_is_unreachable(tmp_path, capsys):
    config_file = tmp_path / "loader.toml"
    config_file.write_text(f"""
[source]
brokers = ["127.0.0.1:1"]
topics = ["cli-topic"]
[output]
uri = "{(tmp_path / "wh").as_uri()}"
[audit]
enabled = true
""")
    assert cli.main(["load", "--config", str(config_file)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("logferry load: error: ") and "127.0.0.1:1" in err


def test_retention_gap_is_named_or_skipped_with_a_report(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(
        1, broker={"retention_check_ms": 100}, log={"segment_bytes": 64 * 1024, "retention_bytes": 200 * 1024}
    )
    zk = cluster.zk_connect
    produce(zk, "ret", 1, 500, value_bytes=100)
    out = tmp_path / "wh"
    config = loader_config(zk, out, ["ret"])
    first = run_load(config, spark=spark)
    landed_end = first.topics["ret"].ranges[0].end
    for i in range(10):  # separate requests: the broker rolls a segment between appends
        produce(zk, "ret", 1, 1_000, start=500 + i * 1_000, value_bytes=100)
    with SimpleConsumer(zk=zk) as consumer:
        deadline = time.monotonic() + 30
        while consumer.offsets("ret", 0).start <= landed_end:
            assert time.monotonic() < deadline, "retention did not delete old segments"
            time.sleep(0.2)
        log_start = consumer.offsets("ret", 0).start
    with pytest.raises(RetentionGapError, match=rf"ret/0: offsets \[{landed_end}, \d+\)") as info:
        run_load(config, spark=spark)
    assert info.value.gaps[0].start == landed_end and info.value.gaps[0].end >= log_start
    store = LandingStore(LocalFileSystem(), out.as_uri())
    assert store.committed() == [1]  # nothing committed, lock released
    assert not (out / "_logferry" / "lock").exists()

    skip = loader_config(zk, out, ["ret"], load={"on_retention_gap": "skip"})
    second = run_load(skip, spark=spark)
    assert [g.start for g in second.gaps] == [landed_end]
    assert second.topics["ret"].ranges[0].start == second.gaps[0].end
    assert store.latest().gaps[0].start == landed_end
    table = read_landed(out)
    values = table.column("value").to_pylist()
    assert len(values) == len(set(values)) == 500 + second.rows


def test_agent_records_land_decoded_through_the_hadoop_filesystem(spark, broker_cluster, tmp_path):
    from agent.encode import chunk_prefix, encode_values

    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    lines = [b"GET /item/%d 200" % i for i in range(3_000)]
    prefix = chunk_prefix(BASE_HOUR_MS + 5_000, "web-7", "/var/log/access.log")
    values = encode_values(prefix, lines, [i * 20 for i in range(3_000)])
    values[10] = b"\xc1 not an agent record"
    with Producer(zk=zk) as producer:
        producer.send("agent-log", values, partition=0, timestamp=BASE_HOUR_MS + 5_000).wait(30)
    produce(zk, "plain-log", 1, 500)
    out = tmp_path / "wh"
    config = loader_config(
        zk,
        out,
        ["agent-log", "plain-log"],
        source={"decode_agent_records": ["agent-log"]},
        output={"filesystem": "hadoop"},
    )
    result = run_load(config, spark=spark)
    assert result.rows == 3_500 and result.undecodable == 1
    table = read_landed(out).to_pydict()
    rows = {
        (t, o, i): (h, f, fo, line, d)
        for t, o, i, h, f, fo, line, d in zip(
            table["topic"],
            table["offset"],
            table["index"],
            table["host"],
            table["file"],
            table["file_offset"],
            table["line"],
            table["decoded"],
            strict=True,
        )
    }
    agent_rows = sorted((k, v) for k, v in rows.items() if k[0] == "agent-log")
    assert len(agent_rows) == 3_000
    (_, first), (_, bad) = agent_rows[0], agent_rows[10]
    assert first == ("web-7", "/var/log/access.log", 0, "GET /item/0 200", True)
    assert bad == (None, None, None, None, False)
    plain = [v for k, v in rows.items() if k[0] == "plain-log"]
    assert len(plain) == 500 and all(v == (None, None, None, None, None) for v in plain)


def test_first_run_latest_records_where_it_starts(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    produce(zk, "late", 2, 1_000)
    out = tmp_path / "wh"
    config = loader_config(zk, out, ["late"], load={"first_run": "latest"})
    first = run_load(config, spark=spark)
    assert first.sequence == 1 and first.rows == 0  # nothing landed, the start recorded
    assert read_landed(out) is None
    later = produce(zk, "late", 2, 300, start=1_000)
    second = run_load(config, spark=spark)
    assert second.rows == 300
    assert sorted(read_landed(out).column("value").to_pylist()) == sorted(v for msgs in later.values() for v, _ in msgs)
    assert run_load(config, spark=spark).sequence is None


def test_partitions_added_between_runs_are_landed_from_their_start(spark, broker_cluster, tmp_path):
    """A topic grown from 2 to 4 partitions (`logferry topic alter --partitions`): the next
    run lands the new partitions from their first message, the old ones from where the
    last run stopped; every message once."""
    from broker.client import Admin

    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    sent = {"growing": produce(zk, "growing", 2, 4_000, hours=1)}
    out = tmp_path / "wh"
    config = loader_config(zk, out, ["growing"])
    first = run_load(config, spark=spark)
    assert first.rows == 4_000
    with Admin(zk=zk) as admin:
        assert len(admin.create_partitions("growing", 4)) == 4
    more = {"growing": produce(zk, "growing", 4, 8_000, start=4_000, hours=1, create=False)}
    merge(sent, more)
    second = run_load(config, spark=spark)
    assert second.rows == 8_000
    assert sorted(r.partition for r in second.topics["growing"].ranges) == [0, 1, 2, 3]
    for r in second.topics["growing"].ranges:
        if r.partition >= 2:
            assert r.start == 0, r  # a new partition: from its first byte
    rows = assert_landed_exactly(out, sent)
    assert {p for _, p, *_ in rows} == {0, 1, 2, 3}

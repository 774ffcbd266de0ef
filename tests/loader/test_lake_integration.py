"""The lake's truth and dedup, end to end: real brokers, Spark local mode, real files.

- A landed file deleted or truncated by hand is found by the next run (path, expected
  and found), also when that run's cache (``--every``) had verified it before,
  and the command exits 1; the audit counts the rows really there; ``--repair``
  lands both again from the cluster and the rows are back, each once.
- The same agent records published twice land once with dedup on (copies in the same
  run, in another partition, and in a later run), counted in the summary, the manifest
  and the audit; with dedup off every copy lands, as before.
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import msgpack
import pytest

from agent.encode import chunk_prefix, encode_values
from broker.client import Admin, Producer
from hadoop_loader import cli
from hadoop_loader.audit import hour_key
from hadoop_loader.fs import LocalFileSystem
from hadoop_loader.job import run_load
from hadoop_loader.lake_cache import LakeCache
from hadoop_loader.store import LandingStore
from hadoop_loader.summary import print_audit, print_summary
from tests.loader.conftest import (
    BASE_HOUR_MS,
    HOUR_MS,
    loader_config,
    produce,
    read_landed,
    wait_visible,
)
from tests.loader.test_load_integration import assert_landed_exactly, audit_records

pytestmark = pytest.mark.integration

UTC_HOURS = ("2024-03-01T00", "2024-03-01T01", "2024-03-01T02")


def landed_files(out: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(out.rglob("*.parquet")) if "_logferry" not in p.parts}


def write_config(path: Path, zk: str, out: Path, topics: list[str], extra: str = "") -> Path:
    path.write_text(
        f"""
[source]
zk = "{zk}"
topics = {topics!r}
[output]
uri = "{out.as_uri()}"
[audit]
enabled = true
settle_minutes = 0
lookback_hours = {24 * 365 * 10}
[spark]
master = "local[2]"
{extra}
""".replace("'", '"')
    )
    return path


@pytest.mark.slow
def test_deleted_and_truncated_files_are_reported_then_repaired(spark, broker_cluster, tmp_path, capsys):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    sent = {"lake-a": produce(zk, "lake-a", 2, 6_000, hours=3)}
    with Producer(zk=zk) as producer:
        producer.send("_audit", audit_records(sent), partition=0).wait(30)
    out = tmp_path / "wh"
    config = loader_config(
        zk, out, ["lake-a"], audit={"enabled": True, "settle_minutes": 0, "lookback_hours": 24 * 365 * 10}
    )
    cache = LakeCache()  # shared by the runs, as by those of one `--every` loop
    first = run_load(config, spark=spark, cache=cache)
    assert first.rows == 6_000 and first.lake is not None and first.lake.files == 0
    between = run_load(config, spark=spark, cache=cache)  # reads run 1's manifest and footers once
    assert between.sequence is None and between.lake.ok
    assert (between.lake.manifests_read, between.lake.footers_read) == (1, 3)
    files = landed_files(out)
    assert sorted(files) == ["hr=00", "hr=01", "hr=02"]
    rows_per_hour = {h.hour: h.landed for h in first.audit.hours}
    assert all(h.missing == 0 and h.duplicates == 0 for h in first.audit.hours)

    deleted, truncated = files["hr=00"], files["hr=01"]
    deleted.unlink()
    size = truncated.stat().st_size
    with open(truncated, "r+b") as f:
        f.truncate(size // 2)

    # the next run lands nothing new, finds both (the cache spares only hr=02's footer),
    # and the audit counts what is there
    second = run_load(config, spark=spark, cache=cache)
    assert second.sequence is None and (second.lake.manifests_read, second.lake.footers_read) == (0, 1)
    damaged = {Path(d.path).parent.name: d for d in second.lake.damaged}
    assert sorted(damaged) == ["hr=00", "hr=01"] and second.lake.files == 3
    assert damaged["hr=00"].found_size is None
    assert damaged["hr=01"].found_size == size // 2 and damaged["hr=01"].found_rows is None
    assert damaged["hr=01"].expected_size == size
    by_hour = {h.hour: h for h in second.audit.hours}
    assert by_hour[UTC_HOURS[0]].landed == 0
    assert by_hour[UTC_HOURS[0]].missing == rows_per_hour[UTC_HOURS[0]]
    assert by_hour[UTC_HOURS[1]].landed == 0
    assert by_hour[UTC_HOURS[2]].landed == rows_per_hour[UTC_HOURS[2]]
    assert second.lake.rows == rows_per_hour[UTC_HOURS[2]]

    # the command says so: the paths, expected and found, and exit 1
    config_file = write_config(tmp_path / "loader.toml", zk, out, ["lake-a"])
    capsys.readouterr()
    assert cli.main(["load", "--config", str(config_file)]) == 1
    captured = capsys.readouterr()
    assert "2 of 3 landed file(s) MISSING OR DAMAGED" in captured.out
    rel_deleted = deleted.relative_to(out).as_posix()
    assert f"DAMAGED {rel_deleted} (run 1): expected " in captured.out
    assert "missing: the file is gone" in captured.out
    assert f"found {size // 2:,} bytes, no readable footer" in captured.out
    assert captured.err.startswith("logferry load: error: 2 landed file(s) missing or damaged")
    assert "--repair" in captured.err

    # --repair lands both again from the cluster: the rows are back, each once
    assert cli.main(["load", "--config", str(config_file), "--repair"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("REPAIRED ") == 2, captured.out
    assert_landed_exactly(out, sent)
    third = run_load(config, spark=spark)
    assert third.lake.ok and third.lake.rows == 6_000 and third.lake.files == 3
    assert {h.hour: h.landed for h in third.audit.hours} == rows_per_hour
    assert all(h.missing == 0 for h in third.audit.hours)
    store = LandingStore(LocalFileSystem(), out.as_uri())
    repair = store.latest()
    assert repair.repairs and repair.ranges == [] and repair.offsets == store.read_manifest(1).offsets
    # new data after a repair lands as usual
    more = {"lake-a": produce(zk, "lake-a", 2, 600, start=6_000, hours=1)}
    sent["lake-a"] = {p: sent["lake-a"][p] + more["lake-a"][p] for p in sent["lake-a"]}
    fourth = run_load(config, spark=spark)
    assert fourth.rows == 600 and fourth.lake.ok
    assert_landed_exactly(out, sent)


FID = 4_811_916_302_335_812_043


def agent_values(first: int, last: int, time_ms: int, host: str = "web-1") -> list[bytes]:
    """Agent records of lines ``first``..``last`` - 1 of one file generation."""
    lines = [b"line %06d of the app log" % i for i in range(first, last)]
    offsets = [i * 100 for i in range(first, last)]
    return encode_values(chunk_prefix(time_ms, host, "/var/log/app.log", file_id=FID), lines, offsets)


def send(zk: str, topic: str, partition: int, values: list[bytes], ts: int) -> None:
    with Producer(zk=zk, linger_ms=5) as producer:
        for i in range(0, len(values), 200):
            producer.send(topic, values[i : i + 200], partition=partition, timestamp=ts)
        producer.flush(timeout=60)


def agent_audit(topic: str, counts: dict[int, int]) -> list[bytes]:
    """What the agent would publish: acked messages per 10-minute window."""
    return [
        msgpack.packb(
            {
                "host": "web-1",
                "topic": topic,
                "window_start": w,
                "window_end": w + 600_000,
                "sent": n,
                "acked": n,
                "stage": "agent",
            }
        )
        for w, n in sorted(counts.items())
    ]


@pytest.mark.slow
def test_records_published_twice_land_once_with_dedup_on(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    topic = "dedup-a"
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, 2)
    t0, t1 = BASE_HOUR_MS + 60_000, BASE_HOUR_MS + HOUR_MS + 60_000
    # lines 0-999; the agent restarts and sends 500-999 again (later time) and 1000-1499;
    # a copy of 700-799 reaches the other partition (a stage that re-sent on a move)
    send(zk, topic, 0, agent_values(0, 1000, t0), t0)
    send(zk, topic, 0, agent_values(500, 1500, t1), t1)
    send(zk, topic, 1, agent_values(700, 800, t1), t1)
    wait_visible(zk, topic)
    with Producer(zk=zk) as producer:
        producer.send(
            "_audit", agent_audit(topic, {t0 - t0 % 600_000: 1000, t1 - t1 % 600_000: 1000}), partition=0
        ).wait(30)
    audit = {"enabled": True, "settle_minutes": 0, "lookback_hours": 24 * 365 * 10}
    out = tmp_path / "wh"
    config = loader_config(
        zk, out, [topic], source={"decode_agent_records": True}, dedup={"enabled": True}, audit=audit
    )
    first = run_load(config, spark=spark)
    assert first.rows == 1_500 and first.duplicates == 600
    assert first.topics[topic].duplicates == 600
    text = io.StringIO()
    print_summary(first, text)
    assert f"{topic}: 1,500 rows" in text.getvalue() and "600 duplicate(s) dropped" in text.getvalue()
    h0, h1 = hour_key(t0, dt.UTC), hour_key(t1, dt.UTC)
    by_hour = {h.hour: h for h in first.audit.hours}
    assert (by_hour[h0].landed, by_hour[h0].duplicates, by_hour[h0].missing) == (1000, 0, 0)
    # the agent counted its 1,000 sends of hour 1 (500 copies among them); 100 more copies
    # came from elsewhere: nothing missing, 100 beyond the agent's count
    assert (by_hour[h1].landed, by_hour[h1].duplicates, by_hour[h1].missing, by_hour[h1].extra) == (500, 600, 0, 100)
    table = io.StringIO()
    print_audit(first.audit, table)
    assert "duplicates" in table.getvalue() and "missing" in table.getvalue()
    manifest = LandingStore(LocalFileSystem(), out.as_uri()).latest()
    assert manifest.duplicates == {topic: {h1: 600}} and manifest.identities

    # a later run: copies of landed lines (1200-1499) and new ones (1500-1599)
    send(zk, topic, 0, agent_values(1200, 1600, t1 + 60_000), t1 + 60_000)
    wait_visible(zk, topic)
    second = run_load(config, spark=spark)
    assert second.rows == 100 and second.duplicates == 300
    landed = read_landed(out).to_pydict()
    keys = sorted(zip(landed["file_id"], landed["file_offset"], strict=True))
    assert keys == [(FID, i * 100) for i in range(1600)]
    lines = sorted(landed["line"])
    assert lines == sorted(f"line {i:06d} of the app log" for i in range(1600))

    # dedup off: today's behaviour, every copy lands
    plain = loader_config(zk, tmp_path / "plain", [topic], source={"decode_agent_records": True})
    everything = run_load(plain, spark=spark)
    assert everything.rows == 1000 + 1000 + 100 + 400 and everything.duplicates == 0
    assert not everything.dedup

"""The mirror between two real clusters: copy, crashes, new topics, sharing, gzip, gaps.

The tests that leave the brokers running share the module's source and target
(``module_two_clusters``), each with its own topics and mirror group; those that stop
a broker or need other broker settings start their own (``two_clusters``)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from broker.client import decode_batch
from broker.client.group.offsets import Committed, read_offsets, read_owners, write_offsets
from broker.wire import records
from tests.mirror.conftest import (
    assert_mirrored,
    create,
    ends,
    message_count,
    mirrored,
    produce,
    read_batches,
    wait_for,
)
from tests.support.cli import logferry
from tests.support.metrics import promtool_check, samples, scrape, value
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

TOPICS = {"clicks": 4, "views": 3, "errors": 2}


def _offsets(zk: str, group: str) -> dict:
    client = KazooClient(hosts=zk)
    client.start(10)
    try:
        return {tp: c.offset for tp, c in read_offsets(client, group).items()}
    finally:
        client.stop()
        client.close()


def test_500k_messages_on_3_topics_arrive_once_byte_equal_in_partition_order(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    topics = {unique_name(topic): n for topic, n in TOPICS.items()}
    for topic, n in topics.items():
        create(source.zk_connect, topic, n)
    group = unique_name("mirror")
    mirror = mirrors("m1", source, target, topics=list(topics), group=group)
    counts = {unique_name("clicks"): 250_000, unique_name("views"): 150_000, unique_name("errors"): 100_000}
    for topic, count in counts.items():
        compression = "gzip" if topic == unique_name("errors") else "none"
        produce(source.zk_connect, topic, count, topics[topic], compression=compression)
    for topic in topics:
        wait_for(
            lambda topic=topic: mirrored(source.zk_connect, target.zk_connect, topic, exact=True),
            90,
            f"{topic} to be mirrored",
        )
    assert mirror.terminate() == 0  # SIGTERM: finish, commit, exit 0
    total = 0
    for topic, n in topics.items():
        assert_mirrored(source.zk_connect, target.zk_connect, topic, exact=True)
        batches = read_batches(target.zk_connect, topic)
        assert len(batches) == n  # created with the source's partition count
        assert message_count(batches) == counts[topic]
        total += message_count(batches)
    assert total == 500_000
    # Committed source positions are the source ends: a restart copies nothing again.
    committed = _offsets(source.zk_connect, group)
    for topic in topics:
        for p, end in ends(source.zk_connect, topic).items():
            assert committed[(topic, p)] == end
    status = mirror.status()
    assert status["messages_total"] == 500_000
    out = logferry("mirror", "status", "--config", str(mirror.config_file), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["lag_bytes"] == 0 and len(doc["partitions"]) == sum(topics.values())


def test_gzip_batches_arrive_as_gzip_batches(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    zipped = unique_name("zipped")
    create(source.zk_connect, zipped, 2)
    mirror = mirrors("m1", source, target, topics=[zipped], group=unique_name("mirror"))
    produce(source.zk_connect, zipped, 20_000, 2, compression="gzip", size=200)
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, zipped, exact=True), 60, "zipped to be mirrored")
    batches = read_batches(target.zk_connect, zipped)
    codecs = {records.BATCH_HEADER.unpack_from(b)[3] & 3 for bs in batches.values() for b in bs}
    assert codecs == {records.CODEC_GZIP}
    stored = sum(len(b) for bs in batches.values() for b in bs)
    assert stored < 20_000 * 200 / 3  # still compressed on the target
    assert mirror.terminate() == 0


def test_zstd_and_lz4_batches_are_copied_as_they_are(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    codec_of = {unique_name(codec): codec for codec in ("zstd", "lz4")}
    for topic in codec_of:
        create(source.zk_connect, topic, 2)
    mirror = mirrors("m1", source, target, topics=list(codec_of), group=unique_name("mirror"))  # default config
    for topic, codec in codec_of.items():
        produce(source.zk_connect, topic, 20_000, 2, compression=codec, size=200)
    for topic, codec in codec_of.items():
        wait_for(
            lambda topic=topic: mirrored(source.zk_connect, target.zk_connect, topic, exact=True),
            60,
            f"{topic} to be mirrored",
        )
        assert_mirrored(source.zk_connect, target.zk_connect, topic, exact=True)  # byte for byte
        batches = read_batches(target.zk_connect, topic)
        attributes = {records.BATCH_HEADER.unpack_from(b)[3] for bs in batches.values() for b in bs}
        assert attributes == {records.CODECS[codec]}
        assert message_count(batches) == 20_000
    assert mirror.terminate() == 0


def test_mirror_compression_compresses_uncompressed_batches_only(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    plain, zipped = unique_name("plain"), unique_name("zipped")
    create(source.zk_connect, plain, 2)
    create(source.zk_connect, zipped, 2)
    mirror = mirrors("m1", source, target, topics=[plain, zipped], compression="zstd", group=unique_name("mirror"))
    produce(source.zk_connect, plain, 20_000, 2, size=200)
    produce(source.zk_connect, zipped, 5_000, 2, compression="gzip", size=200)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, zipped, exact=True),
        60,
        "zipped to be mirrored as it is",
    )
    src_ends = ends(source.zk_connect, plain)
    wait_for(lambda: message_count(read_batches(target.zk_connect, plain)) == 20_000, 60, "plain to be mirrored")
    source_batches, target_batches = (
        read_batches(source.zk_connect, plain),
        read_batches(target.zk_connect, plain),
    )
    for p, batches in source_batches.items():
        copied = target_batches[p]
        assert len(copied) == len(batches)
        for before, after in zip(batches, copied, strict=True):  # same messages, same order, now zstd
            old, new = decode_batch(before), decode_batch(after)
            assert new.codec == records.CODEC_ZSTD and old.codec == records.CODEC_NONE
            assert (new.values, new.keys, new.timestamps) == (old.values, old.keys, old.timestamps)
    assert sum(ends(target.zk_connect, plain).values()) < sum(src_ends.values()) / 3
    assert mirror.terminate() == 0


def test_metrics_endpoint_counts_what_was_copied_and_passes_promtool(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    scraped = unique_name("scraped")
    create(source.zk_connect, scraped, 2)
    port = free_port()
    mirror = mirrors("m1", source, target, topics=[scraped], metrics={"port": port}, group=unique_name("mirror"))
    produce(source.zk_connect, scraped, 1_000, 2)
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, scraped, exact=True), 60, "scraped to be mirrored")
    text = wait_for(
        lambda: _scrape_when(port, "logferry_mirror_messages_total", topic=scraped, equals=1_000),
        20,
        "the copy counted",
    )
    parsed = samples(text)
    assert value(parsed, "logferry_mirror_partitions_owned") == 2
    assert "# TYPE logferry_mirror_gaps_total counter" in text
    promtool_check(text)
    assert mirror.terminate() == 0


def _scrape_when(port: int, name: str, equals: float, **labels: str) -> str | None:
    """The mirror's metrics text once ``name{labels}`` equals ``equals``, else None."""
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return None  # not listening yet
    return text if value(samples(text), name, **labels) == equals else None


@pytest.mark.slow
def test_kill_9_of_the_mirror_target_down_10s_and_source_restart_lose_nothing(two_clusters, mirrors):
    source, target = two_clusters()
    create(source.zk_connect, "events", 4)
    mirror = mirrors("m1", source, target, topics=["events"], poll_max_bytes=256 * 1024)

    def keep_producing() -> None:
        for round_ in range(1, 12):
            produce(source.zk_connect, "events", 5_000, 4, tag=f"a{round_}")
            time.sleep(0.2)

    produce(source.zk_connect, "events", 5_000, 4, tag="a0")
    wait_for(lambda: sum(ends(target.zk_connect, "events").values()) > 0, 60, "copying to begin")
    # the other rounds start only now: a mirror slow to start (a busy machine) must not
    # find them all written before the kill
    producer = threading.Thread(target=keep_producing)
    producer.start()
    mirror.kill()  # kill -9 mid-way: data is still coming in
    assert producer.is_alive()
    mirror.start()
    producer.join(60)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=False),
        90,
        "events after a kill -9 and restart",
    )

    target.brokers[0].stop()  # target cluster down for 10 s while data keeps coming
    produce(source.zk_connect, "events", 40_000, 4, tag="b")
    time.sleep(10)
    assert mirror.alive()
    target.brokers[0].start()
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=False),
        90,
        "events after the target came back",
    )

    source.brokers[0].stop()  # source broker restarted
    source.brokers[0].start()
    produce(source.zk_connect, "events", 40_000, 4, tag="c")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "events", exact=False),
        90,
        "events after the source restarted",
    )
    assert mirror.terminate() == 0
    assert_mirrored(source.zk_connect, target.zk_connect, "events", exact=False)
    assert message_count(read_batches(source.zk_connect, "events")) == 140_000


def test_new_topic_matching_the_pattern_is_copied_without_restart_others_are_not(
    module_two_clusters, unique_name, mirrors
):
    source, target = module_two_clusters
    web, new, metrics, private = (unique_name(t) for t in ("logs-web", "logs-new", "metrics", "logs-private"))
    create(source.zk_connect, web, 2)
    # pattern and exclusion made of this test's names: the source is shared with other tests
    mirror = mirrors(
        "m1",
        source,
        target,
        pattern=unique_name("logs-.*"),
        exclude=[unique_name("logs-private.*")],
        group=unique_name("mirror"),
    )
    produce(source.zk_connect, web, 1_000, 2)
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, web, exact=True), 60, "logs-web")
    create(source.zk_connect, new, 3)  # created after the mirror started
    create(source.zk_connect, metrics, 1)  # outside the pattern
    create(source.zk_connect, private, 1)  # excluded
    for topic, n in ((new, 3), (metrics, 1), (private, 1)):
        produce(source.zk_connect, topic, 2_000, n)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, new, exact=True),
        60,
        "logs-new (created after the start)",
    )
    assert len(ends(target.zk_connect, new)) == 3
    time.sleep(2)
    assert mirror.terminate() == 0
    assert ends(target.zk_connect, metrics) == {}
    assert ends(target.zk_connect, private) == {}


def test_two_mirrors_share_partitions_and_one_takes_over_after_a_kill(module_two_clusters, unique_name, mirrors):
    source, target = module_two_clusters
    shared, group = unique_name("shared"), unique_name("mirror")
    create(source.zk_connect, shared, 6)
    first = mirrors("m1", source, target, topics=[shared], group=group)
    second = mirrors("m2", source, target, topics=[shared], group=group)

    def owners() -> dict:
        client = KazooClient(hosts=source.zk_connect)
        client.start(10)
        try:
            return read_owners(client, group)
        finally:
            client.stop()
            client.close()

    wait_for(lambda: len(owners()) == 6 and len(set(owners().values())) == 2, 60, "both mirrors to own partitions")
    produce(source.zk_connect, shared, 30_000, 6, tag="a")
    wait_for(lambda: mirrored(source.zk_connect, target.zk_connect, shared, exact=True), 60, "shared by two mirrors")
    wait_for(
        lambda: first.status().get("messages_total", 0) > 0 and second.status().get("messages_total", 0) > 0,
        10,
        "both mirrors to report copies (status files are rewritten every 2 s)",
    )
    first.kill()
    produce(source.zk_connect, shared, 30_000, 6, tag="b")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, shared, exact=False), 60, "the survivor to take over"
    )
    wait_for(lambda: set(owners().values()) == {second.status().get("consumer_id")}, 30, "m2 to own everything")
    assert second.terminate() == 0


@pytest.mark.parametrize("on_gap", ["stop", "skip"])
def test_resume_offset_deleted_by_retention_stops_or_skips_loudly(two_clusters, mirrors, on_gap):
    source, target = two_clusters(
        source_broker={"retention_check_ms": 200}, source_log={"segment_bytes": 20_000, "retention_bytes": 40_000}
    )
    create(source.zk_connect, "old", 1)
    for round_ in range(8):  # one produce request per round, so segments roll
        produce(source.zk_connect, "old", 500, 1, batch=50, tag=str(round_))
    wait_for(lambda: _log_start(source.zk_connect, "old") > 0, 30, "retention to delete segments")
    client = KazooClient(hosts=source.zk_connect)
    client.start(10)
    write_offsets(client, "mirror", {("old", 0): Committed.now(0)})  # resume below the log start
    client.stop()
    client.close()
    mirror = mirrors("m1", source, target, topics=["old"], on_gap=on_gap)
    if on_gap == "stop":
        wait_for(lambda: "old-0" in (mirror.status().get("halted") or {}), 30, "the halt")
        time.sleep(2)
        assert not any(ends(target.zk_connect, "old").values())  # nothing copied
        out = logferry("mirror", "status", "--config", str(mirror.config_file))
        assert out.returncode == 0 and "GAP" in out.stdout and "halted: old-0" in out.stdout
        assert _offsets(source.zk_connect, "mirror")[("old", 0)] == 0  # nothing skipped
        assert "MIRROR PARTITION STOPPED" in mirror.log_tail(200)
    else:
        wait_for(lambda: mirror.status().get("gap_bytes_skipped"), 30, "the skip")
        assert mirror.status()["gap_bytes_skipped"] == _log_start(source.zk_connect, "old")
        wait_for(
            lambda: (
                message_count(read_batches(target.zk_connect, "old"))
                == message_count(read_batches(source.zk_connect, "old"))
            ),
            30,
            "the rest copied",
        )
        assert "MIRROR GAP SKIPPED" in mirror.log_tail(200)
    assert mirror.terminate() == 0


def _log_start(zk: str, topic: str) -> int:
    from broker.client import SimpleConsumer

    with SimpleConsumer(zk=zk) as consumer:
        return consumer.offsets(topic, 0).start

"""The sans-IO parts of per-topic settings, partition growth and controlled shutdown."""

from __future__ import annotations

import pytest

from broker.common import topic_config
from broker.common.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicConfigError,
    error_for_code,
)
from broker.coordination.partition_state import PartitionState, elect, leads_movable
from broker.coordination.registry import BrokerInfo, ClusterView
from broker.server.controlled_shutdown import movable_leadership
from broker.server.topic_settings import codec_for, compress_message_set, log_config_for
from broker.storage.config import LogConfig
from broker.wire import apis, protocol, records, topics
from broker.wire.codecs import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD

LIVE = {1: 101, 2: 102, 3: 103}


# -- per-topic settings ----------------------------------------------------------------


def test_pairs_are_read_typed_and_checked() -> None:
    assert topic_config.parse_pairs(
        [
            "retention_ms=60000",
            "compression= ZSTD ",
            "retention_bytes=-1",
            "min_insync_replicas=2",
            "visibility=Written",
        ]
    ) == {
        "retention_ms": 60000,
        "compression": "zstd",
        "retention_bytes": -1,
        "min_insync_replicas": 2,
        "visibility": "written",
    }


@pytest.mark.parametrize(
    "pair, key, words",
    [
        ("retention_hours=3", "retention_hours", "unknown topic setting"),
        ("retention_ms=soon", "retention_ms", "not an integer"),
        ("retention_ms=0", "retention_ms", "positive number of milliseconds"),
        ("retention_bytes=-2", "retention_bytes", "-1 for unlimited"),
        ("segment_bytes=10", "segment_bytes", ">= 1024"),
        ("compression=snappy", "compression", "producer, none, gzip, lz4, zstd"),
        ("visibility=soon", "visibility", "flushed, written"),
        ("min_insync_replicas=0", "min_insync_replicas", "positive integer"),
        ("retention_ms", "retention_ms", "key=value"),
    ],
)
def test_a_bad_pair_is_refused_naming_its_key(pair: str, key: str, words: str) -> None:
    with pytest.raises(InvalidTopicConfigError, match=words) as caught:
        topic_config.parse_pairs([pair])
    assert caught.value.key == key
    assert key in str(caught.value)


def test_errors_travel_as_codes_50_and_51_and_are_invalid_requests() -> None:
    assert type(error_for_code(50, "x")) is InvalidTopicConfigError
    assert type(error_for_code(51, "x")) is InvalidPartitionsError
    assert isinstance(error_for_code(50, "x"), InvalidRequestError)


def test_altered_sets_then_deletes_and_min_insync_is_bounded_by_the_replicas() -> None:
    now = topic_config.altered({"retention_ms": 5, "segment_ms": 9}, {"retention_ms": "7"}, ["segment_ms"])
    assert now == {"retention_ms": 7}
    with pytest.raises(InvalidTopicConfigError, match="bogus"):
        topic_config.altered({}, {}, ["bogus"])
    topic_config.check_min_insync({"min_insync_replicas": 3}, 3)
    with pytest.raises(InvalidTopicConfigError, match="replication factor"):
        topic_config.check_min_insync({"min_insync_replicas": 3}, 2)


def test_overrides_replace_the_brokers_log_settings_and_nothing_else() -> None:
    base = LogConfig(flush_ms=7)
    assert log_config_for(base, {}) is base
    assert log_config_for(base, {"compression": "zstd"}) is base
    mine = log_config_for(base, {"retention_ms": 1000, "segment_bytes": 4096, "min_insync_replicas": 2})
    assert (mine.retention_ms, mine.segment_bytes, mine.flush_ms) == (1000, 4096, 7)
    assert mine.segment_ms == base.segment_ms and mine.visibility == "flushed"
    assert log_config_for(base, {"visibility": "written"}).visibility == "written"


def test_compression_policy_compresses_plain_batches_and_keeps_compressed_ones() -> None:
    assert codec_for({}) is None and codec_for({"compression": "producer"}) is None
    assert codec_for({"compression": "zstd"}) == CODEC_ZSTD
    plain = records.encode_batch([b"a" * 100] * 20, None, 1)
    packed = records.encode_batch([b"b"] * 3, None, 2, codec=CODEC_GZIP)
    chunk = plain + packed
    out = bytes(compress_message_set(chunk, CODEC_ZSTD))
    assert out.endswith(packed) and len(out) < len(chunk)
    scan = records.validate_message_set(out)
    assert scan.messages == 23
    values = [v for b in records.decode_batches(out, 0)[0] for v in b.values]
    assert values == [b"a" * 100] * 20 + [b"b"] * 3
    assert compress_message_set(packed, CODEC_ZSTD) is packed
    assert compress_message_set(chunk, CODEC_NONE) is chunk


# -- wire -------------------------------------------------------------------------------


def test_alter_and_create_partitions_requests_parse_and_refuse_bad_input() -> None:
    assert protocol.API_NAMES[7] == "alter_topic" and protocol.API_NAMES[8] == "create_partitions"
    request = topics.parse_alter_topic_request({"topic": "t", "set": {"retention_ms": 10}, "delete": ["compression"]})
    assert request == topics.AlterTopicRequest("t", {"retention_ms": 10}, ["compression"])
    assert topics.parse_alter_topic_request(topics.encode_alter_topic_request(request)) == request
    with pytest.raises(InvalidTopicConfigError, match="segment_bytes"):
        topics.parse_alter_topic_request({"topic": "t", "set": {"segment_bytes": 1}})
    with pytest.raises(InvalidRequestError, match="needs settings"):
        topics.parse_alter_topic_request({"topic": "t"})
    grow = topics.parse_create_partitions_request({"topic": "t", "partitions": 6})
    assert grow == topics.CreatePartitionsRequest("t", 6)
    with pytest.raises(InvalidPartitionsError):
        topics.parse_create_partitions_request({"topic": "t", "partitions": 0})
    created = topics.parse_create_topic_request(
        {"topic": "t", "config": {"retention_ms": "5"}, "min_insync_replicas": 2}
    )
    assert created.config == {"retention_ms": 5} and created.min_insync_replicas == 2
    head = apis.parse_request_head({"api": protocol.CREATE_PARTITIONS, "v": 1, "id": 3})
    assert head.name == "create_partitions"
    assert topics.parse_create_partitions_answer(
        {"id": 3, "err": 0, "partitions": {0: [1]}}
    ) == topics.CreatePartitionsAnswer({0: [1]})


# -- controlled shutdown ---------------------------------------------------------------


def test_a_shutting_down_leader_hands_over_to_the_first_other_in_sync_replica() -> None:
    state = PartitionState(1, 4, (1, 2, 3), 101)
    new = elect(state, [1, 2, 3], LIVE, shutting={1})
    assert new == PartitionState(2, 5, (1, 2, 3), 102)  # the leaving one stays in the ISR
    assert elect(state, [1, 3, 2], LIVE, shutting={1, 3}).leader == 2


def test_a_shutting_down_leader_with_no_other_in_sync_replica_stays() -> None:
    assert elect(PartitionState(1, 4, (1,), 101), [1, 2, 3], LIVE, shutting={1}) is None


def test_preferred_election_and_failover_avoid_shutting_down_brokers() -> None:
    led_by_2 = PartitionState(2, 4, (1, 2, 3), 102)
    assert elect(led_by_2, [1, 2, 3], LIVE, preferred=True, shutting={1}) is None
    gone = PartitionState(3, 4, (1, 2, 3), 999)  # 3 restarted: its old leadership is void
    assert elect(gone, [1, 2, 3], LIVE, shutting={1}).leader == 2
    # the only live in-sync replica leads even while shutting down: better than offline
    two = {1: 101, 2: 102}
    assert elect(PartitionState(3, 4, (1, 3), 103), [1, 2, 3], two, shutting={1}).leader == 1


def test_a_broker_waits_only_for_leadership_that_can_move() -> None:
    assert leads_movable(PartitionState(1, 0, (1, 2), 101), 1, {1, 2})
    assert not leads_movable(PartitionState(1, 0, (1,), 101), 1, {1, 2})
    assert not leads_movable(PartitionState(1, 0, (1, 2), 101), 1, {1})
    assert not leads_movable(PartitionState(2, 0, (1, 2), 102), 1, {1, 2})
    assert not leads_movable(None, 1, {1})
    view = ClusterView(
        brokers={1: BrokerInfo("h", 1), 2: BrokerInfo("h", 2)},
        states={
            ("t", 0): PartitionState(1, 0, (1, 2)),
            ("t", 1): PartitionState(2, 0, (1, 2)),
            ("u", 0): PartitionState(1, 0, (1,)),
        },
    )
    assert movable_leadership(view, 1) == [("t", 0)]


# -- producers notice growth -----------------------------------------------------------


def test_a_producer_adopts_a_grown_partition_count_and_never_a_smaller_one() -> None:
    import threading
    import time

    from broker.client import Producer

    producer = Producer(brokers=["127.0.0.1:9"], metadata_max_age_s=0)  # no watcher thread
    counts = {"grown": 4, "shrunk": 1}
    producer._partition_counts.update({"grown": 2, "shrunk": 3})
    producer.cluster.refresh = lambda topics: {}  # type: ignore[method-assign]
    producer.cluster.cached_partitions = (  # type: ignore[method-assign]
        lambda topic: dict.fromkeys(range(counts[topic]), 1)
    )
    producer.metadata_max_age_s = 0.01
    watcher = threading.Thread(target=producer._watch_partition_counts, daemon=True)
    watcher.start()
    try:
        deadline = time.monotonic() + 5
        while producer._partition_counts["grown"] != 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert producer._partition_counts == {"grown": 4, "shrunk": 3}
    finally:
        producer.close(timeout=1)
    watcher.join(5)
    assert not watcher.is_alive()

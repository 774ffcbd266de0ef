"""Kafka's own Java clients and command-line tools (Apache Kafka 4.4.0 from Maven Central,
``make kafka-jars``) against a logferry broker's Kafka listener (docs/kafka.md).

Everything runs in ONE JVM for the module (per xdist worker, like the module's shared
broker; tests/support/kafka_java.py): the idempotent KafkaProducer, KafkaConsumers in a
group (the classic protocol and KIP-848's consumer protocol), the Admin client, and the
tools' main classes in process (kafka-topics is TopicCommand, kafka-consumer-groups
ConsumerGroupCommand, ...). A JVM per tool call would cost 1-3 s of CPU each. The
tests share the module's broker, each with its own topics and groups, and none stops it
(its Kafka port would change under the JVM's clients).

Offsets: on the Kafka listener an offset counts messages (docs/kafka.md, Offsets), so
a partition that holds n messages from its start ends at n, and lag is in messages.

What logferry does not serve yet is an ``xfail(strict=True, raises=NotServed)`` test
that does the real thing: it fails only with the client's UnsupportedVersionException,
and starts passing, and so failing, the day the api is served.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.client import Admin, SimpleConsumer
from broker.common.errors import OffsetOutOfRangeError
from tests.integration.test_kafka_transactions import read_all
from tests.support.brokers import KAFKA_LISTENER, Cluster, KafkaCluster
from tests.support.kafka_java import JavaDriver, NotServed, unavailable_reason
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

N = 300

TOOLS = "org.apache.kafka.tools."
KAFKA_TOPICS = TOOLS + "TopicCommand"
KAFKA_CONSUMER_GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
KAFKA_CONFIGS = TOOLS + "ConfigCommand"
KAFKA_GET_OFFSETS = TOOLS + "GetOffsetShell"
KAFKA_DELETE_RECORDS = TOOLS + "DeleteRecordsCommand"
KAFKA_CONSOLE_PRODUCER = TOOLS + "ConsoleProducer"
KAFKA_CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"
BOOTSTRAP = ("--bootstrap-server", "{bootstrap}")  # the driver puts the listener's address in


def not_served(reason: str) -> pytest.MarkDecorator:
    """An api logferry does not serve: the test fails with the client's
    UnsupportedVersionException, and only with it (any other failure is a failure)."""
    return pytest.mark.xfail(raises=NotServed, strict=True, reason=reason)


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The broker the module's tests share speaks Kafka too."""
    return {"kafka": KAFKA_LISTENER}


@pytest.fixture(scope="module")
def _driver(_module_brokers: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaDriver]:
    """The module's one JVM, on the module's broker; skipped with the reason when Java 17
    or Kafka's jars are missing (``make kafka-jars`` says why it could not get them)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    driver = JavaDriver(KafkaCluster(_module_brokers).bootstrap, tmp_path_factory.mktemp("java") / "driver.log")
    yield driver
    driver.close()


@pytest.fixture
def java(_driver: JavaDriver, module_kafka_cluster: KafkaCluster) -> JavaDriver:
    """The driver, per test (``module_kafka_cluster`` checks the shared broker is up)."""
    return _driver


def native_ends(cluster: KafkaCluster, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end as logferry's own client reports it (a byte offset)."""
    with SimpleConsumer(brokers=cluster.native) as consumer:
        return {p: consumer.offsets(topic, p).end for p in range(partitions)}


def latest(java: JavaDriver, topic: str, partitions: int) -> dict[int, int]:
    """Admin.listOffsets(latest) for each partition."""
    answer = java.ok("list_offsets", topic=topic, partitions=list(range(partitions)), spec="latest")
    return {int(p): o for p, o in answer["offsets"].items()}


def committed(java: JavaDriver, group: str, topic: str) -> dict[int, int]:
    """Admin.listConsumerGroupOffsets for ``topic``'s partitions."""
    offsets = java.ok("group_offsets", group=group)["offsets"]
    return {int(key.rsplit(":", 1)[1]): o for key, o in offsets.items() if key.rsplit(":", 1)[0] == topic}


def table(stdout: str) -> list[dict[str, str]]:
    """The rows of a tool's table (``GROUP TOPIC PARTITION ...``) as dicts by header."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    header = lines[0]
    return [dict(zip(header, row, strict=False)) for row in lines[1:]]


def test_idempotent_producer_and_group_consumer_count_and_order(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, group = unique_name("jp"), unique_name("jg")
    cluster.create_topic(topic, 3)
    produced = java.ok("produce", topic=topic, partitions=3, count=N)
    assert produced["sent"] == N
    acked = {int(p): offsets for p, offsets in produced["offsets"].items()}
    for p in range(3):
        assert acked[p] == list(range(N // 3)), f"partition {p}: acked offsets are not 0..{N // 3 - 1}"

    got = java.ok("consume_group", topic=topic, group=group, count=N)["records"]
    assert len(got) == N
    for p in range(3):
        mine = [r for r in got if r[0] == p]
        assert [r[3] for r in mine] == [f"v{i}" for i in range(N) if i % 3 == p], f"partition {p} out of order"
        assert [r[2] for r in mine] == [f"k{i}" for i in range(N) if i % 3 == p]
        assert [r[1] for r in mine] == acked[p], "the consumer sees the offsets the producer was acked with"

    # After a full read the group's commit is the end: the partition's message count.
    ends = latest(java, topic, 3)
    assert committed(java, group, topic) == ends == {p: N // 3 for p in range(3)}


def test_transactional_producer_commits_and_aborts(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """Kafka's own transactional KafkaProducer: two committed and one aborted transaction
    of 20 records; a read_committed consumer (librdkafka) reads exactly the 40
    committed ones, a read_uncommitted one all 60."""
    topic = unique_name("jtx")
    module_kafka_cluster.create_topic(topic, 1)
    rounds = [{"records": 20, "commit": True}, {"records": 20, "commit": False}, {"records": 20, "commit": True}]
    java.ok("transactional", transactional_id=unique_name("tx"), topic=topic, transactions=rounds)
    committed = read_all(module_kafka_cluster.bootstrap, topic, 1, "read_committed", 40)
    assert sorted(v.decode() for v in committed) == sorted(f"v{t}-{i}" for t in (0, 2) for i in range(20))
    assert len(read_all(module_kafka_cluster.bootstrap, topic, 1, "read_uncommitted", 60)) == 60


def test_admin_topics_and_cluster_match_logferry(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("ja")
    java.ok("create_topics", topics=[{"name": topic, "partitions": 2}])
    with Admin(brokers=cluster.native) as admin:
        native = wait_until(
            lambda: (
                (parts := admin.describe_partitions(topic)) and all(i.leader >= 0 for i in parts.values()) and parts
            ),
            20,
            f"{topic}'s leaders",
            ignore=(Exception,),
        )
        described = java.ok("describe_topics", topics=[topic])["topics"][topic]
        assert {d["partition"]: (d["leader"], d["replicas"], d["isr"]) for d in described} == {
            p: (i.leader, i.replicas, i.isr) for p, i in native.items()
        }
        assert topic in java.ok("list_topics")["topics"]
        assert topic in admin.list_topics()

        described_cluster = java.ok("describe_cluster")
        nodes = {n["id"]: f"{n['host']}:{n['port']}" for n in described_cluster["nodes"]}
        assert nodes == {b.id: b.kafka_address() for b in cluster.brokers}
        assert described_cluster["controller"] in nodes

        java.ok("delete_topics", topics=[topic])
        wait_until(lambda: topic not in admin.list_topics(), 20, f"{topic} deleted")


def test_admin_consumer_groups_list_describe_and_alter_offsets(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, group = unique_name("jo"), unique_name("jog")
    cluster.create_topic(topic, 2)
    java.ok("produce", topic=topic, partitions=2, count=N)
    assert len(java.ok("consume_group", topic=topic, group=group, count=N)["records"]) == N

    listed = {g["group"]: g["state"] for g in java.ok("list_groups")["groups"]}
    assert listed.get(group) == "Empty"  # its one consumer closed
    described = java.ok("describe_groups", groups=[group])["groups"][group]
    assert (described["state"], described["type"], described["members"]) == ("Empty", "Classic", [])
    assert described["coordinator"] == cluster.brokers[0].id

    # Back to the start (0 under both meanings of an offset): the group reads it all again.
    earliest = java.ok("list_offsets", topic=topic, partitions=[0, 1], spec="earliest")["offsets"]
    java.ok("alter_group_offsets", group=group, topic=topic, offsets=earliest)
    assert committed(java, group, topic) == {int(p): o for p, o in earliest.items()} == {0: 0, 1: 0}
    again = java.ok("consume_group", topic=topic, group=group, count=N)["records"]
    assert sorted(r[3] for r in again) == sorted(f"v{i}" for i in range(N))


def test_describe_configs_shows_logferry_topic_and_broker_settings(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("jc")
    cluster.cluster.create_topic(topic, 1, config={"retention_ms": 3_600_000})
    with Admin(brokers=cluster.native) as admin:
        assert admin.topic_config(topic)["retention_ms"] == 3_600_000
    configs = java.ok("describe_configs", type="topic", name=topic)["configs"]
    assert configs["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["cleanup.policy"]["value"] == "delete"
    broker = java.ok("describe_configs", type="broker", name=str(cluster.brokers[0].id))["configs"]
    assert broker["broker.id"]["value"] == str(cluster.brokers[0].id)

    shown = java.tool(KAFKA_CONFIGS, *BOOTSTRAP, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert shown["exit"] == 0, shown
    assert "retention.ms=3600000" in shown["stdout"]


def test_kafka_topics_creates_lists_describes_and_deletes(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("jt")
    created = java.tool(KAFKA_TOPICS, *BOOTSTRAP, "--create", "--topic", topic, "--partitions", "3")
    assert (created["exit"], created["stdout"].strip()) == (0, f"Created topic {topic}."), created
    with Admin(brokers=cluster.native) as admin:
        assert sorted(admin.describe_topic(topic)) == [0, 1, 2]
        listed = java.tool(KAFKA_TOPICS, *BOOTSTRAP, "--list")
        assert listed["exit"] == 0 and topic in listed["stdout"].split()
        wait_until(lambda: all(i.leader >= 0 for i in admin.describe_partitions(topic).values()), 20, "leaders")
        described = java.tool(KAFKA_TOPICS, *BOOTSTRAP, "--describe", "--topic", topic)
        assert described["exit"] == 0, described
        assert "PartitionCount: 3\tReplicationFactor: 1" in described["stdout"]
        leader = cluster.brokers[0].id
        for p in range(3):
            assert f"Partition: {p}\tLeader: {leader}\tReplicas: {leader}\tIsr: {leader}" in described["stdout"]
        deleted = java.tool(KAFKA_TOPICS, *BOOTSTRAP, "--delete", "--topic", topic)
        assert deleted["exit"] == 0, deleted
        wait_until(lambda: topic not in admin.list_topics(), 20, f"{topic} deleted")


def test_kafka_topics_create_with_configs_sets_logferrys_topic_settings(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic, compacted, refused = unique_name("jtc"), unique_name("jtc-compact"), unique_name("jtc-refused")
    created = java.tool(
        KAFKA_TOPICS, *BOOTSTRAP, "--create", "--topic", topic, "--partitions", "2",
        "--config", "retention.ms=3600000", "--config", "compression.type=lz4",
    )  # fmt: skip
    assert created["exit"] == 0, created
    with Admin(brokers=module_kafka_cluster.native) as admin:
        assert admin.topic_config(topic) == {"retention_ms": 3_600_000, "compression": "lz4"}
        # compact: never deleted by retention (what Kafka Connect asks of its state topics)
        compact = java.tool(
            KAFKA_TOPICS, *BOOTSTRAP, "--create", "--topic", compacted, "--config", "cleanup.policy=compact"
        )
        assert compact["exit"] == 0, compact
        assert admin.topic_config(compacted) == {"cleanup_policy": "compact"}
        # A config logferry has no setting for: the topic is not created, and the tool says why.
        unknown = java.tool(
            KAFKA_TOPICS, *BOOTSTRAP, "--create", "--topic", refused, "--config", "max.message.bytes=2000"
        )
        assert unknown["exit"] != 0
        assert "'max.message.bytes' cannot be set on logferry" in unknown["stdout"], unknown
        assert refused not in admin.list_topics()


def test_console_producer_consumer_and_get_offsets(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("jcon")
    cluster.create_topic(topic, 1)
    lines = "".join(f"k{i}|line {i}\n" for i in range(N))
    produced = java.tool(
        KAFKA_CONSOLE_PRODUCER, *BOOTSTRAP, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=|",
        stdin=lines,
    )  # fmt: skip
    assert produced["exit"] == 0, produced
    consumed = java.tool(
        KAFKA_CONSOLE_CONSUMER, *BOOTSTRAP, "--topic", topic, "--from-beginning",
        "--max-messages", str(N), "--timeout-ms", "20000",
        "--formatter-property", "print.key=true", "--formatter-property", "key.separator=|",
    )  # fmt: skip
    assert consumed["exit"] == 0, consumed
    assert consumed["stdout"] == lines
    assert f"Processed a total of {N} messages" in consumed["stderr"]

    offsets = java.tool(KAFKA_GET_OFFSETS, *BOOTSTRAP, "--topic", topic)
    assert offsets["exit"] == 0, offsets
    name, partition, end = offsets["stdout"].strip().rsplit(":", 2)
    assert (name, partition) == (topic, "0")
    assert int(end) == N  # messages, not bytes
    assert latest(java, topic, 1) == {0: int(end)}
    first = java.tool(KAFKA_GET_OFFSETS, *BOOTSTRAP, "--topic", topic, "--time", "-2")
    assert first["stdout"].split() == [f"{topic}:0:0"]


def test_kafka_consumer_groups_describes_lag_and_resets_offsets(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, group = unique_name("jcg"), unique_name("jcgg")
    cluster.create_topic(topic, 2)
    java.ok("produce", topic=topic, partitions=2, count=N)
    assert len(java.ok("consume_group", topic=topic, group=group, count=N)["records"]) == N

    def describe() -> dict[int, dict[str, str]]:
        answer = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--describe", "--group", group)
        assert answer["exit"] == 0, answer
        assert f"Consumer group '{group}' has no active members." in answer["stderr"]
        return {int(r["PARTITION"]): r for r in table(answer["stdout"]) if r["GROUP"] == group and r["TOPIC"] == topic}

    # After a full read: current == log end == the partition's messages, lag 0.
    rows = describe()
    ends = latest(java, topic, 2)
    assert sorted(rows) == [0, 1]
    assert ends == {0: N // 2, 1: N // 2}
    for p, row in rows.items():
        assert (int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"]), row["LAG"]) == (ends[p], ends[p], "0")

    # N more produced, N / 2 a partition: the lag is that many messages.
    java.ok("produce", topic=topic, partitions=2, count=N, start=N)
    for p, row in describe().items():
        assert int(row["CURRENT-OFFSET"]) == ends[p]
        assert (int(row["LOG-END-OFFSET"]), int(row["LAG"])) == (N, N // 2)

    listed = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--list")
    assert listed["exit"] == 0 and group in listed["stdout"].split()

    reset = java.tool(
        KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--reset-offsets", "--group", group, "--topic", topic,
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert reset["exit"] == 0, reset
    assert {int(r["PARTITION"]): r["NEW-OFFSET"] for r in table(reset["stdout"])} == {0: "0", 1: "0"}
    assert committed(java, group, topic) == {0: 0, 1: 0}
    for row in describe().values():
        assert (row["CURRENT-OFFSET"], row["LAG"]) == ("0", row["LOG-END-OFFSET"])
    again = java.ok("consume_group", topic=topic, group=group, count=2 * N)["records"]
    assert sorted(r[3] for r in again) == sorted(f"v{i}" for i in range(2 * N))


# -- Not served yet: each does the real thing and checks it with logferry's own client. --


def _group_with_commits(java: JavaDriver, cluster: KafkaCluster, topic: str, group: str) -> None:
    """``topic`` (2 partitions, N records) and ``group`` with commits at its start, without
    a consumer's join (Admin.alterConsumerGroupOffsets on an unknown group)."""
    cluster.create_topic(topic, 2)
    java.ok("produce", topic=topic, partitions=2, count=N)
    java.ok("alter_group_offsets", group=group, topic=topic, offsets={"0": 0, "1": 0})


def test_admin_create_partitions_and_kafka_topics_alter(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("jxp")
    module_kafka_cluster.create_topic(topic, 2)
    java.ok("create_partitions", topic=topic, count=3)
    with Admin(brokers=module_kafka_cluster.native) as admin:
        assert sorted(admin.describe_topic(topic)) == [0, 1, 2]
        altered = java.tool(KAFKA_TOPICS, *BOOTSTRAP, "--alter", "--topic", topic, "--partitions", "5")
        assert altered["exit"] == 0, altered
        assert sorted(admin.describe_topic(topic)) == [0, 1, 2, 3, 4]
    fewer = java.call("create_partitions", topic=topic, count=4)
    assert fewer["error"] == "org.apache.kafka.common.errors.InvalidPartitionsException", fewer
    described = java.ok("describe_topics", topics=[topic])["topics"][topic]
    assert sorted(d["partition"] for d in described) == [0, 1, 2, 3, 4]


def test_admin_incremental_alter_configs_and_kafka_configs_alter(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("jxc")
    module_kafka_cluster.create_topic(topic, 1)
    java.ok("incremental_alter_configs", type="topic", name=topic, set={"retention.ms": "7200000"})
    altered = java.tool(
        KAFKA_CONFIGS, *BOOTSTRAP, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "retention.bytes=1000000,compression.type=zstd",
    )  # fmt: skip
    assert altered["exit"] == 0, altered
    expected = {"retention_ms": 7_200_000, "retention_bytes": 1_000_000, "compression": "zstd"}
    with Admin(brokers=module_kafka_cluster.native) as admin:
        wait_until(lambda: admin.topic_config(topic) == expected, 10, f"{topic}'s settings {expected}")
        removed = java.tool(
            KAFKA_CONFIGS, *BOOTSTRAP, "--alter", "--entity-type", "topics", "--entity-name", topic,
            "--delete-config", "compression.type",
        )  # fmt: skip
        assert removed["exit"] == 0, removed
        wait_until(lambda: "compression" not in admin.topic_config(topic), 10, "compression removed")
    shown = java.ok("describe_configs", type="topic", name=topic)["configs"]
    assert shown["retention.bytes"] == {"value": "1000000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert shown["compression.type"]["source"] == "DEFAULT_CONFIG"

    # What logferry has no setting for is refused, and nothing of that request changes.
    refused = java.call(
        "incremental_alter_configs", type="topic", name=topic, set={"retention.ms": "1000", "max.message.bytes": "2000"}
    )
    assert refused["error"] == "org.apache.kafka.common.errors.InvalidConfigurationException", refused
    assert "max.message.bytes" in refused["message"]
    assert java.ok("describe_configs", type="topic", name=topic)["configs"]["retention.ms"]["value"] == "7200000"


def test_admin_delete_records_and_kafka_delete_records(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("jxr")
    cluster.create_topic(topic, 1)
    # two producers: a batch boundary at N // 2, so the log start is past the first byte
    acked = java.ok("produce", topic=topic, partitions=1, count=N // 2)["offsets"]["0"]
    acked += java.ok("produce", topic=topic, partitions=1, start=N // 2, count=N - N // 2)["offsets"]["0"]
    assert acked == list(range(N))
    # acked is not yet visible (flushed): past the high watermark DeleteRecords refuses
    wait_until(lambda: latest(java, topic, 1) == {0: N}, 20, f"{topic} visible to its end")
    half = N // 2 + 1  # the producer's batches are several records: most likely inside one
    answer = java.ok("delete_records", topic=topic, before={"0": half})
    assert answer["low_watermarks"] == {"0": half}
    earliest = java.ok("list_offsets", topic=topic, partitions=[0], spec="earliest")["offsets"]
    assert earliest == {"0": half}
    read = java.ok("consume_group", topic=topic, group=unique_name("jxrg"), count=N - half)["records"]
    assert [r[1] for r in read] == list(range(half, N))  # sent N, deleted half: the rest, in order
    with SimpleConsumer(brokers=cluster.native) as consumer:  # one log start for both protocols
        native = consumer.offsets(topic, 0)
        assert 0 < native.start < native.end
        with pytest.raises(OffsetOutOfRangeError):
            consumer.fetch(topic, 0, 0)
        first = consumer.fetch(topic, 0, native.start).batches[0]
        kept = _native_messages(consumer, topic, native.start, native.end)
        assert N - half <= kept < N - half + len(first.values)  # the first batch is served whole

    # kafka-delete-records, to the high watermark (-1): nothing left to read
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": -1}]}))
    deleted = java.tool(KAFKA_DELETE_RECORDS, *BOOTSTRAP, "--offset-json-file", str(spec))
    assert deleted["exit"] == 0, deleted
    assert f"partition: {topic}-0\tlow_watermark: {N}" in deleted["stdout"], deleted
    assert java.ok("list_offsets", topic=topic, partitions=[0], spec="earliest")["offsets"] == {"0": N}
    assert latest(java, topic, 1) == {0: N}

    past = java.call("delete_records", topic=topic, before={"0": N + 1})
    assert past["error"] == "org.apache.kafka.common.errors.OffsetOutOfRangeException", past


def _native_messages(consumer: SimpleConsumer, topic: str, start: int, end: int) -> int:
    """Messages logferry's own client reads from byte offset ``start`` to ``end``."""
    count, offset = 0, start
    for _ in range(1000):
        if offset >= end:
            break
        result = consumer.fetch(topic, 0, offset)
        count += sum(len(b.values) for b in result.batches)
        offset = result.next_offset
    return count


def test_admin_delete_consumer_groups_and_kafka_consumer_groups_delete(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic, group, other = unique_name("jxg"), unique_name("jxgg"), unique_name("jxgt")
    _group_with_commits(java, module_kafka_cluster, topic, group)
    java.ok("alter_group_offsets", group=other, topic=topic, offsets={"0": 5})
    java.ok("delete_groups", groups=[group])
    listed = {g["group"] for g in java.ok("list_groups")["groups"]}
    assert group not in listed and other in listed
    assert committed(java, group, topic) == {}
    unknown = java.call("delete_groups", groups=[group])
    assert unknown["error"] == "org.apache.kafka.common.errors.GroupIdNotFoundException", unknown

    deleted = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--delete", "--group", other)
    assert deleted["exit"] == 0, deleted
    assert f"Deletion of requested consumer groups ('{other}') was successful." in deleted["stdout"], deleted
    assert other not in {g["group"] for g in java.ok("list_groups")["groups"]}


def test_admin_delete_consumer_group_offsets_and_kafka_consumer_groups_delete_offsets(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("jxo"), unique_name("jxog")
    _group_with_commits(java, module_kafka_cluster, topic, group)
    java.ok("alter_group_offsets", group=group, topic=topic, offsets={"0": 7, "1": 9})
    java.ok("delete_group_offsets", group=group, topic=topic, partitions=[0])
    assert committed(java, group, topic) == {1: 9}
    shown = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert shown["exit"] == 0, shown
    first, rest = shown["stdout"].split("\n", 1)
    assert first == f"Request succeeded for deleting offsets from group {group}.", shown
    assert [(r["TOPIC"], r["PARTITION"], r["STATUS"]) for r in table(rest)] == [(topic, "1", "Successful")], shown
    assert committed(java, group, topic) == {}
    unknown = java.call("delete_group_offsets", group=unique_name("nogroup"), topic=topic, partitions=[0])
    assert unknown["error"] == "org.apache.kafka.common.errors.GroupIdNotFoundException", unknown


def test_a_live_member_as_the_admin_and_kafka_consumer_groups_see_it(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, group, member = unique_name("jm"), unique_name("jmg"), unique_name("member")
    cluster.create_topic(topic, 2)
    java.ok("produce", topic=topic, partitions=2, count=N)
    java.ok("start_consumer", name=member, topic=topic, group=group)
    try:

        def stable() -> dict[str, Any] | None:
            described: dict[str, Any] = java.ok("describe_groups", groups=[group])["groups"][group]
            return described if described["state"] == "Stable" and described["members"] else None

        described = wait_until(stable, 30, f"{group} stable with its member")
        assert [(m["client_id"], sorted(m["partitions"])) for m in described["members"]] == [
            (member, [f"{topic}:0", f"{topic}:1"])
        ]
        wait_until(lambda: committed(java, group, topic) == latest(java, topic, 2), 30, f"{group} caught up")

        shown = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--describe", "--group", group)
        assert shown["exit"] == 0, shown
        rows = [r for r in table(shown["stdout"]) if r["GROUP"] == group]
        assert sorted(int(r["PARTITION"]) for r in rows) == [0, 1]
        for row in rows:
            assert (row["LAG"], row["CLIENT-ID"]) == ("0", member)
            assert row["CONSUMER-ID"].startswith(member) and row["HOST"].lstrip("/") == "127.0.0.1"
        members = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--describe", "--group", group, "--members")
        assert [(r["CLIENT-ID"], r["#PARTITIONS"]) for r in table(members["stdout"])] == [(member, "2")]

        # Kafka's tool refuses to move the offsets of a group with live members.
        reset = java.tool(
            KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--reset-offsets", "--group", group, "--topic", topic,
            "--to-earliest", "--execute",
        )  # fmt: skip
        assert "can only be reset if the group" in reset["stdout"] + reset["stderr"], reset
        assert committed(java, group, topic) == latest(java, topic, 2)

        # Nor may a live group, or its offsets of a topic a member subscribes to, be deleted.
        refused = java.call("delete_groups", groups=[group])
        assert refused["error"] == "org.apache.kafka.common.errors.GroupNotEmptyException", refused
        refused = java.call("delete_group_offsets", group=group, topic=topic, partitions=[0])
        assert refused["error"] == "org.apache.kafka.common.errors.GroupSubscribedToTopicException", refused
        assert committed(java, group, topic) == latest(java, topic, 2)
    finally:
        consumed = java.ok("stop_consumer", name=member)["records"]
    assert consumed == N
    assert java.ok("describe_groups", groups=[group])["groups"][group]["state"] == "Empty"
    java.ok("delete_groups", groups=[group])  # once it is empty
    assert committed(java, group, topic) == {}


def _in_order(records: list[list[Any]]) -> None:
    """Each partition's records in offset order, each value at its offset once."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _value in records:
        by_partition.setdefault(partition, []).append(offset)
    for partition, offsets in by_partition.items():
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets out of order or repeated"


def test_a_consumer_with_the_kip_848_group_protocol(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("j848"), unique_name("j848g")
    module_kafka_cluster.create_topic(topic, 3)
    java.ok("produce", topic=topic, partitions=3, count=N)
    got = java.ok("consume_group", topic=topic, group=group, count=N, protocol="consumer")["records"]
    assert len(got) == N
    assert sorted(r[3] for r in got) == sorted(f"v{i}" for i in range(N)), "every record once"
    _in_order([[p, o, v] for p, o, _k, v in got])
    assert committed(java, group, topic) == {p: N // 3 for p in range(3)}
    listed = {g["group"]: g for g in java.ok("list_groups")["groups"]}
    assert (listed[group]["type"], listed[group]["state"]) == ("Consumer", "Empty")


def test_kip_848_consumers_share_the_partitions_and_one_takes_over(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, group, first, second = unique_name("j848s"), unique_name("j848sg"), unique_name("a"), unique_name("b")
    cluster.create_topic(topic, 4)
    java.ok("produce", topic=topic, partitions=4, count=N)
    names = [first, second]
    for name in names:
        java.ok("start_consumer", name=name, topic=topic, group=group, protocol="consumer", keep=True)
    try:

        def shared() -> dict[str, list[int]] | None:
            assigned = {n: java.ok("consumer_status", name=n)["assigned"] for n in names}
            return assigned if all(len(a) == 2 for a in assigned.values()) else None

        assigned = wait_until(shared, 15, f"{group}'s two members with two partitions each")
        assert sorted(assigned[first] + assigned[second]) == [0, 1, 2, 3]
        described = java.ok("describe_groups", groups=[group])["groups"][group]  # ConsumerGroupDescribe
        assert described["type"] == "Consumer"
        assert sorted(p for m in described["members"] for p in m["partitions"]) == [f"{topic}:{p}" for p in range(4)]
        shown = java.tool(KAFKA_CONSUMER_GROUPS, *BOOTSTRAP, "--describe", "--group", group, "--members")
        assert sorted((r["CLIENT-ID"], r["#PARTITIONS"]) for r in table(shown["stdout"])) == sorted(
            [(first, "2"), (second, "2")]
        ), shown
    finally:
        stopped = java.ok("stop_consumer", name=first)  # it leaves the group
    wait_until(
        lambda: java.ok("consumer_status", name=second)["assigned"] == [0, 1, 2, 3],
        15,
        f"{second} holds every partition",
    )
    java.ok("produce", topic=topic, partitions=4, start=N, count=N)
    ends = {p: 2 * N // 4 for p in range(4)}
    wait_until(lambda: committed(java, group, topic) == ends, 15, f"{group} caught up")
    rest = java.ok("stop_consumer", name=second)
    records = stopped["kept"] + rest["kept"]
    assert {v for _p, _o, v in records} == {f"v{i}" for i in range(2 * N)}, "the union is every record"
    _in_order(stopped["kept"])
    _in_order(rest["kept"])
    assert all(v in {r[2] for r in rest["kept"]} for v in (f"v{i}" for i in range(N, 2 * N)))
    assert latest(java, topic, 4) == ends


def test_kip_848_committed_offsets_resume_a_new_member(
    java: JavaDriver, module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("j848r"), unique_name("j848rg")
    module_kafka_cluster.create_topic(topic, 2)
    java.ok("produce", topic=topic, partitions=2, count=N)
    assert len(java.ok("consume_group", topic=topic, group=group, count=N, protocol="consumer")["records"]) == N
    java.ok("produce", topic=topic, partitions=2, start=N, count=N)
    again = java.ok("consume_group", topic=topic, group=group, count=N, protocol="consumer")["records"]
    assert sorted(r[3] for r in again) == sorted(f"v{i}" for i in range(N, 2 * N)), "only what came after the commits"
    assert {(p, min(o for q, o, _k, _v in again if q == p)) for p, *_ in again} == {(0, N // 2), (1, N // 2)}
    # the group, empty, may go on with the classic protocol: from the same commits
    java.ok("produce", topic=topic, partitions=2, start=2 * N, count=10)
    classic = java.ok("consume_group", topic=topic, group=group, count=10)["records"]
    assert sorted(r[3] for r in classic) == sorted(f"v{i}" for i in range(2 * N, 2 * N + 10))
    listed = {g["group"]: g for g in java.ok("list_groups")["groups"]}
    assert listed[group]["type"] == "Classic"

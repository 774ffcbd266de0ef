"""Many partitions' ranges in one request per broker (the offsets api's ``many``), against
real brokers: the same ranges as asking partition by partition, an error item for a
partition the broker does not lead, and an error value (not an exception) for a
partition that does not exist."""

from __future__ import annotations

import pytest

from broker.client import Admin, LogferryError, Producer, SimpleConsumer
from broker.common.errors import NotLeaderError
from broker.wire import protocol
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_offset_infos_ask_each_leader_once_and_agree_with_one_by_one(broker_cluster):
    cluster = broker_cluster(2)
    zk = cluster.zk_connect
    with Admin(zk=zk) as admin:
        admin.create_topic("ranges", 4, 1)
    with Producer(zk=zk, linger_ms=2) as producer:
        for p in range(4):
            producer.send("ranges", [b"m%d" % i for i in range(10 * (p + 1))], partition=p)
        producer.flush(30)
    with SimpleConsumer(zk=zk) as consumer:
        pairs = [("ranges", p) for p in range(4)]

        def visible() -> bool:  # acknowledged when written, readable once the group commit's fsync ran
            ranges = consumer.offset_infos(pairs)
            return all(ranges[(t, p)]["end_message"] == 10 * (p + 1) for t, p in pairs)

        wait_until(visible, 10, "every partition's messages visible")
        got = consumer.offset_infos(pairs + [("ranges", 9)])
        for pair in pairs:
            one = consumer.offset_info(*pair)
            assert {k: got[pair][k] for k in ("start", "end", "avg_message_bytes")} == {
                k: one[k] for k in ("start", "end", "avg_message_bytes")
            }
            assert got[pair]["end"] > 0
            # counted: the messages produced to the partition, 10 * (p + 1)
            assert (got[pair]["start_message"], got[pair]["end_message"]) == (0, 10 * (pair[1] + 1))
        assert isinstance(got[("ranges", 9)], LogferryError)

        # one broker asked for every partition: the ones it leads answered, the others errors
        leaders = consumer.cluster.partitions_for("ranges")
        address = consumer.cluster.broker_addresses()[leaders[0]]
        answer = (
            consumer.cluster.connection(address)
            .call(protocol.OFFSETS, {"many": [list(p) for p in pairs], "at": "latest"}, 10)
            .header
        )
        for (topic, p), item in zip(pairs, answer["many"], strict=True):
            if leaders[p] == leaders[0]:
                assert item["end"] == got[(topic, p)]["end"]
            else:
                assert item["err"] == NotLeaderError.code

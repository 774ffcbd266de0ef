"""The Produce answer packed by hand (broker/server/kafka/produce_response.py) is byte for
byte the one kio's generic writer makes from the same values, at every version served:
generated topics (names of any Unicode), partitions, error codes, offsets and messages."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.server.kafka.produce_response import VERSIONS, TopicAnswers, encode_produce_response
from broker.server.kafka.protocol import Api, encode_response, make, response_schema

ERRORS = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.message_too_large])
PARTITIONS = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),
        ERRORS,
        st.integers(-1, 2**63 - 1),
        st.none() | st.text(max_size=40),
    ),
    max_size=4,
)
TOPICS = st.lists(st.tuples(st.text(min_size=1, max_size=30), PARTITIONS), max_size=3)


def kio_frame(version: int, correlation_id: int, topics: list[TopicAnswers]) -> bytes:
    """What the listener wrote before: kio entities through kio's writer."""
    partition_cls = response_schema(Api.PRODUCE, version, "PartitionProduceResponse")
    topic_cls = response_schema(Api.PRODUCE, version, "TopicProduceResponse")
    body = make(
        response_schema(Api.PRODUCE, version),
        throttle_time=datetime.timedelta(0),
        responses=tuple(
            make(
                topic_cls,
                name=name,
                partition_responses=tuple(
                    make(
                        partition_cls,
                        index=index,
                        error_code=ErrorCode(error),
                        base_offset=base,
                        log_start_offset=-1,
                        record_errors=(),
                        error_message=message,
                    )
                    for index, error, base, message in partitions
                ),
            )
            for name, partitions in topics
        ),
    )
    return encode_response(Api.PRODUCE, version, correlation_id, body)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=st.integers(-(2**31), 2**31 - 1), topics=TOPICS)
def test_the_packed_answer_is_kios_byte_for_byte(version: int, correlation_id: int, topics: list[TopicAnswers]) -> None:
    assert encode_produce_response(version, correlation_id, topics) == kio_frame(version, correlation_id, topics)


def test_the_usual_answer_one_topic_one_partition_at_v9() -> None:
    topics: list[TopicAnswers] = [("logs", [(0, 0, 1234, None)])]
    frame = encode_produce_response(9, 7, topics)
    assert frame == kio_frame(9, 7, topics)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


@pytest.mark.parametrize("version", [2, 10])
def test_a_version_not_served_is_refused(version: int) -> None:
    with pytest.raises(ValueError, match=f"v{version} is not encoded here"):
        encode_produce_response(version, 1, [])

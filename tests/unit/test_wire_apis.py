"""The typed wire apis: each parse checks its fields and raises the right error; each
encode gives the same msgpack bytes as the positional lists it replaced."""

from __future__ import annotations

import math

import msgpack
import pytest

from broker.common.errors import (
    InvalidRequestError,
    InvalidTopicError,
    NotLeaderError,
    ProtocolError,
    UnsupportedApiError,
)
from broker.wire import apis, fetch, metadata, offsets, produce, protocol, topics


def _packed(fields: dict) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


# -- produce ------------------------------------------------------------------------


def test_produce_request_cuts_the_payload_into_message_sets():
    payload = memoryview(b"aaabbbbb")
    request = produce.parse_produce_request({"acks": -1, "parts": [["t", 0, 3], ["u", 2, 5]]}, payload)
    assert request.acks == -1 and request.rejected is None
    assert [(s.topic, s.partition, bytes(s.data)) for s in request.sets] == [("t", 0, b"aaa"), ("u", 2, b"bbbbb")]


def test_produce_acks_default_to_one():
    assert produce.parse_produce_request({"parts": []}, memoryview(b"")).acks == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"acks": 7, "parts": []},
        {"acks": True, "parts": []},
        {"acks": "1", "parts": []},
        {"acks": 1.0, "parts": []},
        {"acks": 1},
        {"acks": 1, "parts": {"t": 1}},
    ],
)
def test_produce_request_with_bad_acks_or_parts_is_refused_whole(fields):
    with pytest.raises(InvalidRequestError, match="acks 0, 1 or -1"):
        produce.parse_produce_request(fields, memoryview(b""))


@pytest.mark.parametrize(
    "bad, topic, partition, message",
    [
        ("nope", None, None, "must be [topic, partition, nbytes]"),
        (["t", 0], None, None, "must be [topic, partition, nbytes]"),
        (["t", 0, "3"], None, None, "must be [topic, partition, nbytes]"),
        (["t", 0, True], None, None, "must be [topic, partition, nbytes]"),
        (["t", 1, 99], "t", 1, "claims 99 bytes but the payload has 1 left"),
        (["t", 1, -1], "t", 1, "claims -1 bytes"),
        ([5, 1, 1], 5, 1, "topic must be a string"),
        (["t", "one", 1], "t", "one", "partition an integer"),
        (["t", {}, 1], "t", {}, "partition an integer"),
    ],
)
def test_a_malformed_part_ends_the_request_after_the_good_ones(bad, topic, partition, message):
    request = produce.parse_produce_request(
        {"acks": 1, "parts": [["good", 0, 3], bad, ["never", 0, 1]]}, memoryview(b"abcd")
    )
    assert [(s.topic, bytes(s.data)) for s in request.sets] == [("good", b"abc")]
    rejected = request.rejected
    assert rejected is not None
    assert (rejected.topic, rejected.partition) == (topic, partition)
    assert isinstance(rejected.error, InvalidRequestError) and message in str(rejected.error)


def test_produce_encodings_are_the_positional_lists_they_replace():
    parts = [produce.ProducePart("t", 0, 10), produce.ProducePart("u", 3, 7)]
    assert _packed(produce.encode_produce_request(1, parts)) == _packed(
        {"acks": 1, "parts": [["t", 0, 10], ["u", 3, 7]]}
    )
    answer = [
        produce.ProduceAnswerPart("t", 0, 0, 128, None),
        produce.ProduceAnswerPart("u", 3, 6, -1, "unknown topic 'u'"),
    ]
    old = {"parts": [["t", 0, 0, 128, None], ["u", 3, 6, -1, "unknown topic 'u'"]]}
    assert _packed(produce.encode_produce_answer(answer)) == _packed(old)
    head = protocol.encode_response(4, produce.encode_produce_answer(answer))
    assert head == protocol.encode_response(4, old)


def test_produce_answer_round_trip_and_malformed_answers():
    answer = [produce.ProduceAnswerPart("t", 0, 0, 128, None)]
    header = msgpack.unpackb(_packed(produce.encode_produce_answer(answer)))
    assert produce.parse_produce_answer(header) == answer
    assert produce.parse_produce_answer({"id": 1, "err": 0}) == []
    for bad in (
        {"parts": "x"},
        {"parts": [["t", 0, 0, 1]]},
        {"parts": [["t", 0, "0", 1, None]]},
        {"parts": [["t", 0, 0, 1, 5]]},
        {"parts": [["t", 0, 0, "1", None]]},
    ):
        with pytest.raises(ProtocolError):
            produce.parse_produce_answer(bad)


# -- fetch --------------------------------------------------------------------------


def test_fetch_request_parses_parts_and_clamps_waits():
    request = fetch.parse_fetch_request({"parts": [["t", 0, 0, 1024]], "max_wait_ms": 999_999, "min_bytes": 0})
    assert request.parts == [fetch.FetchPart("t", 0, 0, 1024)]
    assert request.max_wait_ms == fetch.MAX_WAIT_MS and request.min_bytes == 1
    assert request.replica is None
    request = fetch.parse_fetch_request({"parts": [], "max_wait_ms": -5})
    assert (request.max_wait_ms, request.min_bytes) == (0, 1)
    request = fetch.parse_fetch_request({"parts": [], "max_wait_ms": None, "min_bytes": None})
    assert (request.max_wait_ms, request.min_bytes) == (0, 1)
    request = fetch.parse_fetch_request({"parts": [], "max_wait_ms": 250.7, "min_bytes": 10})
    assert (request.max_wait_ms, request.min_bytes) == (250, 10)


@pytest.mark.parametrize("field", ["max_wait_ms", "min_bytes"])
@pytest.mark.parametrize("value", [{}, {"a": 1}, [], [1, 2], "100", True, b"1", math.nan, math.inf])
def test_fetch_waits_that_are_not_numbers_are_invalid_requests(field, value):
    with pytest.raises(InvalidRequestError, match=field):
        fetch.parse_fetch_request({"parts": [["t", 0, 0, 1]], field: value})


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"parts": "nope"}, "'parts' must be list"),
        ({}, "'parts' must be list"),
        ({"parts": [["t", 0, 0]]}, "[topic, partition, offset, max_bytes]"),
        ({"parts": [["t", "zero", 0, 100]]}, "[topic, partition, offset, max_bytes]"),
        ({"parts": [[7, 0, 0, 100]]}, "[topic, partition, offset, max_bytes]"),
        ({"parts": [["t", 0, True, 100]]}, "[topic, partition, offset, max_bytes]"),
        ({"parts": [["t", 0, 0, 100]], "replica": 7}, "leader_epoch"),
        ({"parts": [], "replica": "seven"}, "broker id"),
        ({"parts": [], "replica": False}, "broker id"),
    ],
)
def test_malformed_fetch_requests(fields, message):
    with pytest.raises(InvalidRequestError) as info:
        fetch.parse_fetch_request(fields)
    assert message in str(info.value)


def test_replica_fetch_request_has_epochs():
    request = fetch.parse_fetch_request({"replica": 2, "max_wait_ms": 500, "parts": [["t", 0, 10, 99, 4]]})
    assert request.replica == 2
    assert request.parts == [fetch.ReplicaFetchPart("t", 0, 10, 99, 4)]
    assert request.parts[0].leader_epoch == 4


def test_fetch_request_encodings_are_the_old_fields():
    consumer = fetch.encode_fetch_request([fetch.FetchPart("t", 0, 5, 100)], 500, 1)
    assert _packed(consumer) == _packed({"max_wait_ms": 500, "min_bytes": 1, "parts": [["t", 0, 5, 100]]})
    follower = fetch.encode_fetch_request([fetch.ReplicaFetchPart("t", 0, 5, 100, 3)], 0, 1, replica=2)
    assert _packed(follower) == _packed(
        {"replica": 2, "max_wait_ms": 0, "min_bytes": 1, "parts": [["t", 0, 5, 100, 3]]}
    )
    assert fetch.parse_fetch_request(msgpack.unpackb(_packed(follower))).parts == [
        fetch.ReplicaFetchPart("t", 0, 5, 100, 3)
    ]


def test_fetch_answers_round_trip_with_their_payload():
    parts = [
        fetch.FetchAnswerPart("t", 0, 0, None, 0, 300, 5),
        fetch.FetchAnswerPart("t", 1, NotLeaderError.code, "led by 2", None, None, 0),
        fetch.FetchAnswerPart("u", 0, 0, None, 10, 20, 3),
    ]
    fields = fetch.encode_fetch_answer(parts)
    assert _packed(fields) == _packed(
        {"parts": [["t", 0, 0, None, 0, 300, 5], ["t", 1, 10, "led by 2", None, None, 0], ["u", 0, 0, None, 10, 20, 3]]}
    )
    decoded = fetch.parse_fetch_answer(msgpack.unpackb(_packed(fields)))
    assert decoded == parts and decoded[0].visible_end == 300
    data = fetch.payload_slices(decoded, memoryview(b"aaaaabbb"))
    assert [bytes(d) for d in data] == [b"aaaaa", b"", b"bbb"]
    with pytest.raises(ProtocolError, match="claim 8 payload bytes"):
        fetch.payload_slices(decoded, memoryview(b"aaaaab"))


def test_replica_fetch_answers_carry_the_log_end():
    part = fetch.ReplicaFetchAnswerPart("t", 0, 0, None, 0, 100, 50, 150)
    header = msgpack.unpackb(_packed(fetch.encode_fetch_answer([part])))
    assert header == {"parts": [["t", 0, 0, None, 0, 100, 50, 150]]}
    (decoded,) = fetch.parse_fetch_answer(header, replica=True)
    assert decoded.log_end == 150
    with pytest.raises(ProtocolError):
        fetch.parse_fetch_answer(header)  # eight fields where a consumer expects seven


@pytest.mark.parametrize(
    "part",
    [
        "x",
        ["t", 0, 0, None, 0, 0],
        ["t", 0, "0", None, 0, 0, 0],
        ["t", 0, 0, 5, 0, 0, 0],
        ["t", 0, 0, None, "0", 0, 0],
        ["t", 0, 0, None, 0, 0, -1],
        ["t", 0, 0, None, 0, 0, None],
    ],
)
def test_malformed_fetch_answers_are_protocol_errors(part):
    with pytest.raises(ProtocolError):
        fetch.parse_fetch_answer({"parts": [part]})


# -- offsets ------------------------------------------------------------------------


def test_offsets_request():
    assert offsets.parse_offsets_request({"topic": "t", "partition": 1}) == offsets.OffsetsRequest("t", 1, "latest")
    for at in ("earliest", "latest", 1_700_000_000_000):
        request = offsets.OffsetsRequest("t", 0, at)
        fields = offsets.encode_offsets_request(request)
        assert fields == {"topic": "t", "partition": 0, "at": at}
        assert offsets.parse_offsets_request(fields) == request


def test_offsets_request_translating_byte_and_message_offsets():
    for kind, value in ((offsets.BYTE, 4096), (offsets.MESSAGE, 0)):
        request = offsets.OffsetsRequest("t", 0, (kind, value))
        fields = offsets.encode_offsets_request(request)
        assert fields == {"topic": "t", "partition": 0, "at": {kind: value}}
        assert offsets.parse_offsets_request(fields) == request
    answer = offsets.OffsetsAnswer(10, 0, 20, None, 7, 2)
    fields = offsets.encode_offsets_answer(answer)
    assert (fields["message"], fields["skip"]) == (7, 2)
    assert offsets.parse_offsets_answer(fields) == answer
    assert "message" not in offsets.encode_offsets_answer(offsets.OffsetsAnswer(10, 0, 20, None))
    with pytest.raises(ProtocolError):
        offsets.parse_offsets_answer({**fields, "message": "7"})


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"topic": "t", "partition": 0, "at": {"byte": -1}}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": {"byte": "1"}}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": {"time": 1}}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": {"byte": 1, "message": 1}}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": {}}, InvalidRequestError),
        ({"topic": "..", "partition": 0}, InvalidTopicError),
        ({"topic": "a/b", "partition": 0}, InvalidTopicError),
        ({"topic": 5, "partition": 0}, InvalidRequestError),
        ({"topic": "t", "partition": "0"}, InvalidRequestError),
        ({"topic": "t", "partition": True}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": "soon"}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": None}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": [1]}, InvalidRequestError),
        ({"topic": "t", "partition": 0, "at": 1.5}, InvalidRequestError),
    ],
)
def test_malformed_offsets_requests(fields, error):
    with pytest.raises(error):
        offsets.parse_offsets_request(fields)


def test_offsets_request_for_many_partitions():
    request = offsets.OffsetsRequest("", -1, "latest", (("a", 0), ("b", 3)))
    fields = offsets.encode_offsets_request(request)
    assert fields == {"many": [["a", 0], ["b", 3]], "at": "latest"}
    assert offsets.parse_offsets_request(fields) == request


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"many": "a"}, InvalidRequestError),
        ({"many": [["a"]]}, InvalidRequestError),
        ({"many": [["a", "0"]]}, InvalidRequestError),
        ({"many": [["a/b", 0]]}, InvalidTopicError),
        ({"many": [["a", 0]], "at": 1_700_000_000_000}, InvalidRequestError),  # times one by one
    ],
)
def test_malformed_many_offsets_requests(fields, error):
    with pytest.raises(error):
        offsets.parse_offsets_request(fields)


def test_offsets_answer_round_trip():
    answer = offsets.OffsetsAnswer(10, 0, 20, 12.5)
    fields = offsets.encode_offsets_answer(answer)
    assert _packed(fields) == _packed({"offset": 10, "start": 0, "end": 20, "avg_message_bytes": 12.5})
    assert offsets.parse_offsets_answer(fields) == answer
    assert offsets.parse_offsets_answer({**fields, "avg_message_bytes": None}).avg_message_bytes is None
    with pytest.raises(ProtocolError):
        offsets.parse_offsets_answer({"offset": "10", "start": 0, "end": 20})
    with pytest.raises(ProtocolError):
        offsets.parse_offsets_answer({"offset": 10, "start": 0})


# -- metadata -----------------------------------------------------------------------


def test_metadata_request():
    assert metadata.parse_metadata_request({}) == metadata.MetadataRequest(None, False)
    assert metadata.parse_metadata_request({"topics": ["a"], "create": 1}) == metadata.MetadataRequest(["a"], True)
    assert metadata.encode_metadata_request(("a",), True) == {"topics": ["a"], "create": True}
    for bad in ("a", ["a", 1], {"a": 1}):
        with pytest.raises(InvalidRequestError):
            metadata.parse_metadata_request({"topics": bad})


def _old_metadata() -> dict:
    return {
        "brokers": {1: ["h1", 9092, "dc1", ""], 2: ["h2", 9093, "dc1", "r2"]},
        "topics": {
            "ok": {
                "err": 0,
                "partitions": {0: 1, 1: -1},
                "replicas": {0: [1, 2], 1: [2, 1]},
                "isr": {0: [1, 2], 1: []},
                "epochs": {0: 3, 1: -1},
                "config": {"min_insync_replicas": 2},
            },
            "gone": {"err": 6, "msg": "unknown topic 'gone'"},
        },
        "controller": 2,
    }


def test_metadata_answer_encodes_as_before_and_round_trips():
    answer = metadata.MetadataAnswer(
        {1: metadata.BrokerAddress("h1", 9092, "dc1", ""), 2: metadata.BrokerAddress("h2", 9093, "dc1", "r2")},
        {
            "ok": metadata.TopicMetadata(
                0,
                None,
                {0: 1, 1: -1},
                {0: [1, 2], 1: [2, 1]},
                {0: [1, 2], 1: []},
                {0: 3, 1: -1},
                {"min_insync_replicas": 2},
            ),
            "gone": metadata.topic_error(6, "unknown topic 'gone'"),
        },
        2,
    )
    fields = metadata.encode_metadata_answer(answer)
    assert _packed(fields) == _packed(_old_metadata())
    decoded = metadata.parse_metadata_answer(msgpack.unpackb(_packed(fields), strict_map_key=False))
    assert decoded == answer and decoded.auto_create is None
    told = answer._replace(auto_create=False)
    assert metadata.parse_metadata_answer(metadata.encode_metadata_answer(told)) == told


def test_metadata_answer_from_an_older_broker_gets_the_implied_defaults():
    decoded = metadata.parse_metadata_answer(
        {"brokers": {1: ["h1", 9092]}, "topics": {"t": {"err": 0, "partitions": {0: 1}}}}
    )
    assert decoded.brokers[1] == metadata.BrokerAddress("h1", 9092, "", "")
    info = decoded.topics["t"]
    assert (info.replicas, info.isr, info.epochs, info.config) == ({0: [1]}, {0: [1]}, {0: -1}, {})
    assert decoded.controller == -1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda h: h.update(brokers=[1]),
        lambda h: h.update(auto_create="yes"),
        lambda h: h["brokers"].update({1: ["h1"]}),
        lambda h: h["brokers"].update({1: ["h1", "9092"]}),
        lambda h: h["brokers"].update({"one": ["h1", 9092]}),
        lambda h: h["topics"].update(ok="yes"),
        lambda h: h["topics"]["ok"].update(partitions={0: "one"}),
        lambda h: h["topics"]["ok"].update(isr={0: "1,2"}),
        lambda h: h["topics"]["ok"].update(err="0"),
        lambda h: h.update(controller="2"),
    ],
)
def test_malformed_metadata_answers_are_protocol_errors(mutate):
    header = _old_metadata()
    mutate(header)
    with pytest.raises(ProtocolError):
        metadata.parse_metadata_answer(header)


# -- topic administration -----------------------------------------------------------


def test_create_topic_request_defaults_and_round_trip():
    assert topics.parse_create_topic_request({"topic": "t"}) == topics.CreateTopicRequest("t", 0, 0, None)
    request = topics.CreateTopicRequest("t", 4, 3, 2)
    fields = topics.encode_create_topic_request(request)
    assert fields == {"topic": "t", "partitions": 4, "replication_factor": 3, "min_insync_replicas": 2}
    assert topics.parse_create_topic_request(fields) == request
    assert topics.encode_create_topic_request(request._replace(min_insync_replicas=None))["min_insync_replicas"] == 0


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"topic": "a/b", "partitions": 1}, InvalidTopicError),
        ({"partitions": 1}, InvalidTopicError),
        ({"topic": "t", "partitions": 100_001}, InvalidRequestError),
        ({"topic": "t", "partitions": -1}, InvalidRequestError),
        ({"topic": "t", "partitions": "2"}, InvalidRequestError),
        ({"topic": "t", "partitions": True}, InvalidRequestError),
        ({"topic": "t", "replication_factor": "three"}, InvalidRequestError),
        ({"topic": "t", "replication_factor": 101}, InvalidRequestError),
        ({"topic": "t", "min_insync_replicas": -1}, InvalidRequestError),
        ({"topic": "t", "min_insync_replicas": [2]}, InvalidRequestError),
    ],
)
def test_malformed_create_topic_requests(fields, error):
    with pytest.raises(error):
        topics.parse_create_topic_request(fields)


def test_topic_answers_and_small_requests():
    answer = topics.CreateTopicAnswer({0: [1, 2], 1: [2, 1]})
    assert topics.encode_create_topic_answer(answer) == {"partitions": {0: [1, 2], 1: [2, 1]}}
    assert topics.parse_create_topic_answer(topics.encode_create_topic_answer(answer)) == answer
    with pytest.raises(ProtocolError):
        topics.parse_create_topic_answer({"partitions": {0: "1"}})
    with pytest.raises(ProtocolError):
        topics.parse_create_topic_answer({})
    assert topics.parse_delete_topic_request({"topic": "t"}) == topics.DeleteTopicRequest("t")
    assert topics.encode_delete_topic_request(topics.DeleteTopicRequest("t")) == {"topic": "t"}
    with pytest.raises(InvalidTopicError):
        topics.parse_delete_topic_request({"topic": ".."})
    assert topics.parse_elect_leaders_request({}) == topics.ElectLeadersRequest()
    fields = topics.encode_elect_leaders_answer(topics.ElectLeadersAnswer(3))
    assert fields == {"controller": 3}
    assert topics.parse_elect_leaders_answer(fields).controller == 3
    assert topics.parse_elect_leaders_answer({}).controller == -1


# -- heads --------------------------------------------------------------------------


def test_request_heads():
    head = apis.parse_request_head({"api": protocol.FETCH, "v": 1, "id": 9})
    assert head == apis.RequestHead(protocol.FETCH, 1, 9) and head.name == "fetch"
    with pytest.raises(UnsupportedApiError, match="unsupported api 99 version 1") as info:
        apis.parse_request_head({"api": 99, "v": 1, "id": 4})
    assert info.value.correlation_id == 4
    with pytest.raises(UnsupportedApiError, match="version 7"):
        apis.parse_request_head({"api": 0, "v": 7, "id": 4})
    for bad in (
        {"api": True, "v": 1, "id": 1},
        {"api": 1, "v": 1, "id": True},
        {"api": 1, "id": 1},
        {"api": 1.0, "v": 1, "id": 1},
    ):
        with pytest.raises(InvalidRequestError):
            apis.parse_request_head(bad)


def test_every_api_has_a_request_parser():
    assert set(apis.REQUEST_PARSERS) == set(protocol.API_NAMES)
    frame = protocol.Frame({"api": protocol.ELECT_LEADERS, "v": 1, "id": 1}, memoryview(b""))
    head = apis.parse_request_head(frame.header)
    assert apis.parse_request(head, frame) == topics.ElectLeadersRequest()


def test_code_4_is_a_protocol_error_only_without_a_correlation_id():
    invalid = apis.response_error(apis.parse_response_head({"id": 3, "err": 4, "msg": "bad"}))
    assert type(invalid) is InvalidRequestError
    broken = apis.response_error(apis.parse_response_head({"id": None, "err": 4, "msg": "x"}))
    assert type(broken) is ProtocolError
    assert apis.response_error(apis.parse_response_head({"id": 3, "err": 0})) is None
    assert type(apis.connection_error({"id": None, "err": 4, "msg": "bad frame"})) is ProtocolError
    assert type(apis.connection_error({"id": None, "err": 3})).__name__ == "FrameTooLargeError"
    assert type(apis.connection_error({"id": None, "err": "x"})) is ProtocolError
    for bad in ([], {"id": "1", "err": 0}, {"id": 1, "err": None}, {"id": 1, "err": 1, "msg": 5}):
        with pytest.raises(ProtocolError):
            apis.parse_response_head(bad)

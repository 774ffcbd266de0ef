"""The append-at api's typed parts (sans IO)."""

from __future__ import annotations

import pytest

from broker.common.errors import InvalidRequestError, ProtocolError
from broker.wire.append_at import (
    QUERY,
    AppendAtAnswerPart,
    AppendAtPart,
    encode_append_at_answer,
    encode_append_at_request,
    parse_append_at_answer,
    parse_append_at_request,
)


def test_a_request_round_trips_with_its_payload_cut_into_parts():
    parts = [
        AppendAtPart("t", 0, 100, b"abc"),
        AppendAtPart("t", 1, 0, b"defg", True),
        AppendAtPart("u", 2, QUERY, b""),
    ]
    header = encode_append_at_request(-1, parts)
    request = parse_append_at_request(header, memoryview(b"abcdefg"))
    assert request.acks == -1 and request.rejected is None
    assert [(p.topic, p.partition, p.expect, bytes(p.data), p.start) for p in request.parts] == [
        ("t", 0, 100, b"abc", False),
        ("t", 1, 0, b"defg", True),
        ("u", 2, QUERY, b"", False),
    ]


@pytest.mark.parametrize(
    "part",
    [
        ["t", 0, 5, 3],  # no start flag
        ["t", 0, -2, 3, False],  # below -1
        ["t", 0, QUERY, 3, False],  # a query with bytes
        ["t", 0, 5, 30, False],  # more bytes than the payload
        ["t", "0", 5, 3, False],
        ["t", 0, 5, 3, 1],  # start must be a bool
    ],
)
def test_a_malformed_part_ends_the_request(part):
    header = {"acks": 1, "parts": [["ok", 0, 0, 1, False], part, ["never", 0, 0, 0, False]]}
    request = parse_append_at_request(header, memoryview(b"x" * 5))
    assert [p.topic for p in request.parts] == ["ok"]
    assert request.rejected is not None
    assert isinstance(request.rejected.error, InvalidRequestError)


def test_bad_acks_refuse_the_request():
    with pytest.raises(InvalidRequestError):
        parse_append_at_request({"acks": 2, "parts": []}, memoryview(b""))


def test_an_answer_round_trips_and_a_wrong_one_is_a_protocol_error():
    parts = [AppendAtAnswerPart("t", 0, 0, 0, 10, 5, 5, 123), AppendAtAnswerPart("t", 1, 45, 0, 7, message="ends at 7")]
    import msgpack

    header = msgpack.unpackb(msgpack.packb(encode_append_at_answer(parts)))
    assert parse_append_at_answer(header) == parts
    with pytest.raises(ProtocolError):
        parse_append_at_answer({"parts": [["t", 0, 0]]})

"""Record headers on the command line, sans IO: ``logferry produce --header`` parsing and
the batch it encodes (a native batch with the payload's headers column), that batch
read back by a logferry consumer and converted for a Kafka consumer, and how
``consume --output json`` shows headers."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from broker.cli.client_cmds import _send_with_headers, parse_headers
from broker.cli.render import render_json
from broker.client import Message, messages_of
from broker.common.errors import ConfigError, UnknownTopicOrPartitionError
from broker.server.kafka.convert import to_kafka
from broker.server.kafka.record_batch import decode_record_batches
from broker.wire import records


def test_headers_parse_in_order_with_repeats_and_empty_values() -> None:
    assert parse_headers(None) == []
    assert parse_headers(["trace=4bf9", "empty=", "eq=a=b", "trace=again", "é=ü"]) == [
        [b"trace", b"4bf9"],
        [b"empty", b""],
        [b"eq", b"a=b"],  # the value is everything after the first "="
        [b"trace", b"again"],  # a key may repeat, as in Kafka
        ["é".encode(), "ü".encode()],
    ]


@pytest.mark.parametrize("bad", ["novalue", "=v", ""])
def test_a_header_without_a_key_or_an_equals_sign_is_a_one_line_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE") as info:
        parse_headers([bad])
    assert "\n" not in str(info.value)


class FakeProducer:
    """What ``_send_with_headers`` uses of a Producer; records what was queued."""

    codec = records.CODEC_NONE

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes]] = []

    def partition_for(self, topic: str, key: bytes | None = None) -> int:
        return 3 if key is None else 1

    def partitions(self, topic: str) -> list[int]:
        return [0, 1, 2, 3]

    def send_raw(self, topic: str, partition: int, batch: bytes) -> Any:
        self.sent.append((topic, partition, batch))
        return "future"


def test_produce_with_headers_sends_one_batch_whose_every_message_carries_them() -> None:
    producer = FakeProducer()
    headers = parse_headers(["trace=4bf9", "bin=x"])
    assert _send_with_headers(producer, "t", [b"one", b"two"], b"k", None, headers) == "future"
    ((topic, partition, batch),) = producer.sent
    assert (topic, partition) == ("t", 1)  # the partition send() would pick for the key
    (decoded,), used = records.decode_batches(batch, 0)
    assert used == len(batch)  # one whole batch, its CRC checked
    assert decoded.values == [b"one", b"two"] and decoded.keys == [b"k", b"k"]
    messages = list(messages_of("t", 1, decoded))
    assert [m.headers for m in messages] == [[[b"trace", b"4bf9"], [b"bin", b"x"]]] * 2
    # an explicit partition is kept, and checked
    _send_with_headers(producer, "t", [b"x"], None, 2, headers)
    assert producer.sent[-1][1] == 2
    with pytest.raises(UnknownTopicOrPartitionError, match="no partition 9"):
        _send_with_headers(producer, "t", [b"x"], None, 9, headers)


def test_a_native_batch_with_headers_reaches_kafka_consumers_as_kafka_headers() -> None:
    batch = records.encode_batch([b"a", b"b"], None, 1_700_000_000_000, headers=[[[b"h", b"v"], [b"n", None]], None])
    (decoded,), _ = records.decode_batches(batch, 4096)
    (kafka,) = decode_record_batches(bytes(to_kafka(decoded, 31)))
    assert kafka.base_offset == 31 and kafka.last_offset_delta == 1
    assert kafka.values == [b"a", b"b"]
    assert kafka.headers == [[(b"h", b"v"), (b"n", None)], []]


def test_a_batch_without_headers_is_byte_for_byte_what_it_was() -> None:
    args = ([b"a"], None, 5)
    assert records.encode_batch(*args) == records.encode_batch(*args, headers=None)
    (decoded,), _ = records.decode_batches(records.encode_batch(*args), 0)
    assert decoded.headers is None
    assert next(messages_of("t", 0, decoded)).headers is None
    with pytest.raises(ValueError, match="headers has 2 items for 1 messages"):
        records.encode_batch(*args, headers=[None, None])


def _msg(headers: Any) -> Message:
    return Message("t", 1, 42, 3, None, b"v", 1700000000000, headers)


def test_json_output_shows_headers_in_order_as_text_or_base64() -> None:
    line = json.loads(
        render_json(_msg([[b"trace", b"4bf9"], [b"sig", b"\x00\x01\xff"], [b"gone", None], [b"trace", b""]]))
    )
    assert line["headers"] == [
        {"key": "trace", "value": "4bf9"},
        {"key": "sig", "value_b64": base64.b64encode(b"\x00\x01\xff").decode()},
        {"key": "gone", "value": None},
        {"key": "trace", "value": ""},
    ]
    assert json.loads(render_json(_msg(None)))["headers"] == []
    assert json.loads(render_json(_msg([[b"\xfe", b"v"]])))["headers"] == [{"key_b64": "/g==", "value": "v"}]

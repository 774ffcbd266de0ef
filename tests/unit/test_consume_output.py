"""consume's output, sans IO: --format text, --output json, agent records, --from -N."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import msgpack
import pytest

from agent.encode import chunk_prefix, encode_values
from broker.cli.client_cmds import parse_start
from broker.cli.render import agent_record, render, render_json
from broker.cli.tail import Last, count_messages, tail_start
from broker.client import Message
from broker.client.consumer import FetchResult, OffsetRange


def _msg(value: bytes, key: bytes | None = None) -> Message:
    return Message("t", 1, 42, 3, key, value, 1700000000000)


AGENT_VALUE = encode_values(chunk_prefix(1700000000123, "web-1", "/var/log/app.log"), [b"GET / 200"], [977])[0]


def test_agent_record_is_decoded_and_other_values_are_not():
    record = agent_record(AGENT_VALUE)
    assert record == {
        "time": 1700000000123,
        "host": "web-1",
        "file": "/var/log/app.log",
        "offset": 977,
        "line": "GET / 200",
    }
    assert agent_record(b"plain text") is None
    assert agent_record(msgpack.packb({"line": "x"})) is None  # not the agent's shape
    assert agent_record(b"\x85\xff") is None  # a map header then garbage
    assert agent_record(b"") is None


def test_text_output_shows_the_line_of_an_agent_record_unless_raw():
    assert render("{value}", _msg(AGENT_VALUE)) == "GET / 200"
    assert render("{partition} {value}", _msg(AGENT_VALUE)) == "1 GET / 200"
    assert render("{value}", _msg(AGENT_VALUE), raw=True) == AGENT_VALUE.decode("utf-8", "replace")
    assert render("{key}:{value}", _msg(b"hello", b"k")) == "k:hello"


def test_json_output_has_every_field_and_decodes_agent_records():
    line = json.loads(render_json(_msg(b"hello", b"k")))
    assert line == {
        "topic": "t",
        "partition": 1,
        "offset": 42,
        "index": 3,
        "key": "k",
        "value": "hello",
        "timestamp": 1700000000000,
        "headers": [],
    }
    agent = json.loads(render_json(_msg(AGENT_VALUE)))
    assert agent["key"] is None and agent["value"] == "GET / 200"
    assert agent["record"]["host"] == "web-1" and agent["record"]["offset"] == 977
    raw = json.loads(render_json(_msg(AGENT_VALUE), raw=True))
    assert "record" not in raw
    assert base64.b64decode(raw["value_b64"]) == AGENT_VALUE  # not UTF-8: base64


def test_json_output_base64_for_binary_key_and_value():
    line = json.loads(render_json(_msg(b"\xff\x00", b"\xfe")))
    assert "value" not in line and base64.b64decode(line["value_b64"]) == b"\xff\x00"
    assert base64.b64decode(line["key_b64"]) == b"\xfe"
    assert "\n" not in render_json(_msg(b"two\nlines"))


def test_from_minus_n_means_the_last_n_messages():
    assert parse_start("-10") == Last(10)
    assert parse_start("-0") == Last(0)
    assert parse_start("10") == 10
    assert parse_start("-10m", now=1000.0).timestamp() == 400.0  # still minutes ago


class _FakeLog:
    """Batches of 3 messages at offsets 0, 100, 200, ...; batch i has timestamp i * 60 s."""

    def __init__(self, batches: int):
        self.batches = batches

    def offsets(self, topic, partition):
        return OffsetRange(0, self.batches * 100)

    def offset_for_time(self, topic, partition, ts_ms):
        return max(0, min(self.batches - 1, ts_ms // 60_000)) * 100

    def fetch(self, topic, partition, offset, max_wait_ms=0):
        if offset >= self.batches * 100:
            return FetchResult([], offset, self.batches * 100)
        batch = SimpleNamespace(values=[b"a", b"b", b"c"])
        return FetchResult([batch], offset + 100, self.batches * 100)


@pytest.mark.parametrize("last", [0, 1, 3, 4, 10, 29, 30, 31, 1000])
@pytest.mark.parametrize("now_ms", [10 * 60_000, 10**12, 0])
def test_tail_start_leaves_exactly_the_last_n(last, now_ms):
    log = _FakeLog(10)  # 30 messages
    offset, skip = tail_start(log, "t", 0, last, now_ms=now_ms)
    assert offset % 100 == 0  # a batch boundary
    assert count_messages(log, "t", 0, offset, 1000) - skip == min(last, 30)


def test_tail_start_reads_only_recent_batches_when_it_can():
    assert tail_start(_FakeLog(10), "t", 0, 1, now_ms=10 * 60_000) == (900, 2)


def test_json_output_shows_an_agent_records_fields():
    from agent.parsing import FieldParser

    lines = [b'{"level": "WARN", "n": 2}', b"not json"]
    parsed, _ = FieldParser("json", static={"env": "prod"}).entries(lines)
    values = encode_values(chunk_prefix(1700000000123, "web-1", "/f"), lines, [0, 26], parsed=parsed)
    good, bad = (json.loads(render_json(_msg(v)))["record"] for v in values)
    assert good["fields"] == {"level": "WARN", "n": 2, "env": "prod"}
    assert bad["fields"] == {"env": "prod"} and bad["unparsed"] is True
    assert render("{value}", _msg(values[1])) == "not json"


def test_text_output_fields_as_name_value_pairs():
    from agent.parsing import pack_fields

    value = encode_values(
        chunk_prefix(1, "h", "/f", pack_fields({"env": "prod", "n": 3, "ok": True, "msg": "two words", "nil": None})),
        [b"x"],
        [0],
    )[0]
    assert render("{fields} | {value}", _msg(value)) == 'env=prod n=3 ok=true msg="two words" nil=null | x'
    assert render("{fields}|{value}", _msg(AGENT_VALUE)) == "|GET / 200"
    assert render("{fields}|{value}", _msg(b"plain")) == "|plain"

"""The one agent-record decoder (broker.client.agent_record), shared by the CLI and the console."""

import msgpack

from broker.cli import render
from broker.client import AGENT_RECORD_FIELDS, agent_record
from console import messages

RECORD = {"time": 1, "host": "web-1", "file": "/var/log/app.log", "offset": 7, "line": "hello"}


def test_an_agent_record_is_decoded_with_its_optional_fields():
    value = msgpack.packb({**RECORD, "fields": {"status": "200"}, "ptime": 2})
    assert agent_record(value) == {**RECORD, "fields": {"status": "200"}, "ptime": 2}


def test_other_values_are_not_agent_records():
    assert agent_record(None) is None
    assert agent_record(b"") is None
    assert agent_record(b"plain text") is None
    assert agent_record(b"\x85\xff") is None  # a map header, then garbage
    assert agent_record(msgpack.packb([1, 2])) is None  # not a map
    for name in AGENT_RECORD_FIELDS:  # a field missing
        assert agent_record(msgpack.packb({k: v for k, v in RECORD.items() if k != name})) is None
    assert agent_record(msgpack.packb({**RECORD, "time": "1"})) is None  # a field of the wrong type
    assert agent_record(msgpack.packb({**RECORD, "line": b"x"}, use_bin_type=True)) is None


def test_the_cli_and_the_console_use_the_client_librarys_decoder():
    assert render.agent_record is agent_record
    assert messages.agent_record is agent_record

"""Fields per line (sans IO): static fields, JSON and regex parsing, their records, config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import pytest

from agent.cli import main
from agent.config import ParseConfig, parse_config
from agent.encode import chunk_prefix, encode_values
from agent.errors import ConfigError
from agent.metrics import AgentCounters, Snapshot, registry
from agent.parsing import FieldParser, pack_fields, parse_json, parse_regex, scalar
from broker.common.config import dumps
from tests.agent.test_config_cli import minimal

ACCESS = re.compile(
    rb'^(?P<ip>\S+) "(?P<method>[A-Z]+) (?P<path>\S+)" (?P<status>\d{3})'
    rb"(?: (?P<ms>\d+)ms)?"
)


# -- parsing a line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line,fields",
    [
        (
            b'{"level": "INFO", "n": 3, "ok": true, "x": 1.5, "gone": null}',
            {"level": "INFO", "n": 3, "ok": True, "x": 1.5, "gone": None},
        ),
        (b'{"user": {"id": 7, "tags": ["a"]}, "ids": [1, 2]}', {"user": '{"id":7,"tags":["a"]}', "ids": "[1,2]"}),
        (b'{"big": 123456789012345678901234567890}', {"big": "123456789012345678901234567890"}),
        ('{"name": "Jos\u00e9"}'.encode(), {"name": "Jos\u00e9"}),
        (b"{}", {}),
    ],
)
def test_json_object_lines_become_scalar_fields(line: bytes, fields: dict[str, Any]) -> None:
    assert parse_json(line) == fields


@pytest.mark.parametrize(
    "line", [b"[1, 2]", b'"text"', b"42", b"null", b"{not json", b"", b"plain text line", b'{"a": 1} trailing']
)
def test_non_object_or_invalid_json_does_not_parse(line: bytes) -> None:
    assert parse_json(line) is None


def test_scalar_keeps_scalars() -> None:
    assert [scalar(v) for v in ("s", 1, 1.5, True, None)] == ["s", 1, 1.5, True, None]
    assert scalar(-(1 << 63)) == -(1 << 63) and scalar(1 << 63) == str(1 << 63)


def test_regex_named_groups_become_string_fields() -> None:
    line = b'10.0.0.1 "GET /a?b=1" 200 17ms'
    assert parse_regex(ACCESS, line) == {
        "ip": "10.0.0.1",
        "method": "GET",
        "path": "/a?b=1",
        "status": "200",
        "ms": "17",
    }
    # a group that did not take part is left out; no match at all is None
    assert parse_regex(ACCESS, b'h "PUT /" 500') == {"ip": "h", "method": "PUT", "path": "/", "status": "500"}
    assert parse_regex(ACCESS, b"garbage") is None


# -- records -----------------------------------------------------------------------------


def _records(
    prefix: bytes, lines: list[bytes], parser: FieldParser | None = None, **kw: Any
) -> tuple[list[dict[str, Any]], list[int]]:
    parsed, failed = parser.entries(lines) if parser else (None, [])
    values = encode_values(prefix, lines, [i * 100 for i in range(len(lines))], parsed=parsed, **kw)
    return [msgpack.unpackb(v) for v in values], failed


def test_static_fields_go_into_the_prefix() -> None:
    prefix = chunk_prefix(5, "h", "/f", pack_fields({"env": "prod", "shard": 3}))
    records, _ = _records(prefix, [b"a", b"b"], cut=frozenset({1}), ptimes=[7, None])
    assert records == [
        {
            "time": 5,
            "host": "h",
            "file": "/f",
            "offset": 0,
            "line": "a",
            "ptime": 7,
            "fields": {"env": "prod", "shard": 3},
        },
        {
            "time": 5,
            "host": "h",
            "file": "/f",
            "offset": 100,
            "line": "b",
            "cut": True,
            "fields": {"env": "prod", "shard": 3},
        },
    ]


def test_json_parsing_merges_static_fields_which_win() -> None:
    parser = FieldParser("json", static={"env": "prod"})
    lines = [b'{"level": "WARN", "env": "dev"}', b"not json", b"{}", b"[1]"]
    records, failed = _records(chunk_prefix(5, "h", "/f"), lines, parser)
    assert failed == [1, 3]
    assert records[0]["fields"] == {"level": "WARN", "env": "prod"}
    assert "unparsed" not in records[0]
    for bad in (records[1], records[3]):  # kept whole, static fields only, flagged
        assert bad["fields"] == {"env": "prod"} and bad["unparsed"] is True
    assert records[1]["line"] == "not json"
    assert records[2]["fields"] == {"env": "prod"}


def test_parsing_without_static_fields() -> None:
    parser = FieldParser("regex", ACCESS)
    lines = [b'1.2.3.4 "GET /" 200 3ms', b"no match"]
    records, failed = _records(chunk_prefix(5, "h", "/f"), lines, parser, ptimes=[9, 10])
    assert failed == [1]
    assert records[0]["fields"] == {"ip": "1.2.3.4", "method": "GET", "path": "/", "status": "200", "ms": "3"}
    assert records[0]["ptime"] == 9 and "unparsed" not in records[0]
    assert "fields" not in records[1] and records[1]["unparsed"] is True
    assert records[1]["ptime"] == 10
    records, failed = _records(chunk_prefix(5, "h", "/f"), [b"{}"], FieldParser("json"))
    assert failed == [] and set(records[0]) == {"time", "host", "file", "offset", "line"}


def test_field_parser_refuses_a_regex_without_named_groups() -> None:
    with pytest.raises(ValueError, match="named groups"):
        FieldParser("regex", re.compile(b"x"))


# -- config ------------------------------------------------------------------------------


def _source(**extra: Any) -> dict[str, Any]:
    return {"pattern": "/var/log/*.log", "topic": "app", **extra}


def test_global_fields_are_extended_and_overridden_per_source() -> None:
    config = parse_config(
        minimal(
            fields={"env": "prod", "service": "web"},
            sources=[
                _source(name="a"),
                _source(name="b", fields={"service": "api", "tier": 2}),
                _source(name="c", parse={"format": "regex", "regex": "(?P<word>\\w+)"}),
                _source(name="d", parse={"format": "json"}),
            ],
        )
    )
    a, b, c, d = config.sources
    assert dict(a.fields) == {"env": "prod", "service": "web"} and a.parse is None
    assert dict(b.fields) == {"env": "prod", "service": "api", "tier": 2}
    assert c.parse is not None and c.parse.format == "regex" and c.parse.regex is not None
    assert c.parse.regex.groupindex == {"word": 1}
    assert d.parse == ParseConfig("json")
    assert parse_config(minimal()).sources[0].fields == ()


@pytest.mark.parametrize(
    "change,key,words",
    [
        ({"fields": {"env": ["a"]}}, "fields.env", "string, number or boolean"),
        ({"fields": "env=prod"}, "fields", "a table"),
        ({"sources": [_source(fields={"when": {"a": 1}})]}, "sources[0].fields.when", "string, number or boolean"),
        ({"sources": [_source(parse={})]}, "sources[0].parse.format", "missing"),
        ({"sources": [_source(parse={"format": "xml"})]}, "sources[0].parse.format", "'json' or 'regex'"),
        ({"sources": [_source(parse={"format": "regex"})]}, "sources[0].parse.regex", "missing"),
        (
            {"sources": [_source(parse={"format": "regex", "regex": "(unclosed"})]},
            "sources[0].parse.regex",
            "not a valid regular expression",
        ),
        (
            {"sources": [_source(parse={"format": "regex", "regex": "(\\d+) (\\w+)"})]},
            "sources[0].parse.regex",
            "named group",
        ),
        (
            {"sources": [_source(parse={"format": "json", "regex": "(?P<a>x)"})]},
            "sources[0].parse.regex",
            "only 'regex'",
        ),
        ({"sources": [_source(parse={"format": "json", "fields": ["a"]})]}, "sources[0].parse.fields", "unknown key"),
    ],
)
def test_field_and_parse_errors_name_the_key(change: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(**change))
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ") and words in str(info.value)


def test_cli_bad_parse_regex_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "a.toml"
    config.write_text(
        dumps(
            minimal(
                state_dir=str(tmp_path / "s"),
                sources=[_source(), _source(name="x", parse={"format": "regex", "regex": "\\d+"})],
            )
        )
    )
    assert main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{config}: sources[1].parse.regex: needs at least one named group" in err


# -- metric ------------------------------------------------------------------------------


def test_parse_failures_are_a_per_source_counter() -> None:
    counters = AgentCounters(("json-src", "regex-src"))
    counters.parse_failures["regex-src"] += 4
    snap = Snapshot(host="h", parse_failures=dict(counters.parse_failures))
    text = registry(lambda: snap).render()
    assert "# TYPE logferry_agent_parse_failures_total counter" in text
    assert 'logferry_agent_parse_failures_total{host="h",source="regex-src"} 4' in text
    assert 'logferry_agent_parse_failures_total{host="h",source="json-src"} 0' in text
    assert snap.to_json()["parse_failures"] == {"json-src": 0, "regex-src": 4}


# -- the runtime, in-process with the fake producer ------------------------------------


def test_runtime_ships_every_line_and_counts_failures_per_source(tmp_path: Path, run_agent, fake_producer) -> None:
    from tests.agent.conftest import agent_config, wait_until

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.json").write_bytes(b'{"n": 1}\nbroken\n{"n": 3}\n')
    (logs / "a.txt").write_bytes(b'1.2.3.4 "GET /" 200\nnope\n')
    config = agent_config(
        tmp_path,
        fields={"env": "prod"},
        sources=[
            {"name": "j", "pattern": f"{logs}/*.json", "topic": "logs", "parse": {"format": "json"}},
            {
                "name": "r",
                "pattern": f"{logs}/*.txt",
                "topic": "logs",
                "fields": {"env": "qa"},
                "parse": {"format": "regex", "regex": ACCESS.pattern.decode()},
            },
        ],
    )
    agent = run_agent(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 5)
    by_line = {r["line"]: r for r in fake_producer.records("logs")}
    assert by_line['{"n": 3}']["fields"] == {"n": 3, "env": "prod"}
    assert by_line["broken"]["unparsed"] is True and by_line["broken"]["fields"] == {"env": "prod"}
    assert by_line['1.2.3.4 "GET /" 200']["fields"]["env"] == "qa"
    assert by_line["nope"]["unparsed"] is True
    assert agent.agent.metrics.parse_failures == {"j": 1, "r": 1}
    agent.stop()


def test_a_multiline_message_is_parsed_after_joining(tmp_path: Path, run_agent, fake_producer) -> None:
    from tests.agent.conftest import agent_config, wait_until

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(b'{\n  "a": 1,\n  "b": [2]\n}\n{"c": true}\n')
    config = agent_config(
        tmp_path,
        sources=[
            {
                "name": "j",
                "pattern": f"{logs}/*.log",
                "topic": "logs",
                "parse": {"format": "json"},
                "multiline": {"start": "^\\{", "timeout_s": 0.05},
            }
        ],
    )
    agent = run_agent(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 2)
    records = fake_producer.records("logs")
    assert [r["fields"] for r in records] == [{"a": 1, "b": "[2]"}, {"c": True}]
    assert agent.agent.metrics.parse_failures == {"j": 0}
    agent.stop()


def test_status_text_lists_parse_failures_per_source() -> None:
    import time

    from agent.cli import format_status

    doc = {
        "host": "h",
        "pid": 1,
        "state": "running",
        "updated": time.time(),
        "parse_failures": {"json": 3, "access": 0},
    }
    assert "parse failures: json 3, access 0" in format_status(doc)
    assert "parse failures" not in format_status({**doc, "parse_failures": {}})

"""Static and parsed fields end to end: a real agent process ships JSON, regex and plain
sources to real brokers; every line comes back once, parsed or flagged, failures are
counted in the agent's metric, and the loader lands the fields as columns."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from hadoop_loader.job import run_load
from tests.agent.conftest import AgentProcess, consume, wait_until
from tests.loader.conftest import loader_config, read_landed

pytestmark = pytest.mark.integration

ACCESS = r'^(?P<ip>\S+) "(?P<method>[A-Z]+) (?P<path>\S+)" (?P<status>\d{3})'


def _files(logs: Path) -> tuple[int, int, int]:
    """Write the three sources' files; return (lines, parsed, failed) over all of them."""
    json_lines = []
    for i in range(600):
        if i % 10 == 3:
            json_lines.append(b"not json %d" % i)  # invalid
        elif i % 10 == 7:
            json_lines.append(b"[%d]" % i)  # JSON, not an object
        else:
            json_lines.append(json.dumps({"status": 200 + i % 3, "i": i, "env": "dev", "user": {"id": i}}).encode())
    access = [
        b'10.0.0.%d "GET /p/%d" %d' % (i % 250, i, 200 + (i % 2) * 304) if i % 4 else b"garbage %d" % i
        for i in range(400)
    ]
    plain = [b"plain line %d" % i for i in range(300)]
    (logs / "app.json").write_bytes(b"\n".join(json_lines) + b"\n")
    (logs / "access.log").write_bytes(b"\n".join(access) + b"\n")
    (logs / "plain.txt").write_bytes(b"\n".join(plain) + b"\n")
    failed_json = sum(1 for i in range(600) if i % 10 in (3, 7))
    failed_access = sum(1 for i in range(400) if i % 4 == 0)
    total = 600 + 400 + 300
    return total, 1000 - failed_json - failed_access, failed_json + failed_access


@pytest.mark.slow
def test_static_and_parsed_fields_ship_count_and_land(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    logs = tmp_path / "logs"
    logs.mkdir()
    total, parsed, failed = _files(logs)
    doc = {
        "host": "it-host",
        "state_dir": str(tmp_path / "state"),
        "poll_interval_s": 0.05,
        "scan_interval_s": 1.0,
        "checkpoint_interval_s": 0.2,
        "shutdown_timeout_s": 20.0,
        "cluster": {"brokers": cluster.bootstrap},
        "metrics": {"port": 0},
        "producer": {"linger_ms": 5, "delivery_timeout_s": 10.0, "request_timeout_s": 5.0},
        "audit": {"enabled": False},
        "fields": {"env": "prod", "service": "web"},
        "sources": [
            {"name": "json", "pattern": f"{logs}/*.json", "topic": "app", "parse": {"format": "json"}},
            {
                "name": "access",
                "pattern": f"{logs}/*.log",
                "topic": "app",
                "fields": {"service": "edge", "tier": 1},
                "parse": {"format": "regex", "regex": ACCESS},
            },
            {"name": "plain", "pattern": f"{logs}/*.txt", "topic": "app"},
        ],
    }
    workdir = tmp_path / "agent"
    workdir.mkdir()
    agent = AgentProcess(workdir, doc)
    try:
        agent.start()
        wait_until(lambda: agent.counter("messages_acked") >= total, 60, "acks")
        url = agent.status()["metrics_url"]
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert agent.status()["parse_failures"] == {"json": 120, "access": 100}
        assert agent.terminate() == 0, agent.log_tail()
    finally:
        agent.kill()
    assert 'logferry_agent_parse_failures_total{host="it-host",source="json"} 120' in text
    assert 'logferry_agent_parse_failures_total{host="it-host",source="access"} 100' in text
    assert failed == 220

    records = [v for _, _, v in consume(cluster.bootstrap, "app")]
    assert len(records) == total  # every line, once
    assert sum(1 for r in records if r.get("unparsed")) == failed
    by_file: dict[str, list[dict]] = {}
    for r in records:
        by_file.setdefault(Path(r["file"]).name, []).append(r)
    ok_json = [r for r in by_file["app.json"] if not r.get("unparsed")]
    ok_access = [r for r in by_file["access.log"] if not r.get("unparsed")]
    assert len(ok_json) + len(ok_access) == parsed
    first = ok_json[0]["fields"]
    assert first["env"] == "prod" and first["service"] == "web"  # static fields win
    assert first["user"] == json.dumps({"id": 0}, separators=(",", ":"))
    assert isinstance(first["status"], int)
    bad = next(r for r in by_file["app.json"] if r.get("unparsed"))
    assert bad["fields"] == {"env": "prod", "service": "web"} and bad["line"].startswith("not json")
    assert ok_access[0]["fields"] == {
        "ip": "10.0.0.1",
        "method": "GET",
        "path": "/p/1",
        "status": "504",
        "env": "prod",
        "service": "edge",
        "tier": 1,
    }
    assert all(r["fields"] == {"env": "prod", "service": "web"} and "unparsed" not in r for r in by_file["plain.txt"])

    out = tmp_path / "wh"
    config = loader_config(
        cluster.zk_connect,
        out,
        ["app"],
        source={"decode_agent_records": True, "field_columns": {"status": "long", "tier": "int"}},
    )
    result = run_load(config, spark=spark)
    assert result.rows == total and result.undecodable == 0
    table = read_landed(out).to_pydict()
    assert sum(1 for u in table["unparsed"] if u) == failed
    rows = list(zip(table["file"], table["fields"], table["status"], table["tier"], table["unparsed"], strict=True))
    statuses = [s for f, _, s, _, u in rows if f.endswith(".json") and not u]
    assert len(statuses) == 480 and set(statuses) == {200, 201, 202}
    edge = [(dict(m), s, t) for f, m, s, t, _ in rows if f.endswith("access.log")]
    assert all(m["tier"] == "1" and t == 1 and m["service"] == "edge" for m, _, t in edge)
    assert {s for m, s, _ in edge if "status" in m} == {200, 504}
    assert all(s is None for m, s, _ in edge if "status" not in m)

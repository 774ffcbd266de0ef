"""Config validation (errors name the key), glob matching, checkpoint file, CLI."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.checkpoint import CheckpointStore, Entry
from agent.cli import format_status, main, register
from agent.config import load_config, parse_config
from agent.discovery import Matcher, glob_regex, scan, static_root
from agent.errors import CheckpointError, ConfigError
from broker.common.config import dumps
from tests.agent.conftest import REPO


def minimal(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "state_dir": "/tmp/x",
        "cluster": {"brokers": ["127.0.0.1:9092"]},
        "sources": [{"pattern": "/var/log/*.log", "topic": "app"}],
    }
    doc.update(extra)
    return doc


def test_minimal_config_defaults() -> None:
    config = parse_config(minimal(host="web-7"))
    source = config.sources[0]
    assert source.key == b"web-7" and source.start_at == "beginning"
    assert config.audit.topic == "_audit" and config.audit.window_s == 60
    assert config.max_inflight_bytes == 32 * 1024 * 1024


@pytest.mark.parametrize(
    "change,key,words",
    [
        (
            {"sources": [{"pattern": "/a", "topic": "t"}, {"pattern": "relative/*.log", "topic": "t"}]},
            "sources[1].pattern",
            "absolute",
        ),
        ({"sources": [{"pattern": "/a/*.log"}]}, "sources[0].topic", "missing"),
        ({"sources": [{"pattern": "/a/*.log", "topic": "bad/topic"}]}, "sources[0].topic", "not a valid topic"),
        (
            {"sources": [{"pattern": "/a/*.log", "topic": "t", "multline": {}}]},
            "sources[0].multline",
            "did you mean 'multiline'",
        ),
        (
            {"sources": [{"pattern": "/a/*.log", "topic": "t", "time_pattern": "(unclosed"}]},
            "sources[0].time_pattern",
            "regular expression",
        ),
        (
            {"sources": [{"pattern": "/a/*.log", "topic": "t", "time_pattern": "x"}]},
            "sources[0].time_pattern",
            "(?P<time>",
        ),
        (
            {"sources": [{"pattern": "/a/*.log", "topic": "t", "multiline": {"continuation": "^ ", "start": "^x"}}]},
            "sources[0].multiline",
            "exactly one",
        ),
        (
            {"sources": [{"pattern": "/a/*.log", "topic": "t", "max_line_bytes": "big"}]},
            "sources[0].max_line_bytes",
            "positive integer",
        ),
        ({"cluster": {}}, "cluster", "exactly one"),
        ({"cluster": {"brokers": ["nohost"]}}, "cluster.brokers[0]", "host:port"),
        ({"max_inflight_bytes": 1000}, "sources[0].max_line_bytes", "max_inflight_bytes"),
        ({"metrics": {"port": 70000}}, "metrics.port", "port number"),
        ({"producer": {"acks": 0}}, "producer.acks", ""),
        ({"sources": []}, "sources", "at least one"),
    ],
)
def test_errors_name_the_key(change: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(**change))
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ") and words in str(info.value)


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing.toml: no such config file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("state_dir = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    good = tmp_path / "good.toml"
    good.write_text(dumps(minimal(state_dir="state")))
    assert load_config(good).state_dir == tmp_path / "state"


def test_example_config_is_valid() -> None:
    config = load_config(REPO / "etc" / "agent.toml")
    assert config.sources and config.zk


def test_compression_defaults_to_zstd_and_takes_every_codec() -> None:
    assert parse_config(minimal()).producer.compression == "zstd"
    for codec in ("none", "gzip", "lz4", "zstd"):
        assert parse_config(minimal(producer={"compression": codec})).producer.compression == codec
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(producer={"compression": "snappy"}))
    assert info.value.key == "producer.compression" and "'lz4'" in str(info.value)


@pytest.mark.parametrize(
    "pattern,path,hit",
    [
        ("/var/log/*.log", "/var/log/app.log", True),
        ("/var/log/*.log", "/var/log/sub/app.log", False),
        ("/var/log/**/*.log", "/var/log/app.log", True),
        ("/var/log/**/*.log", "/var/log/a/b/c.log", True),
        ("/var/log/**", "/var/log/a/b", True),
        ("/var/log/app-?.log", "/var/log/app-1.log", True),
        ("/var/log/app-[0-9].log", "/var/log/app-x.log", False),
        ("/var/log/app-[!0-9].log", "/var/log/app-x.log", True),
        ("/var/log/a.log", "/var/log/a.log.1", False),
    ],
)
def test_glob_regex(pattern: str, path: str, hit: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is hit


def test_static_root_and_matcher_excludes(tmp_path: Path) -> None:
    assert static_root("/var/log/*.log") == ("/var/log", False)
    assert static_root("/var/**/x/*.log") == ("/var", True)
    config = parse_config(
        minimal(
            sources=[
                {"pattern": f"{tmp_path}/**/*.log", "topic": "a", "exclude": ["**/skip/*"]},
                {"pattern": f"{tmp_path}/skip/*.log", "topic": "b"},
            ]
        )
    )
    (tmp_path / "skip").mkdir()
    (tmp_path / "x.log").write_text("x")
    (tmp_path / "skip" / "y.log").write_text("y")
    (tmp_path / "dir.log").mkdir()
    matcher = Matcher(config.sources)
    assert scan(config.sources, matcher) == {f"{tmp_path}/x.log": 0, f"{tmp_path}/skip/y.log": 1}


def test_checkpoint_round_trip_lock_and_corruption(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state", "h")
    store.lock()
    assert store.load() == {}
    entry = Entry(1, 2, 3, "abc", "/p", "/p.1", 77, "src")
    store.save([entry])
    assert store.load() == {entry.key: entry}
    assert not (tmp_path / "state" / "checkpoint.json.tmp").exists()
    other = CheckpointStore(tmp_path / "state", "h")
    with pytest.raises(CheckpointError, match="in use by agent pid"):
        other.lock()
    store.unlock()
    other.lock()
    other.unlock()
    (tmp_path / "state" / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        store.load()


def test_register_adds_agent_and_status() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["agent", "--config", "a.toml"])
    assert args.config == "a.toml" and args.func.__name__ == "run_command"
    args = parser.parse_args(["agent", "status", "--config", "b.toml", "--json"])
    assert args.config == "b.toml" and args.json and args.func.__name__ == "status_command"
    args = parser.parse_args(["agent", "--config", "c.toml", "status"])
    assert args.config == "c.toml" and args.func.__name__ == "status_command"
    args = parser.parse_args(["agent", "check", "--config", "d.toml", "--no-cluster"])
    assert args.config == "d.toml" and args.no_cluster and args.func.__name__ == "check_command"
    assert args.long_running is False


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(tmp_path / "nope.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.toml: no such config file" in err
    assert main([]) == 2
    assert "--config: required" in capsys.readouterr().err
    config = tmp_path / "a.toml"
    config.write_text(dumps(minimal(state_dir=str(tmp_path / "state"))))
    assert main(["status", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the agent running" in err


@pytest.mark.integration  # runs `python -m agent` as a process
def test_python_m_agent_bad_config_exits_2_without_traceback(tmp_path: Path) -> None:
    config = tmp_path / "a.toml"
    config.write_text(dumps(minimal(sources=[{"pattern": "x", "topic": "t"}])))
    result = subprocess.run(
        [sys.executable, "-m", "agent", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env=dict(os.environ),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"logferry agent: error: {config}: sources[0].pattern: 'x' must be an absolute glob pattern"
    )


def test_format_status() -> None:
    import time

    doc = {
        "host": "h",
        "pid": 1,
        "state": "running",
        "updated": time.time(),
        "counters": {"messages_acked": 5},
        "gauges": {"tracked_files": 2},
        "files": [{"path": "/a", "inode": 3, "offset": 1, "size": 2, "lag": 1, "rotated": True}],
    }
    text = format_status(doc, show_files=True)
    assert "agent h pid 1: running" in text and "5 acked" in text and "[rotated]" in text
    doc["updated"] = 0
    assert "not running" in format_status(doc)
    json.dumps(doc)


def test_check_bad_config_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "a.toml"
    config.write_text(dumps(minimal(sources=[{"pattern": "/a/*.log", "topic": "bad/topic"}])))
    assert main(["check", "--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        f"logferry agent check: error: {config}: sources[0].topic: 'bad/topic' is not a valid topic name"
    )
    assert main(["check"]) == 2
    assert "--config: required" in capsys.readouterr().err


def test_check_without_cluster_lists_files_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(b"x" * 99 + b"\n")
    config = tmp_path / "a.toml"
    config.write_text(
        dumps(
            minimal(
                state_dir=str(tmp_path / "state"),
                sources=[
                    {"name": "app", "pattern": f"{logs}/*.log", "topic": "app"},
                    {"name": "none", "pattern": f"{logs}/*.txt", "topic": "t"},
                ],
            )
        )
    )
    assert main(["check", "--config", str(config), "--no-cluster"]) == 0
    out = capsys.readouterr().out
    assert f"config {config}: valid; host " in out
    assert "source app -> topic app" in out and ": 1 file" in out
    assert f"  {logs}/a.log: 100 B, starts at offset 0 (beginning)" in out
    assert "source none -> topic t" in out and ": 0 files" in out
    assert not (tmp_path / "state").exists()  # no checkpoint, no lock, no status file


@pytest.mark.integration  # runs `python -m agent check` as a process
@pytest.mark.parametrize("cluster", [{"zk": "127.0.0.1:1/logferry/nowhere"}, {"brokers": ["127.0.0.1:1"]}])
def test_check_unreachable_cluster_exits_1_quickly(tmp_path: Path, cluster: dict[str, Any]) -> None:
    config = tmp_path / "a.toml"
    config.write_text(dumps(minimal(state_dir=str(tmp_path / "state"), cluster=cluster)))
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "agent", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env=dict(os.environ),
    )
    elapsed = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert elapsed < 15, f"took {elapsed:.1f}s"
    assert "source /var/log/*.log -> topic app" in result.stdout  # files still listed
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert errors[0].startswith("logferry agent check: error: cluster not reachable: ")
    assert "127.0.0.1:1" in errors[0]

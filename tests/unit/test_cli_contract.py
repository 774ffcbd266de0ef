"""Every ``logferry`` command keeps one contract (broker.common.commands, docs/operations.md):
usage or config mistakes exit 2, run-time failures exit 1, Ctrl-C 130, and an error is the
one line ``logferry <command>: error: <message>``; short-lived commands log at WARNING.

Commands run in this process through ``broker.cli.main.main``. Run-time failures are
caused for real: a closed port on 127.0.0.1 for the brokers or ZooKeeper (ZooKeeper's
connect timeout shortened so the tests stay fast), a path under a regular file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.cli import main as cli
from broker.cli.delivery import DeliveryTally, NotDeliveredError
from broker.cli.render import check_format, render
from broker.client import Message
from broker.client.delivery import DeliveryFuture
from broker.common import commands
from broker.common.errors import (
    BrokerNotAvailableError,
    ConfigError,
    InvalidTopicError,
    StorageError,
)
from broker.coordination import zk
from tests.support.ports import free_port

# -- the shared pieces ------------------------------------------------------------------------


def test_error_line_is_one_line_with_the_command() -> None:
    assert commands.error_line("topic create", "bad\nsecond") == "logferry topic create: error: bad"
    assert commands.error_line("zk", "") == "logferry zk: error: failed"


def test_exit_codes_by_error_kind() -> None:
    assert commands.exit_code_for(ConfigError("x")) == commands.EXIT_USAGE == 2
    assert commands.exit_code_for(InvalidTopicError("x")) == 2
    assert commands.exit_code_for(BrokerNotAvailableError("x")) == commands.EXIT_FAILURE == 1
    assert commands.EXIT_INTERRUPTED == 130


@pytest.mark.parametrize(
    "verbosity, long_running, level",
    [
        (0, False, logging.WARNING),
        (1, False, logging.INFO),
        (2, False, logging.DEBUG),
        (0, True, logging.INFO),
        (1, True, logging.DEBUG),
        (5, True, logging.DEBUG),
    ],
)
def test_log_level(verbosity: int, long_running: bool, level: int) -> None:
    assert commands.log_level(verbosity, long_running) == level


# -- consume --format -------------------------------------------------------------------------


def test_format_names_the_unknown_field_and_the_available_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        check_format("{nope}")
    message = str(caught.value)
    assert "unknown field {nope}" in message
    assert "{topic} {partition} {offset} {index} {key} {value} {timestamp}" in message
    for bad in ("{}", "{0}", "{value", "{offset:zz}"):
        with pytest.raises(ConfigError, match="available: {topic}"):
            check_format(bad)
    for good in ("{value}", "{partition} {offset:>8} {key!r} {timestamp}", "plain"):
        check_format(good)


def test_render_decodes_key_and_value() -> None:
    message = Message("t", 1, 100, 2, b"k", b"v\xff", 5)
    assert render("{value}", message) == "v\ufffd"
    assert render("{topic}/{partition}@{offset}.{index} {key}={value} {timestamp}", message) == "t/1@100.2 k=v\ufffd 5"


# -- delivery accounting ----------------------------------------------------------------------


def test_tally_all_delivered() -> None:
    tally = DeliveryTally()
    future = DeliveryFuture()
    tally.sent(1000, future)
    tally.sent(500, future)
    future._complete(0)
    assert tally.outcome(1500, "t") == "produced 1500 messages to t"


def test_tally_counts_what_was_not_delivered_and_names_the_first_error() -> None:
    tally = DeliveryTally()
    ok, full, late = DeliveryFuture(), DeliveryFuture(), DeliveryFuture()
    for future in (ok, full, late):
        tally.sent(1000, future)
    ok._complete(0)
    full._complete(None, StorageError("No space left on device"))
    late._complete(None, BrokerNotAvailableError("later"))
    with pytest.raises(NotDeliveredError) as caught:
        tally.outcome(1000, "t")
    assert str(caught.value) == ("2000 of 3000 messages to t were not delivered: No space left on device")
    assert commands.exit_code_for(caught.value) == 1


def test_tally_a_failed_first_send_is_reported_as_it_is() -> None:
    tally = DeliveryTally()
    tally.failed(BrokerNotAvailableError("cannot connect"))
    with pytest.raises(BrokerNotAvailableError):
        tally.outcome(0, "t")


def test_tally_send_failing_after_some_were_delivered_still_fails() -> None:
    tally = DeliveryTally()
    future = DeliveryFuture()
    tally.sent(10, future)
    future._complete(0)
    tally.failed(BrokerNotAvailableError("buffer full"))
    with pytest.raises(NotDeliveredError, match="stopped after 10 messages to t: buffer full"):
        tally.outcome(10, "t")


# -- every command family: a usage/config error and a run-time failure ----------------------


@pytest.fixture(autouse=True)
def _restore_logging() -> Any:
    root, kazoo = logging.getLogger(), logging.getLogger("kazoo")
    levels = root.level, kazoo.level
    yield
    root.setLevel(levels[0])
    kazoo.setLevel(levels[1])


@pytest.fixture
def short_zk_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper clients give up after 0.5 s (the real connect, just a shorter wait)."""
    real = zk.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "timeout": 0.5})

    monkeypatch.setattr(zk, "connect", connect)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    def run_cli(*argv: str) -> tuple[int, str]:
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        return code, capsys.readouterr().err

    return run_cli


def closed() -> str:
    return f"127.0.0.1:{free_port()}"


def assert_error(result: tuple[int, str], code: int, command: str, *words: str) -> None:
    got, err = result
    last = err.strip().splitlines()[-1]
    assert got == code, err
    assert last.startswith(f"logferry {command}: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in last, last


def test_topic(run: Callable[..., tuple[int, str]]) -> None:
    assert_error(run("topic", "create", "../evil", "--brokers", closed()), 2, "topic create", "invalid topic name")
    assert_error(run("topic", "frobnicate"), 2, "topic", "invalid choice")
    assert_error(run("topic", "list", "--brokers", closed()), 1, "topic list", "cannot connect")


def test_produce(run: Callable[..., tuple[int, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert_error(
        run("produce", "t", "--delivery-timeout", "0", "--brokers", closed()), 2, "produce", "--delivery-timeout"
    )
    assert_error(run("produce", "t", "--acks", "2"), 2, "produce", "--acks")
    assert_error(
        run("produce", "t", "--header", "novalue", "--brokers", closed()), 2, "produce", "--header", "KEY=VALUE"
    )
    lines = tmp_path / "lines"
    lines.write_text("one\ntwo\n")
    with lines.open() as stdin:  # closed here, not left to the garbage collector
        monkeypatch.setattr("sys.stdin", stdin)
        assert_error(run("produce", "t", "--brokers", closed()), 1, "produce", "cannot connect")


def test_consume(run: Callable[..., tuple[int, str]]) -> None:
    assert_error(
        run("consume", "t", "--format", "{nope}", "--brokers", closed()),
        2,
        "consume",
        "unknown field {nope}",
        "{timestamp}",
    )
    assert_error(run("consume", "t", "--from", "yesterday", "--brokers", closed()), 2, "consume", "--from")
    assert_error(run("consume", "t", "--brokers", closed()), 1, "consume", "cannot connect")


def test_consume_logs_at_warning_unless_verbose(run: Callable[..., tuple[int, str]]) -> None:
    run("consume", "t", "--brokers", closed())
    assert logging.getLogger().level == logging.WARNING
    run("consume", "-v", "t", "--brokers", closed())
    assert logging.getLogger().level == logging.INFO
    run("-v", "consume", "-v", "t", "--brokers", closed())
    assert logging.getLogger().level == logging.DEBUG


def test_group(run: Callable[..., tuple[int, str]], short_zk_timeout: None) -> None:
    assert_error(run("group", "list", "--brokers", closed()), 2, "group list", "--zk")
    assert_error(
        run("group", "seek", "g", "--topic", "../x", "--to", "earliest", "--zk", closed() + "/x"),
        2,
        "group seek",
        "invalid topic name",
    )
    assert_error(
        run("group", "seek", "g", "--topic", "t", "--to=-5", "--zk", closed() + "/x"),
        2,
        "group seek",
        "for consume --from",
    )
    assert_error(run("group", "list", "--zk", closed() + "/x"), 1, "group list", "ZooKeeper")


@pytest.mark.integration  # `zk start` runs `java -version` before anything else
def test_zk(run: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    assert_error(run("zk", "start", "--port", "0"), 2, "zk start", "out of range")
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert_error(
        run("zk", "start", "--data-dir", str(a_file / "zk"), "--port", str(free_port())),
        1,
        "zk start",
        "Not a directory",
    )


def test_broker_config_error(run: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    """(Its run-time failure, ZooKeeper not there, is test_broker_operations'
    test_unreachable_zookeeper_is_a_clear_error: a broker needs its own process.)"""
    assert_error(run("broker", "--config", str(tmp_path / "missing.toml")), 2, "broker", "no such config file")
    assert logging.getLogger().level == logging.INFO  # a service keeps its INFO lines


def test_agent(run: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    pytest.importorskip("watchdog")
    assert_error(run("agent"), 2, "agent", "--config")
    config = tmp_path / "agent.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[cluster]\nbrokers = ["{closed()}"]\n'
        f'[[sources]]\npattern = "{tmp_path}/*.log"\ntopic = "t"\n'
    )
    assert_error(run("agent", "status", "--config", str(config)), 1, "agent status", "is the agent running")
    assert_error(run("agent", "check", "--config", str(config)), 1, "agent check", "cluster not reachable")
    assert_error(
        run("agent", "check", "--config", str(tmp_path / "missing.toml")), 2, "agent check", "no such config file"
    )


def test_mirror(run: Callable[..., tuple[int, str]], tmp_path: Path, short_zk_timeout: None) -> None:
    assert_error(run("mirror"), 2, "mirror", "--config")
    config = tmp_path / "mirror.toml"
    config.write_text(
        f'[source]\nzk_connect = "{closed()}/a"\n[target]\nzk_connect = '
        f'"{closed()}/b"\n[mirror]\ngroup = "m"\ntopics = ["t"]\n'
    )
    assert_error(run("mirror", "status", "--config", str(config)), 1, "mirror status", "ZooKeeper")


def test_load(run: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    assert_error(run("load", "--config", str(tmp_path / "missing.toml")), 2, "load", "no such config file")
    config = tmp_path / "loader.toml"
    config.write_text(
        f'[source]\nbrokers = ["{closed()}"]\ntopics = ["t"]\n[output]\nuri = "{(tmp_path / "wh").as_uri()}"\n'
    )
    assert_error(run("load", "--config", str(config), "--no-audit"), 1, "load", "cannot connect")


def test_demo(run: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    from demo.cli import missing_modules

    if missing_modules():
        pytest.skip("the demo needs every extra")
    assert_error(run("demo", "--seconds", "0", "--workdir", str(tmp_path / "d")), 2, "demo", "--seconds")
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert_error(run("demo", "--workdir", str(a_file / "demo")), 1, "demo", "Not a directory")


def test_demo_without_its_lakes_jars(
    run: Callable[..., tuple[int, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default lake (HDFS + Iceberg) without Hadoop's jars: one line before anything starts."""
    from demo.cli import missing_modules

    if missing_modules():
        pytest.skip("the demo needs every extra")
    monkeypatch.setenv("LOGFERRY_BENCH_CACHE", str(tmp_path / "no-jars"))
    workdir = tmp_path / "d"
    assert_error(run("demo", "--workdir", str(workdir)), 1, "demo", "make hadoop-jars", "or run it with --lake file")
    assert sorted(p.name for p in workdir.iterdir()) == [".logferry-demo"]  # nothing started

"""broker.testing.zkserver without Java: zoo.cfg, classpath and Java discovery, pidfiles, start-up
failures, the four-letter-word client, the ``zk`` command line and the test-support
helpers around them. The real server is exercised in
tests/integration/test_zookeeper_harness.py."""

from __future__ import annotations

import argparse
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.cli import zk_cmd
from broker.common.errors import ZooKeeperError
from broker.testing.zkserver import (
    APT_COMMAND,
    MAIN_CLASS,
    ZOOKEEPER_JARS,
    LocalZooKeeper,
    ZooKeeperInstall,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
    discover_install,
    find_classpath,
    find_java,
    four_letter_word,
    parse_java_major,
    parse_srvr,
    port_is_free,
    read_cfg,
    render_log4j_properties,
    render_zoo_cfg,
    tail_lines,
)
from tests.support import failure_log_sections, register_log_source, unregister_log_source
from tests.support.ports import free_port
from tests.support.waiting import wait_until


def _executable(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_install(tmp_path: Path, script: str) -> ZooKeeperInstall:
    """An install whose "java" is a shell script: start-up paths without a JVM."""
    java = _executable(tmp_path / "java", script)
    return ZooKeeperInstall(java=java, java_major=17, classpath=(tmp_path / "zookeeper.jar",))


# ----------------------------------------------------------------------------- zoo.cfg


def test_zoo_cfg_has_the_settings_tests_rely_on(tmp_path):
    cfg_file = tmp_path / "zoo.cfg"
    cfg_file.write_text(render_zoo_cfg(tmp_path / "data dir", 21810))
    cfg = read_cfg(cfg_file)
    assert cfg["tickTime"] == "500"
    assert cfg["dataDir"] == str(tmp_path / "data dir")
    assert cfg["clientPort"] == "21810"
    assert cfg["clientPortAddress"] == "127.0.0.1"
    assert cfg["admin.enableServer"] == "false"
    assert cfg["4lw.commands.whitelist"] == "ruok,srvr,stat"
    assert int(cfg["maxSessionTimeout"]) >= 30_000
    assert cfg["maxClientCnxns"] == "0"
    assert cfg["forceSync"] == "yes"


def test_zoo_cfg_options(tmp_path):
    cfg = render_zoo_cfg(tmp_path, 2181, tick_ms=200, max_session_timeout_ms=90_000, force_sync=False)
    assert "tickTime=200\n" in cfg
    assert "maxSessionTimeout=90000\n" in cfg
    assert "forceSync=no\n" in cfg


def test_an_ensemble_members_zoo_cfg_names_every_peer_and_its_myid_file(tmp_path):
    peers = [(2, "10.77.1.2"), (1, "10.77.1.1"), (3, "10.77.1.3")]
    cfg = render_zoo_cfg(tmp_path, 2181, "10.77.1.2", peers=peers)
    assert "initLimit=10\nsyncLimit=5\n" in cfg
    assert cfg.endswith("server.1=10.77.1.1:2888:3888\nserver.2=10.77.1.2:2888:3888\nserver.3=10.77.1.3:2888:3888\n")
    assert "\nserver." not in render_zoo_cfg(tmp_path, 2181) and "initLimit" not in render_zoo_cfg(tmp_path, 2181)
    member = LocalZooKeeper(tmp_path / "zk2", 2181, "10.77.1.2", peers=peers, myid=2)
    member.write_config()
    assert (tmp_path / "zk2" / "myid").read_text() == "2\n"
    with pytest.raises(ZooKeeperError, match="must include itself"):
        LocalZooKeeper(tmp_path / "zk4", 2181, "10.77.1.4", peers=peers, myid=4)


@pytest.mark.parametrize("bad", ["a\\b", "a\nb"])
def test_zoo_cfg_refuses_paths_java_properties_would_mangle(tmp_path, bad):
    with pytest.raises(ZooKeeperError, match="data dir"):
        render_zoo_cfg(tmp_path / bad, 2181)


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_zoo_cfg_refuses_bad_ports(tmp_path, port):
    with pytest.raises(ZooKeeperError, match="out of range"):
        render_zoo_cfg(tmp_path, port)


def test_log4j_writes_to_the_given_file(tmp_path):
    props = render_log4j_properties(tmp_path / "zookeeper.log")
    assert "log4j.rootLogger=INFO, FILE\n" in props
    assert f"log4j.appender.FILE.File={tmp_path / 'zookeeper.log'}\n" in props
    assert "RollingFileAppender" in props


# ------------------------------------------------------------------ install discovery


def test_classpath_is_debians_jars_in_order(tmp_path):
    for name in ZOOKEEPER_JARS:
        (tmp_path / name).write_bytes(b"PK")
    assert find_classpath(tmp_path) == tuple(tmp_path / name for name in ZOOKEEPER_JARS)


def test_missing_jars_are_named_with_the_command_to_run(tmp_path):
    for name in ZOOKEEPER_JARS[1:]:
        (tmp_path / name).write_bytes(b"PK")
    with pytest.raises(ZooKeeperNotInstalledError) as info:
        find_classpath(tmp_path)
    message = str(info.value)
    assert "zookeeper.jar" in message and "zookeeper-jute.jar" not in message
    assert "make system-deps" in message and APT_COMMAND in message
    assert isinstance(info.value, ZooKeeperError) and not info.value.retriable


@pytest.mark.parametrize(
    "text, major",
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "11" 2018-09-25', 11),
        ('openjdk version "21-ea" 2023-09-19', 21),
        ("command not found", None),
    ],
)
def test_parse_java_major(text, major):
    assert parse_java_major(text) == major


def test_java_home_wins_over_path(tmp_path):
    (tmp_path / "home" / "bin").mkdir(parents=True)
    home_java = _executable(tmp_path / "home" / "bin" / "java", "")
    (tmp_path / "path").mkdir()
    path_java = _executable(tmp_path / "path" / "java", "")
    path = str(tmp_path / "path")
    assert find_java({"JAVA_HOME": str(tmp_path / "home"), "PATH": path}) == home_java
    assert find_java({"JAVA_HOME": str(tmp_path / "nowhere"), "PATH": path}) == path_java
    assert find_java({"PATH": path}) == path_java


def test_no_java_says_what_to_install(tmp_path):
    with pytest.raises(ZooKeeperNotInstalledError, match="no Java runtime found.*make system-deps"):
        find_java({"PATH": str(tmp_path)})


@pytest.mark.integration  # runs a stand-in `java` script as a process
def test_too_old_java_is_refused(tmp_path):
    for name in ZOOKEEPER_JARS:
        (tmp_path / name).write_bytes(b"PK")
    for version in ("1.8.0_292", "17.0.2"):
        (tmp_path / version).mkdir()
        _executable(tmp_path / version / "java", f"echo 'openjdk version \"{version}\"' >&2\n")
    with pytest.raises(ZooKeeperNotInstalledError, match="Java 8, ZooKeeper needs Java 11"):
        discover_install(tmp_path, {"PATH": str(tmp_path / "1.8.0_292")})
    install = discover_install(tmp_path, {"PATH": str(tmp_path / "17.0.2")})
    assert install.java_major == 17
    assert install.classpath_arg == os.pathsep.join(str(tmp_path / n) for n in ZOOKEEPER_JARS)


# ---------------------------------------------------------------- the server process


def test_write_config_and_command_line(tmp_path):
    server = LocalZooKeeper(tmp_path / "zk", 21811)
    server.write_config()
    assert read_cfg(server.config_path)["clientPort"] == "21811"
    assert (server.data_dir / "log4j.properties").is_file()
    install = ZooKeeperInstall(Path("/usr/bin/java"), 17, (Path("/j/a.jar"), Path("/j/b.jar")))
    cmd = server.command(install)
    assert cmd[0] == "/usr/bin/java"
    assert cmd[-2:] == [MAIN_CLASS, str(server.config_path)]
    assert cmd[cmd.index("-cp") + 1] == "/j/a.jar:/j/b.jar"
    assert f"-Dlog4j.configuration={(server.data_dir / 'log4j.properties').as_uri()}" in cmd


def test_from_data_dir_reads_the_port_back(tmp_path):
    LocalZooKeeper(tmp_path, 21812).write_config()
    assert LocalZooKeeper.from_data_dir(tmp_path).port == 21812
    assert LocalZooKeeper.from_data_dir(tmp_path, 3000).port == 3000
    assert LocalZooKeeper.from_data_dir(tmp_path / "never-started").port == 2181


@pytest.mark.parametrize("content", ["", "garbage", "999999999", "{pid}"])
def test_stale_or_foreign_pidfile_is_not_a_running_server(tmp_path, content):
    server = LocalZooKeeper(tmp_path, 21813)
    server.data_dir.mkdir(exist_ok=True)
    # {pid} is this pytest process: alive, but not a ZooKeeper of this data dir.
    server.pid_path.write_text(content.format(pid=os.getpid()))
    assert server.pid is None
    assert not server.is_running()
    server.stop()  # nothing to stop: no error, and never a signal to the foreign pid
    assert not server.pid_path.exists()


def test_start_without_install_names_the_fix_and_leaves_nothing(tmp_path):
    server = LocalZooKeeper(tmp_path / "zk", free_port(), java_dir=tmp_path / "no-jars")
    with pytest.raises(ZooKeeperNotInstalledError, match="make system-deps"):
        server.start()
    assert not server.pid_path.exists()


def test_start_on_a_taken_port_fails_before_spawning(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        marker = tmp_path / "spawned"
        server = LocalZooKeeper(tmp_path / "zk", port, install=_fake_install(tmp_path, f"touch {marker}\n"))
        with pytest.raises(ZooKeeperStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
    assert not marker.exists()
    assert port_is_free("127.0.0.1", port)


@pytest.mark.integration  # runs a stand-in `java` script as a process
def test_a_jvm_that_dies_at_start_fails_fast_with_its_output(tmp_path):
    install = _fake_install(tmp_path, "echo 'Error: Could not find or load main class X'\nexit 1\n")
    server = LocalZooKeeper(tmp_path / "zk", free_port(), install=install)
    with pytest.raises(ZooKeeperStartError) as info:
        server.start(timeout=20)
    assert "exited with code 1" in info.value.summary
    assert "Could not find or load main class" in info.value.log_tail
    assert "Could not find or load main class" in str(info.value)
    assert not server.is_running() and not server.pid_path.exists()


@pytest.mark.integration  # runs a stand-in `java` script as a process
def test_a_server_that_never_serves_times_out_and_is_killed(tmp_path):
    install = _fake_install(tmp_path, "exec sleep 30\n")
    server = LocalZooKeeper(tmp_path / "zk", free_port(), install=install)
    with pytest.raises(ZooKeeperStartError, match="did not serve within 0.3s"):
        server.start(timeout=0.3)
    assert not server.is_running() and not server.pid_path.exists()


def test_log_tail_joins_the_log_and_jvm_output(tmp_path):
    server = LocalZooKeeper(tmp_path, 21814)
    assert "no log yet" in server.log_tail()
    server.log_path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert server.log_tail(3) == "line 97\nline 98\nline 99"
    server.out_path.write_text("hs_err\n")
    assert server.log_tail(2).splitlines() == [
        "line 98",
        "line 99",
        "--- zookeeper.out (JVM stdout/stderr) ---",
        "hs_err",
    ]


def test_tail_lines_reads_only_the_end_of_big_files(tmp_path):
    big = tmp_path / "big.log"
    big.write_text("x" * 5_000_000 + "\nlast\n")
    assert tail_lines(big, 1) == ["last"]
    assert tail_lines(tmp_path / "missing.log", 5) == []


# ------------------------------------------------------------------ four-letter words


@pytest.fixture
def fake_4lw_server() -> Iterator[tuple[int, list[bytes]]]:
    """A socket that answers like ZooKeeper: read the word, reply, close."""
    replies = {b"ruok": b"imok", b"srvr": b"Zookeeper version: 3.8.0\nMode: standalone\nConnections: 2\n"}
    received: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(5)

    def serve() -> None:
        for _ in range(2):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                word = conn.recv(4)
                received.append(word)
                conn.sendall(replies.get(word, b""))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], received
    listener.close()
    thread.join(5)


def test_four_letter_words(fake_4lw_server):
    port, received = fake_4lw_server
    assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
    assert parse_srvr(four_letter_word("127.0.0.1", port, "srvr"))["Connections"] == "2"
    assert received == [b"ruok", b"srvr"]


def test_nobody_listening_is_an_oserror_and_not_serving(tmp_path):
    port = free_port()
    with pytest.raises(OSError):
        four_letter_word("127.0.0.1", port, "ruok", timeout=1)
    assert not LocalZooKeeper(tmp_path, port).is_serving()


def test_parse_srvr():
    text = (
        "Zookeeper version: 3.8.0-x, built on 2023-01-01 00:00 UTC\nLatency min/avg/max: 0/0.1/3\n"
        "Connections: 4\nMode: standalone\nNode count: 12\n"
    )
    fields = parse_srvr(text)
    assert fields["Mode"] == "standalone"
    assert fields["Node count"] == "12"
    assert fields["Zookeeper version"].startswith("3.8.0-x, built on 2023-01-01 00:00")
    assert parse_srvr("This ZooKeeper instance is not currently serving requests\n") == {}


# ---------------------------------------------------------------------- command line


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="logferry")
    zk_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_options_and_defaults():
    args = _parse(["zk", "start"])
    assert args.func is zk_cmd.cmd_start
    assert args.port is None and args.data_dir == Path(".logferry/zookeeper")
    args = _parse(["zk", "status", "--port", "2182", "--data-dir", "/tmp/x"])
    assert args.func is zk_cmd.cmd_status and args.port == 2182 and args.data_dir == Path("/tmp/x")


@pytest.mark.parametrize("argv", [["zk"], ["zk", "start", "--port", "http"], ["zk", "stop", "--port", "70000"]])
def test_cli_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        _parse(argv)
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_stop_and_status_when_nothing_runs(tmp_path, capsys):
    assert zk_cmd.main(["status", "--data-dir", str(tmp_path)]) == zk_cmd.EXIT_NOT_RUNNING
    assert zk_cmd.main(["stop", "--data-dir", str(tmp_path)]) == zk_cmd.EXIT_OK
    out = capsys.readouterr().out
    assert "not running" in out and str(tmp_path) in out


def test_cli_start_without_install_is_one_line(tmp_path, capsys, monkeypatch):
    def not_installed(*args: object) -> ZooKeeperInstall:
        raise ZooKeeperNotInstalledError("no Java runtime found; run `make system-deps`")

    monkeypatch.setattr("broker.testing.zkserver.discover_install", not_installed)
    code = zk_cmd.main(["start", "--data-dir", str(tmp_path / "zk"), "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == zk_cmd.EXIT_FAILED
    assert err.count("\n") == 1 and "make system-deps" in err


# ------------------------------------------------------------------------ test support


def test_free_ports_are_distinct_and_bindable():
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20
    for port in list(ports)[:3]:
        assert port_is_free("127.0.0.1", port)


def test_failure_logs_only_for_tests_that_used_the_fixture():
    config = SimpleNamespace(stash=pytest.Stash())
    source = SimpleNamespace(log_tail=lambda lines: f"{lines} lines of zk log")
    register_log_source(config, "zk", source, fixture="zookeeper", title="ZooKeeper log")
    used = SimpleNamespace(config=config, fixturenames=["zk_connect", "zookeeper"])
    unit = SimpleNamespace(config=config, fixturenames=["tmp_path"])
    assert failure_log_sections(used, lines=7) == [("ZooKeeper log (last 7 lines)", "7 lines of zk log")]
    assert failure_log_sections(unit) == []
    unregister_log_source(config, "zk")
    assert failure_log_sections(used) == []


def test_wait_until_is_bounded():
    calls = []
    wait_until(lambda: calls.append(1) or len(calls) >= 3, timeout=5, interval=0.001)
    assert len(calls) == 3
    with pytest.raises(AssertionError, match="the impossible"):
        wait_until(lambda: False, timeout=0.05, interval=0.01, what="the impossible")


def test_cli_ensemble_members_are_on_loopback_addresses_of_their_own(tmp_path):
    args = _parse(["zk", "start", "--ensemble", "3", "--data-dir", str(tmp_path)])
    assert args.ensemble == 3
    members = zk_cmd.ensemble_members(tmp_path, 3, 2181)
    assert [m.hosts for m in members] == ["127.0.0.1:2181", "127.0.0.2:2181", "127.0.0.3:2181"]
    assert [m.data_dir for m in members] == [(tmp_path / f"member-{n}").resolve() for n in (1, 2, 3)]
    members[1].write_config()
    cfg = (tmp_path / "member-2" / "zoo.cfg").read_text()
    assert "clientPortAddress=127.0.0.2" in cfg and "server.3=127.0.0.3:2888:3888" in cfg
    assert (tmp_path / "member-2" / "myid").read_text().strip() == "2"
    assert [m.host for m in zk_cmd._found_members(tmp_path, None)] == ["127.0.0.2"]  # found by its zoo.cfg


@pytest.mark.parametrize("size", ["2", "4", "0", "three"])
def test_cli_an_ensemble_has_3_or_5_members(size, capsys):
    with pytest.raises(SystemExit) as info:
        _parse(["zk", "start", "--ensemble", size])
    assert info.value.code == 2
    assert "3 or 5 members" in capsys.readouterr().err

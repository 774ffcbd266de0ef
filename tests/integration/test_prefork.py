"""The fork server (broker.testing.prefork) starts a child as ``python -m`` would.

Each case runs the same child both ways where it matters, forked from a real fork
server and exec'd, and compares what a harness sees: output, exit status, death by
signal, argv, working directory, environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker.testing import prefork
from broker.testing.network import Network
from tests.support.network import network_unavailable
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.support.prefork_child"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One for the module: a server's start imports the broker (a second or two of CPU)."""
    forks = prefork.ForkServer(tmp_path_factory.mktemp("server"))
    yield forks
    forks.stop()


def _run(server: prefork.ForkServer, tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    out = tmp_path / "out.log"
    with out.open("wb") as output, open(os.devnull, "rb") as null:
        fds = (null.fileno(), output.fileno(), output.fileno())
        child = server.spawn(CHILD, args, *fds, env or dict(os.environ), ROOT)
    return child, out


def _exec(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", CHILD, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_forked_child_gets_its_argv_cwd_environment_and_output(server, tmp_path):
    env = dict(os.environ, PREFORK_MARKER="seen")
    forked = server.forked
    child, out = _run(server, tmp_path, "report", "x y", env=env)
    assert child.wait(30) == 0
    report = json.loads(out.read_text())
    assert report["argv"][1:] == ["report", "x y"]
    assert report["argv"][0].endswith("tests/support/prefork_child.py")
    assert report["cwd"] == str(ROOT)
    assert report["marker"] == "seen"
    assert report["preloaded"] is True  # what the fork skipped importing
    assert report["name"] == "lf-tests.suppor"  # /proc/PID/comm keeps 15 bytes
    assert server.forked == forked + 1


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_a_child_asked_for_inside_a_network_namespace_runs_there_forked_or_exec_d(server, tmp_path):
    """One fork server serves every host of the test network: the child enters the
    asking thread's namespace (an exec'd child of that thread is there anyway)."""
    with Network() as net:
        net.switch("lan")
        host = net.host("h", "lan")
        with host.inside():
            inside = os.readlink("/proc/thread-self/ns/net")
            forked = server.forked
            child, out = _run(server, tmp_path, "report")
            execd = _exec(tmp_path, "report")
        assert child.wait(30) == 0
        assert server.forked == forked + 1
        assert json.loads(out.read_text())["netns"] == inside
        assert json.loads(execd.stdout)["netns"] == inside
        child, out = _run(server, tmp_path, "report")  # asked for from outside: outside
        assert child.wait(30) == 0
        assert json.loads(out.read_text())["netns"] == os.readlink("/proc/self/ns/net") != inside


@pytest.mark.parametrize(("args", "code"), [(("exit", "3"), 3), (("exit", "0"), 0), (("raise",), 1), (("nope",), 2)])
def test_exit_status_is_what_exec_gives(server, tmp_path, args, code):
    child, out = _run(server, tmp_path, *args)
    assert child.wait(30) == code == _exec(tmp_path, *args).returncode
    if args[0] == "raise":
        assert "RuntimeError: raised on purpose" in out.read_text()


def test_keyboard_interrupt_dies_of_sigint_as_exec_does(server, tmp_path):
    child, _ = _run(server, tmp_path, "interrupt")
    assert child.wait(30) == -signal.SIGINT == _exec(tmp_path, "interrupt").returncode


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_signalled_child_reports_the_signal(server, tmp_path, sig):
    child, out = _run(server, tmp_path, "sleep")
    wait_until(lambda: "sleeping" in out.read_text(), 30, "the child to start")
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.2)
    child.send_signal(sig)
    assert child.wait(30) == -sig
    child.kill()  # after the end: nothing happens, as with Popen
    assert child.poll() == -sig


def test_start_module_execs_only_when_what_is_read_at_start_differs(server, tmp_path):
    prefork.install(server)
    seed = str(int(os.environ.get("PYTHONHASHSEED", "0") or 0) + 1)
    try:
        with (tmp_path / "a.log").open("wb") as out:
            same = prefork.start_module(CHILD, ["exit", "0"], out, dict(os.environ), ROOT)
            spark = prefork.start_module(CHILD, ["exit", "0"], out, dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), ROOT)
            other = prefork.start_module(CHILD, ["exit", "0"], out, dict(os.environ, PYTHONHASHSEED=seed), ROOT)
        assert isinstance(same, prefork.ForkedProcess)
        assert isinstance(spark, prefork.ForkedProcess)  # read while it runs, from its own environment
        assert isinstance(other, subprocess.Popen)  # the interpreter reads it as it starts
        assert same.wait(30) == spark.wait(30) == other.wait(30) == 0
    finally:
        prefork.install(None)


def test_children_outlive_a_stopped_server(tmp_path):
    server = prefork.ForkServer(tmp_path / "server")
    child, out = _run(server, tmp_path, "sleep")
    wait_until(lambda: "sleeping" in out.read_text(), 30, "the child to start")
    server.stop()
    assert Path(f"/proc/{child.pid}").exists()
    child.kill()
    assert child.wait(30) == -signal.SIGKILL  # known once the pid is gone

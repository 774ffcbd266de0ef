"""A broker whose background task crashes stops at once, exits non-zero, and says
why in one line. A real broker process and a real ZooKeeper; the crash is made by
starting the broker through a small launcher that replaces its retention loop with
one that raises (nothing in the broker knows about the test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess

pytestmark = pytest.mark.integration

LAUNCHER = """
import sys
from broker.server import broker as server

async def crashing_retention(*args, **kwargs):
    raise RuntimeError("retention blew up (a test's crash)")

server.run_retention = crashing_retention
from broker.cli.main import main
sys.exit(main(["broker", "--config", sys.argv[1]]))
"""


def test_a_crashed_background_task_stops_the_broker_with_exit_code_1(zk_connect: str, tmp_path: Path) -> None:
    broker = BrokerProcess(1, zk_connect, tmp_path)  # writes the config; not started
    launcher = tmp_path / "crashing_broker.py"
    launcher.write_text(LAUNCHER)
    root = Path(__file__).resolve().parents[2]
    with broker.log_file.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, str(launcher), str(broker.config_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(root),
        )
    try:
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = broker.log_text()
    assert code == 1, text
    errors = [line for line in text.splitlines() if "ERROR" in line]
    crash = [line for line in errors if "crashed:" in line]
    assert len(crash) == 1, text
    assert "'retention' crashed: RuntimeError: retention blew up (a test's crash)" in crash[0]
    assert "broker 1 stops (exit code 1)" in crash[0]
    assert text.count("Traceback") == 1, text  # the traceback once, under that line
    assert "stopped because background task 'retention' crashed" in text, text
    assert "stopped cleanly" not in text

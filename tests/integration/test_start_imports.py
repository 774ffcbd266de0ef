"""A process imports at start only what it uses (issue 34): the suite starts hundreds of
brokers, mirrors, agents and Spark workers, and each pays its imports.

Each case runs the real start in a fresh interpreter with ``-X importtime`` and reads
the modules it imported. scramp runs only in a SCRAM exchange or ``logferry user``;
prometheus_client and its HTTP server only with a metrics port
(``broker.common.metrics_server``); ``logferry``'s parser, which every command builds,
never imports the client library, which a broker does not use. ``benchmarks/process_start.py``
gives the figures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # fresh interpreters, about 2 s of CPU

ROOT = Path(__file__).resolve().parents[2]
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", re.MULTILINE)
NOT_AT_START = ("scramp", "prometheus_client", "wsgiref")


def imported_at_start(*args: str, exit_code: int = 0) -> set[str]:
    """The modules ``python -X importtime ARGS`` imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == exit_code, done.stderr[-3000:]
    return set(IMPORT_LINE.findall(done.stderr))


def roots(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        # a broker and a mirror without --config: everything imported, then a usage error
        (("-m", "broker", "broker"), 2),
        (("-m", "broker", "mirror"), 2),
        (("-c", "import agent.cli, agent.runtime"), 0),
        (("-c", "import broker.client"), 0),
    ],
    ids=["broker", "mirror", "agent", "client"],
)
def test_no_scram_nor_metrics_server_at_start(args: tuple[str, ...], exit_code: int) -> None:
    found = roots(imported_at_start(*args, exit_code=exit_code)) & set(NOT_AT_START)
    assert not found, f"{sorted(found)} imported at start: import it in the function that uses it"


def test_a_broker_does_not_import_the_client_library() -> None:
    modules = imported_at_start("-m", "broker", "broker", exit_code=2)
    assert "broker.server.broker" in modules  # the case does reach the broker
    client = sorted(m for m in modules if m == "broker.client" or m.startswith("broker.client."))
    assert not client, f"{client[:3]}... imported by logferry's parser: import it in the command's handler"

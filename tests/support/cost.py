"""Opt-in: what each test costs, in wall time and CPU (``-p tests.support.cost``).

Appends one line per test to ``$LOGFERRY_TEST_COST/cost-<worker>.tsv``: node id, wall
seconds, CPU seconds of the test process, CPU seconds of the processes the test started
and ended (``getrusage`` of the children that were waited for; a Spark session JVM that
lives across tests is not in it), and when it began (Unix time: the workers' lines merge
into one timeline of the run). The figures of docs/testing.md, "What each part
costs", come from it:

    LOGFERRY_TEST_COST=/tmp/cost make test PYTEST_ARGS="-p tests.support.cost"
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "LOGFERRY_TEST_COST"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Time the whole protocol of one test (setup, call, teardown)."""
    directory = os.environ.get(ENV)
    if not directory:
        return (yield)
    began, start = time.time(), time.monotonic()
    own, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = (
            f"{item.nodeid}\t{time.monotonic() - start:.1f}\t{_cpu(resource.RUSAGE_SELF) - own:.1f}\t"
            f"{_cpu(resource.RUSAGE_CHILDREN) - children:.1f}\t{began:.1f}\n"
        )
        with (Path(directory) / f"cost-{worker}.tsv").open("a") as out:
            out.write(line)

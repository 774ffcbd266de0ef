"""Every test that starts a process carries the ``integration`` marker; this plugin checks it.

``make test-unit`` runs ``-m "not integration"`` and promises neither Java, nor free
ports, nor minutes. That holds only if the marker is never forgotten, so a test that is
not marked ``integration`` fails, before it runs, when it:

- uses a fixture that starts processes (:data:`PROCESS_FIXTURES`: ZooKeeper, broker
  processes, Spark, agent, mirror and group-member processes), or
- starts a subprocess itself (anything that goes through :class:`subprocess.Popen`:
  ``subprocess.run``, asyncio subprocesses, ...), checked while it runs.

The fix is always the same: ``pytestmark = pytest.mark.integration`` in the module, or
``@pytest.mark.integration`` on the test. A plugin listed in ``tests/conftest.py``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

PROCESS_FIXTURES = frozenset(
    {
        "zookeeper",
        "zk_connect",
        "zk_client",  # tests/support/zookeeper.py: a ZooKeeper JVM
        "tls_zookeeper",  # tests/support/zookeeper.py: one with TLS
        "broker_cluster",
        "kafka_cluster",
        "module_cluster",
        "module_kafka_cluster",  # tests/support/brokers.py: broker processes
        "spark",  # tests/loader/conftest.py: a Spark JVM
        "agent_process",  # tests/agent/conftest.py: python -m agent
        "group_members",  # tests/groups/conftest.py: member processes
        "mirrors",
        "two_clusters",
        "module_two_clusters",  # tests/mirror/conftest.py
        "test_network",  # tests/support/network.py: hosts, and the servers started on them
    }
)
"""Fixtures that start processes, directly or through another fixture of this set."""

FIX = "mark it: `pytestmark = pytest.mark.integration` in its module or `@pytest.mark.integration` on it"


def is_integration(item: pytest.Item) -> bool:
    return item.get_closest_marker("integration") is not None


def unmarked_process_fixtures(item: pytest.Item) -> list[str]:
    """The process-starting fixtures an unmarked test uses (empty when it is marked)."""
    if is_integration(item):
        return []
    return sorted(PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail an unmarked test that uses a process fixture before any fixture starts."""
    used = unmarked_process_fixtures(item)
    if used:
        pytest.fail(
            f"{item.nodeid} uses {', '.join(used)}, which start processes, but is not marked integration: {FIX}",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_subprocess_outside_integration(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In an unmarked test, starting a subprocess fails the test with the fix."""
    if is_integration(request.node):
        yield
        return
    nodeid = request.node.nodeid

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        pytest.fail(f"{nodeid} starts a subprocess ({args!r}) but is not marked integration: {FIX}", pytrace=False)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    yield

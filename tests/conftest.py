"""pytest configuration shared by every test under tests/.

Fixtures live in plugin modules under ``tests/support/``; register a new one (broker
processes, Spark) by adding its module to ``pytest_plugins`` below. This file keeps
only what is generic: making ``tests.support`` importable, remembering each test's
reports, and printing the logs of the servers a failed test used.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

# The repository root on sys.path, so ``tests.support`` imports the same way under
# every pytest import mode and however pytest was launched.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support import failure_log_sections  # noqa: E402

pytest_plugins = [
    "pytester",
    "tests.support.markers",
    "tests.support.parallel",
    "tests.support.pki",
    "tests.support.zookeeper",
    "tests.support.brokers",
    "tests.support.network",
    "tests.support.hdfs",
]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, and attach server logs to failures.

    ``item.rep_setup`` / ``rep_call`` / ``rep_teardown`` let fixtures see in their
    teardown whether the test failed. A failed phase gets one report section per
    server log registered with ``tests.support.register_log_source`` for a fixture
    the test used; pytest prints these sections under the failure.
    """
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed:
        for title, text in failure_log_sections(item):
            report.sections.append((title, text))
    return report

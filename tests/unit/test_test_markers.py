"""The check that keeps ``make test-unit`` free of processes (tests/support/markers.py).

Runs a small inner pytest session in this process (pytester, inline): nothing in it
starts a process, whether the check works or not, since the fixture is a stand-in and
the subprocess is refused before it is created.
"""

from __future__ import annotations

import pytest

INNER_CONFTEST = """
import pytest

pytest_plugins = ["tests.support.markers"]


def pytest_configure(config):
    # registered as the project's pyproject.toml does: unknown marks are errors
    config.addinivalue_line("markers", "integration: starts processes")


@pytest.fixture
def zookeeper():
    return "a stand-in: the check must fail the test before this is even set up"
"""

INNER_TESTS = """
import subprocess

import pytest


def test_unmarked_with_a_process_fixture(zookeeper):
    pass


def test_unmarked_starting_a_subprocess():
    subprocess.run(["true"], check=True)


@pytest.mark.integration
def test_marked_with_a_process_fixture(zookeeper):
    assert zookeeper.startswith("a stand-in")


def test_unmarked_without_processes():
    assert True
"""


def test_unmarked_tests_that_start_processes_fail_with_the_fix(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    text = result.stdout.str()
    assert "test_unmarked_with_a_process_fixture uses zookeeper, which start processes" in text
    assert "test_unmarked_starting_a_subprocess starts a subprocess (['true'])" in text
    assert text.count("pytestmark = pytest.mark.integration") >= 2

"""How the suite is handed out to workers (tests/support/parallel.py): slow tests first,
and the tests that share a module-scoped fixture kept together on one worker.

Runs a small inner pytest session in this process (pytester, inline, no workers): the
order and the ``xdist_group`` marks are what xdist's ``loadgroup`` hands out from.
"""

from __future__ import annotations

import pytest

INNER_CONFTEST = """
import pytest

pytest_plugins = ["tests.support.parallel"]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        print("ORDER", item.name, mark.args[0] if mark else "-")
"""

SHARED = """
import pytest


@pytest.fixture(scope="module")
def cluster():
    return "one per module"


def test_uses_the_shared_cluster(cluster):
    pass


def test_needs_nothing_shared():
    pass


@pytest.mark.slow
def test_slow_and_shared(cluster):
    pass
"""

ALONE = """
import pytest


@pytest.fixture
def own():
    return "one per test"


def test_with_its_own_fixture(own):
    pass
"""


def test_shared_fixture_tests_are_one_group_and_slow_tests_come_first(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_a_alone=ALONE, test_b_shared=SHARED)
    result = pytester.runpytest_inprocess("--co", "-q", "-p", "no:cacheprovider", "-s")
    order = [line.split()[1:] for line in result.stdout.lines if line.startswith("ORDER ")]
    assert order == [
        ["test_slow_and_shared", "test_b_shared.py"],
        ["test_with_its_own_fixture", "-"],
        ["test_uses_the_shared_cluster", "test_b_shared.py"],
        ["test_needs_nothing_shared", "-"],
    ]

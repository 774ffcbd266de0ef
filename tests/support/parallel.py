"""Running the suite in parallel (pytest-xdist) without making any test weaker.

A pytest plugin (listed in ``tests/conftest.py``). The integration tests spend much of
their time waiting (for a ZooKeeper session to expire, a broker to start, a Spark job in
another process), so ``make test`` runs them on several workers (``-n auto``). Every test
is already independent of the others: each gets free ports, its own ZooKeeper chroot,
its own ``tmp_path``; each worker starts its own session ZooKeeper (and Spark, when its
tests need one).

- ``-n auto`` means one worker per CPU plus :data:`EXTRA_WORKERS` (at least
  :data:`MIN_WORKERS`); ``LOGFERRY_TEST_WORKERS=N`` overrides it.
- The tests marked ``slow`` are handed out first, so that the longest ones do not start
  last and set the length of the whole run.
- A module whose tests share a module-scoped fixture (a broker cluster, Kafka's Java
  clients' JVM, an HDFS, a built wheel) runs on one worker (``--dist loadgroup``, each
  such module an ``xdist_group`` of its own): handed out test by test, its fixture was
  started once per worker that got one of its tests, so up to three clusters or JVMs
  where one serves. Every other test is a group of one, handed out in the order above
  (``--no-loadscope-reorder``: xdist would otherwise put the largest groups first).
"""

from __future__ import annotations

import os

import pytest

EXTRA_WORKERS = 1
"""Workers beyond one per CPU. The slow tests hold whole scenarios of fixed length (a
broker down 10 s, a ZooKeeper session left to expire, lines written at a steady rate)
during which their worker's CPU is mostly idle: with one worker per CPU the two cores
of this project's machine were busy 70% of a run. Measured with ``make test`` on those
two cores: 19.5 minutes on two workers, 15.7 on three. Four (two per CPU, before the
suite's CPU was cut) pushed the load to 12 and the waits the tests bound past their
deadlines."""
MIN_WORKERS = 2
"""Even on one CPU: much of a test's time is waiting."""
ENV_WORKERS = "LOGFERRY_TEST_WORKERS"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of workers ``-n auto`` starts (see the module docstring)."""
    wanted = os.environ.get(ENV_WORKERS, "").strip()
    if wanted:
        try:
            return max(0, int(wanted))
        except ValueError:
            raise pytest.UsageError(f"{ENV_WORKERS}={wanted!r}: give a number of workers (0: no xdist)") from None
    return max(MIN_WORKERS, (os.cpu_count() or 1) + EXTRA_WORKERS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (a stable sort: the order within each kind is kept), and each
    module with a shared fixture one group (before xdist names the groups, hence first)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        if item.get_closest_marker("xdist_group") is None and shares_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def shares_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (or package) and shared by
    its neighbours."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definitions[-1].scope in ("module", "package")
        for name, definitions in info.name2fixturedefs.items()
        if definitions and name in info.names_closure
    )

"""Helpers shared by the tests: real servers, free ports, and their logs on failure.

Modules here that define fixtures (``zookeeper``, ``brokers``) are pytest plugins,
listed in ``pytest_plugins`` of ``tests/conftest.py``. Import helpers as
``tests.support.<module>``.

When a test fails, ``tests/conftest.py`` appends the log tail of every server the
test used to its report. A fixture makes its server's log available with
:func:`register_log_source` and names the fixture through which tests use it, so a
unit test's failure is not buried under ZooKeeper's log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pytest

FAILURE_LOG_LINES = 60


class LogSource(Protocol):
    """Anything with a log: a LocalZooKeeper, a broker process."""

    def log_tail(self, lines: int = ...) -> str:
        """The last ``lines`` lines of its log."""
        ...


@dataclass(frozen=True)
class _Registered:
    title: str
    source: LogSource
    fixture: str


_LOG_SOURCES = pytest.StashKey[dict[str, _Registered]]()


def register_log_source(
    config: pytest.Config, key: str, source: LogSource, *, fixture: str, title: str | None = None
) -> None:
    """Print ``source``'s log tail when a test that uses ``fixture`` fails.

    ``key`` identifies the source (registering a key again replaces it); ``title``
    heads the report section (default: ``key``).
    """
    config.stash.setdefault(_LOG_SOURCES, {})[key] = _Registered(title or key, source, fixture)


def unregister_log_source(config: pytest.Config, key: str) -> None:
    """Stop reporting ``key``'s log (its server is gone)."""
    config.stash.setdefault(_LOG_SOURCES, {}).pop(key, None)


def failure_log_sections(item: pytest.Item, lines: int = FAILURE_LOG_LINES) -> list[tuple[str, str]]:
    """``(title, log tail)`` for each registered source whose fixture ``item`` used."""
    used = set(getattr(item, "fixturenames", ()))
    sections = []
    for entry in item.config.stash.get(_LOG_SOURCES, {}).values():
        if entry.fixture not in used:
            continue
        try:
            text = entry.source.log_tail(lines)
        except Exception as exc:  # a broken log must not hide the test's own failure
            text = f"(could not read the log: {exc!r})"
        sections.append((f"{entry.title} (last {lines} lines)", text))
    return sections

"""Crash injection for the exactly-once tests: die at a named step, as kill -9 would.

``LOGFERRY_LOADER_CRASH_AT=<point>`` makes the landing job call ``os._exit(CRASH_EXIT)``
when it reaches that point: no ``finally`` blocks, no cleanup, no lock release, exactly
like a killed process. The points, in the order a run passes them:

``during-write``
    while Spark is writing staged Parquet files (a watcher thread fires as soon as the
    first data file appears in the staging directory);
``after-write``
    the staged files are complete and counted, the manifest is built, nothing is
    committed;
``after-commit``
    the manifest is committed (offsets advanced), no file is published yet;
``during-publish``
    after the first file of a committed run has been moved into place (in the run's
    own publishing, or in recovery's, whichever comes first);
``after-publish``
    every file of a committed run is in place, its staging directory is not yet deleted.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

ENV = "LOGFERRY_LOADER_CRASH_AT"
CRASH_EXIT = 86
POINTS = ("during-write", "after-write", "after-commit", "during-publish", "after-publish")


def armed(point: str) -> bool:
    """Whether the environment asks to crash at ``point``."""
    return os.environ.get(ENV) == point


def crash_point(point: str) -> None:
    """Exit the process immediately if the environment asks to crash at ``point``."""
    if armed(point):
        _die(point)


def _die(point: str) -> None:
    sys.stderr.write(f"logferry load: injected crash at {point}\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT)


def watch_for(point: str, condition: Callable[[], bool], interval: float = 0.01) -> None:
    """Crash at ``point`` from a daemon thread as soon as ``condition()`` holds."""
    if not armed(point):
        return

    def run() -> None:
        while True:
            try:
                if condition():
                    _die(point)
            except Exception:
                pass
            time.sleep(interval)

    threading.Thread(target=run, name=f"crash-{point}", daemon=True).start()

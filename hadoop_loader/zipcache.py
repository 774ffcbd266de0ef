"""Spark's Python workers, CPython 3.10 and 3.11: one zip directory read per archive,
not one per importer per task.

Before every task a Spark Python worker calls ``importlib.invalidate_caches()``
(pyspark's ``worker_util.setup_spark_files``). On CPython 3.10 and 3.11 a zip importer
answers by reading its archive's whole central directory again, in pure Python
(CPython issue gh-103200; 3.12 made it lazy). The workers import pyspark from
``pyspark.zip`` (1,328 files), through one zip importer per package directory (15 after
the reader's imports), so every task of the loader re-read the same unchanged
directory 15 times: 0.12-0.16 s of CPU per task (0.3-0.45 s of wall time on a busy
machine), 1-1.3 s of CPU for a 1M-row landing's 8 read tasks, more than the reader's
own work (0.5 s). Found with cProfile in the workers (docs/loader.md, "Performance").

:func:`install` makes a zip importer read its archive again only when the file changed
(size or modification time), once per archive, not per importer. The importers of one
archive share its directory already (``zipimport._zip_directory_cache``), so one read
refreshes all of them. The data source's read calls it in the worker, before it reads.
"""

from __future__ import annotations

import os
import sys
import zipimport
from collections.abc import Callable
from typing import Any

_stamps: dict[str, tuple[int, int] | None] = {}
"""archive -> (mtime ns, size) when it was last read through the patched method."""


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def keep_unchanged(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``zipimporter.invalidate_caches`` that calls ``original`` (the eager re-read) only
    when the archive is new to it or changed since; an archive it cannot stat is read."""

    def invalidate_caches(self: Any) -> None:
        archive = self.archive
        stamp = _stamp(archive)
        if stamp is not None and _stamps.get(archive) == stamp:
            shared = zipimport._zip_directory_cache.get(archive)  # type: ignore[attr-defined]
            if shared is not None:
                self._files = shared
                return
        original(self)
        _stamps[archive] = stamp

    invalidate_caches.logferry_keep_unchanged = True  # type: ignore[attr-defined]
    return invalidate_caches


def install() -> None:
    """Patch ``zipimport.zipimporter.invalidate_caches`` in this process (Python < 3.12,
    where it re-reads eagerly; idempotent)."""
    if sys.version_info >= (3, 12):
        return
    current = zipimport.zipimporter.invalidate_caches
    if getattr(current, "logferry_keep_unchanged", False):
        return
    zipimport.zipimporter.invalidate_caches = keep_unchanged(current)  # type: ignore[method-assign,assignment]

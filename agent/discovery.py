"""Finding files: glob patterns (with ``**``), exclusions, watchdog events, rescans.

Matching is done on whole paths with a regex compiled once from each glob, so an
event's path is classified without touching the disk: ``*`` and ``?`` never cross
``/``, ``**`` matches any number of directories (zero included), ``[...]`` is a
character class. The first source whose pattern matches (and whose excludes do not)
owns the file.

The :class:`Watcher` asks watchdog (inotify on Linux) only for creations, moves and
deletions, not modifications: a busy log writes thousands of times a second and the
agent learns about growth more cheaply by polling ``fstat`` on its open handles.
Events go into a queue the main loop drains; inotify can overflow and network file
systems send nothing, so the periodic :func:`scan` is the safety net.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from agent.config import SourceConfig

if TYPE_CHECKING:  # watchdog is the agent extra's, imported when the watching starts
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger("logferry.agent")

_WILDCARDS = re.compile(r"[*?\[]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob pattern to a regex matching whole paths."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            close = pattern.find("]", i + 2 if pattern.startswith("[!", i) or pattern.startswith("[]", i) else i + 1)
            if close == -1:
                out.append(re.escape(char))
                i += 1
                continue
            body = pattern[i + 1 : close]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = close + 1
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out) + r"\Z")


def static_root(pattern: str) -> tuple[str, bool]:
    """The deepest directory without wildcards, and whether to watch below it recursively."""
    parts = pattern.split("/")
    fixed: list[str] = []
    for part in parts[:-1]:
        if _WILDCARDS.search(part):
            break
        fixed.append(part)
    recursive = len(fixed) < len(parts) - 1
    return "/".join(fixed) or "/", recursive


class Matcher:
    """Which source (index) a path belongs to, if any."""

    def __init__(self, sources: Sequence[SourceConfig]):
        self._rules = [([glob_regex(p) for p in s.patterns], [glob_regex(x) for x in s.exclude]) for s in sources]

    def source_of(self, path: str) -> int | None:
        """Index of the first source matching ``path`` and not excluding it."""
        for index, (includes, excludes) in enumerate(self._rules):
            if any(r.match(path) for r in includes) and not any(r.match(path) for r in excludes):
                return index
        return None


def scan(sources: Sequence[SourceConfig], matcher: Matcher) -> dict[str, int]:
    """Every regular file matching a source now: path -> source index."""
    found: dict[str, int] = {}
    for index, source in enumerate(sources):
        for pattern in source.patterns:
            for path in glob.iglob(pattern, recursive=True):
                if path in found or matcher.source_of(path) != index:
                    continue
                try:
                    if not os.path.isfile(path):
                        continue
                except OSError:
                    continue
                found[path] = index
    return found


def _roots_of(sources: Sequence[SourceConfig]) -> dict[str, bool]:
    """Directories to watch for ``sources`` -> whether recursively."""
    roots: dict[str, bool] = {}
    for source in sources:
        for pattern in source.patterns:
            root, recursive = static_root(pattern)
            roots[root] = roots.get(root, False) or recursive
    return roots


class Event(NamedTuple):
    """A file system event the main loop cares about."""

    kind: str
    """``created``, ``moved``, ``deleted`` or ``dir`` (a directory appeared: rescan it)."""
    path: str
    dest: str | None = None


class Watcher:
    """watchdog observer feeding :class:`Event` tuples to the main loop."""

    def __init__(self, sources: Sequence[SourceConfig], wake: Callable[[], None]):
        self.events: deque[Event] = deque()
        self._wake = wake
        self._roots = _roots_of(sources)
        self._scheduled: dict[str, ObservedWatch] = {}
        """Root -> watchdog's handle of its watch (to unschedule it)."""
        self._observer: BaseObserver | None = None
        self._lock = threading.Lock()

    def set_sources(self, sources: Sequence[SourceConfig]) -> None:
        """Watch the roots of reloaded sources: drop the ones no pattern needs any more
        (or whose recursion changed); :meth:`ensure_watches` adds the new ones."""
        roots = _roots_of(sources)
        for root in [r for r in self._scheduled if roots.get(r) != self._roots.get(r)]:
            watch = self._scheduled.pop(root)
            if self._observer is not None:
                try:
                    self._observer.unschedule(watch)
                except (KeyError, OSError) as exc:
                    log.debug("unwatching %s: %s", root, exc)
        self._roots = roots
        self.ensure_watches()

    def start(self) -> None:
        """Start the observer thread and watch the roots that exist."""
        from watchdog.observers import Observer

        observer = Observer()
        observer.daemon = True
        observer.start()
        self._observer = observer
        self.ensure_watches()

    def ensure_watches(self) -> None:
        """Watch roots that appeared since the last call (called at every rescan)."""
        if self._observer is None:
            return
        from watchdog.events import (
            DirCreatedEvent,
            DirMovedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileMovedEvent,
            FileSystemEventHandler,
        )

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                watcher._on_event(event)

        for root, recursive in self._roots.items():
            if root in self._scheduled or not os.path.isdir(root):
                continue
            try:
                self._scheduled[root] = self._observer.schedule(
                    Handler(),
                    root,
                    recursive=recursive,
                    event_filter=[FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirCreatedEvent, DirMovedEvent],
                )
            except OSError as exc:  # inotify watch limit, permissions
                log.warning("cannot watch %s (%s); relying on rescans", root, exc)

    def _on_event(self, event: FileSystemEvent) -> None:
        src = os.fsdecode(event.src_path)
        if event.is_directory:
            if event.event_type in ("created", "moved"):
                self.events.append(Event("dir", os.fsdecode(getattr(event, "dest_path", "")) or src))
                self._wake()
            return
        kind = event.event_type
        if kind == "moved":
            self.events.append(Event("moved", src, os.fsdecode(event.dest_path)))
        elif kind in ("created", "deleted"):
            self.events.append(Event(kind, src))
        else:
            return
        self._wake()

    def close(self) -> None:
        """Stop the observer thread."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

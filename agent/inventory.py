"""The agent's inventory of its files: discovery, identity, rotation, deletion, polling.

Which files exist and which is which. The main loop (:class:`agent.runtime.Agent`)
owns one :class:`FileInventory` and asks it to scan, apply watchdog events and poll;
the loop reads the files it marks ready and tells it what it learns (a file that
vanished, rotated away or shrank). Every method runs on the loop's thread. The maps:

* ``files``: live files by identity (device, inode);
* ``draining``: deleted files still being read through their handle after their
  inode went to another file;
* ``_by_path``: where each file is now; ``_latest``: the newest file found under each
  discovery path (the one a successor must wait for after a rotation);
* ``dormant``: checkpoint entries of files not tailed right now (rotated away and
  closed), kept so a file that shows up again is recognised, not read twice;
* ``ready``: an ordered set of files with bytes to read;
* ``leaving``: files no source matches since a reload, waiting for their chunks in
  flight to finish before they go dormant (their position stays in the checkpoint).

Decisions about a file's identity go through :func:`agent.identity.judge`; bytes a
file holds unsent are accounted in the shared :class:`agent.inflight.InFlight`.
"""

from __future__ import annotations

import logging
import os
import stat as stat_module
import time
from collections.abc import Callable
from typing import Any

from agent.checkpoint import Entry
from agent.config import AgentConfig
from agent.discovery import Matcher, Watcher
from agent.discovery import scan as scan_sources
from agent.files import TailedFile
from agent.fsutil import find_inode, inodes_in, last_line_end
from agent.identity import EMPTY, Facts, FileKey, Verdict, fingerprint, judge
from agent.inflight import InFlight
from agent.metrics import AgentCounters

log = logging.getLogger("logferry.agent")

SETTLE_S = 0.2
"""A file found while running is read after this delay, so pending watchdog events
(a predecessor's move) are applied first and the older file is read first."""


class FileInventory:
    """Which files exist, which is which, and what changed about them."""

    def __init__(self, config: AgentConfig, metrics: AgentCounters, inflight: InFlight):
        self.config = config
        self.metrics = metrics
        self.inflight = inflight
        self._matcher = Matcher(config.sources)
        self.files: dict[FileKey, TailedFile] = {}
        self.draining: list[TailedFile] = []
        self._by_path: dict[str, TailedFile] = {}
        self._latest: dict[str, TailedFile] = {}
        self.dormant: dict[FileKey, Entry] = {}
        self.ready: dict[TailedFile, None] = {}
        self.leaving: list[TailedFile] = []
        self.open_count = 0
        self.dirty = False
        """Something the checkpoint records changed since it was last written."""
        self.watcher: Watcher | None = None
        self.next_scan = 0.0
        """When the loop scans the patterns next (0: at its next pass)."""
        self.next_poll = 0.0
        """When the loop polls the open files next (0: at its next pass)."""

    def watch(self, wake: Callable[[], None]) -> None:
        """Start the watchdog observer; ``wake`` is called (from its thread) on events."""
        self.watcher = Watcher(self.config.sources, wake)
        self.watcher.start()

    def everything(self) -> list[TailedFile]:
        """Every file tailed now: the live ones, the draining ones, the leaving ones."""
        return list(self.files.values()) + self.draining + self.leaving

    def entries(self) -> list[Entry]:
        """The checkpoint: every tailed file's entry, then the dormant ones'."""
        entries = [self.entry(t) for t in self.files.values()]
        return entries + [e for k, e in self.dormant.items() if k not in self.files]

    def close(self) -> None:
        """Stop watching and close every file handle."""
        if self.watcher is not None:
            self.watcher.close()
        for tailed in self.everything():
            tailed.close()

    # -- discovery ---------------------------------------------------------------------

    def scan(self, initial: bool = False, fresh: frozenset[int] = frozenset()) -> None:
        """Match the sources' patterns now: start tailing new files, sweep the dormant.

        Files of the sources in ``fresh`` (added by a reload) are found as at a first
        start (``start_at`` applies to them)."""
        if self.watcher is not None:
            self.watcher.ensure_watches()
        for path, index in scan_sources(self.config.sources, self._matcher).items():
            self._discover(path, index, initial=initial or index in fresh)
        if not initial:
            self._sweep_dormant()

    def apply_events(self) -> None:
        """Apply the watchdog events queued since the last call (moves first)."""
        if self.watcher is None:
            return
        queue = self.watcher.events
        batch = [queue.popleft() for _ in range(len(queue))]
        # Moves first: a file created and renamed away before we looked is older than
        # whatever its creation event finds at the path now.
        batch.sort(key=lambda e: e.kind != "moved")
        for event in batch:
            if event.kind == "dir":
                self.next_scan = 0.0
            elif event.kind == "created":
                index = self._matcher.source_of(event.path)
                if index is not None:
                    self._discover(event.path, index)
            elif event.kind == "moved":
                self._moved(event.path, event.dest or "")
            elif event.kind == "deleted":
                tailed = self._by_path.get(event.path)
                if tailed is not None:
                    self.next_poll = 0.0  # fstat will show nlink == 0

    def _moved(self, src: str, dest: str) -> None:
        """A rename: follow a tailed file to its new name; pick up files moved into view."""
        try:
            st = os.stat(dest)
        except OSError:
            return
        if not stat_module.S_ISREG(st.st_mode):
            return
        tailed = self.files.get(FileKey(st.st_dev, st.st_ino))
        if tailed is not None and not self._reused(tailed):
            if tailed.where is not None and self._by_path.get(tailed.where) is tailed:
                del self._by_path[tailed.where]
            tailed.where = dest
            self._by_path[dest] = tailed
            if dest != tailed.path and not tailed.rotated:
                tailed.rotated = True
                self.metrics.add("rotations")
            return
        index = self._matcher.source_of(dest)
        if index is not None:
            self._discover(dest, index)
            return
        index = self._matcher.source_of(src)
        if index is not None:
            # A file we never saw, renamed away from a watched name before we read it
            # (rotations in quick succession), read under the name it had. Move events
            # come in rotation order, so it is newer than every file already rotated
            # away from ``src`` and older than a file already found *at* ``src``: it
            # goes between them in the chain of files that wait for one another.
            current = self._by_path.get(src)
            if current is not None and current.path != src:
                current = None
            moved = self._discover(dest, index, tag=src)
            if moved is None or current is None or moved is current:
                return
            earlier = current.waiting_for
            moved.waiting_for = (
                earlier if earlier is not None and earlier is not moved and not self.fully_read(earlier) else None
            )
            self._latest[src] = current
            if current.pos == 0 and not current.acks.in_flight:
                current.waiting_for = moved

    def _discover(
        self, path: str, index: int, initial: bool = False, tag: str | None = None, entry: Entry | None = None
    ) -> TailedFile | None:
        """Start tailing ``path`` (or recognise a file we already know); return the new file."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat_module.S_ISREG(st.st_mode):
            return None
        key = FileKey(st.st_dev, st.st_ino)
        back = next((t for t in self.leaving if t.key == key and not t.deleted), None)
        if back is not None:
            self._come_back(back, index, path)
            return None
        known = self.files.get(key)
        if known is not None:
            if not self._reused(known):
                if known.where != path:
                    # The same file under another name (rotated into a watched name).
                    if known.where is not None and self._by_path.get(known.where) is known:
                        del self._by_path[known.where]
                    known.where = path
                    self._by_path[path] = known
                    if path != known.path and not known.rotated:
                        known.rotated = True
                        self.metrics.add("rotations")
                return None
            self._retire(known)
        source = self.config.sources[index]
        previous = self._by_path.get(path)
        if previous is not None and previous.key != key:
            self.rotated_away(previous)
        offset, fp, file_id = 0, EMPTY, None
        saved = entry or self.dormant.pop(key, None)
        if saved is not None:
            offset, fp, same = self._resume_point(path, saved, st.st_size)
            tag = tag or saved.path
            if same:
                file_id = saved.fid  # the same generation: re-sent lines keep their id
        elif initial and source.start_at == "end":
            offset = last_line_end(path, st.st_size)
        tailed = TailedFile(key, tag or path, path, source, index, self.config.host, offset, fp, file_id)
        tailed.size = st.st_size
        if not initial and self.watcher is not None:
            # The file at this path now may be a successor of one created and renamed
            # away before we looked; its move event is on its way. Let it land first.
            tailed.retry_at = time.monotonic() + SETTLE_S
        if tailed.path != path:
            tailed.rotated = True  # found under another name than the one it had
            self.metrics.add("rotations")
        predecessor = self._latest.get(tailed.path)
        if predecessor is not None and predecessor.draining and not self.fully_read(predecessor):
            tailed.waiting_for = predecessor  # finish the rotated file first
        self._latest[tailed.path] = tailed
        self.files[key] = tailed
        self._by_path[path] = tailed
        self.ready[tailed] = None
        self.dirty = True
        log.debug(
            "tailing %s (inode %d) from offset %d%s",
            path,
            key.ino,
            offset,
            f" after {tailed.waiting_for.where}" if tailed.waiting_for else "",
        )
        return tailed

    def _resume_point(self, path: str, saved: Entry, size: int) -> tuple[int, Any, bool]:
        """Where to resume a checkpointed file: its offset, or 0 if it is not the same
        (then also False: a new generation, which gets a new id)."""
        try:
            with open(path, "rb") as handle:
                head = handle.read(max(saved.fp_len, 1))
        except OSError:
            return 0, EMPTY, False
        verdict = judge(saved.key, saved.fingerprint, saved.offset, Facts(saved.key, size, head))
        if verdict is Verdict.SAME:
            return saved.offset, saved.fingerprint, True
        self.metrics.add("replaced_files" if verdict is Verdict.REPLACED else "truncations")
        log.info("%s: %s since the checkpoint; reading it from the start", path, verdict.value)
        return 0, EMPTY, False

    def _reused(self, tailed: TailedFile) -> bool:
        """True when ``tailed``'s inode now belongs to another file (it was deleted)."""
        if tailed.fd is not None:
            try:
                return os.fstat(tailed.fd).st_nlink == 0
            except OSError:
                return True
        # Closed: reopening compares the fingerprint and restarts a replaced file at 0.
        return tailed.where is None

    def _retire(self, tailed: TailedFile) -> None:
        """Move a deleted file out of the identity map so its inode can be reused."""
        self.files.pop(tailed.key, None)
        if tailed.where is not None and self._by_path.get(tailed.where) is tailed:
            del self._by_path[tailed.where]
        tailed.deleted = True
        if tailed.fd is not None:
            self.draining.append(tailed)  # read to the end, ship, then close
        else:
            self.forget(tailed)

    def rotated_away(self, tailed: TailedFile) -> None:
        """``tailed``'s path names another file now: finish it through its handle."""
        if self._by_path.get(tailed.path) is tailed:
            del self._by_path[tailed.path]
        if tailed.where is not None and self._by_path.get(tailed.where) is tailed:
            del self._by_path[tailed.where]
        if not tailed.rotated:
            tailed.rotated = True
            self.metrics.add("rotations")
        # Find its new name (logrotate renames within the directory) so a closed file
        # can be reopened and its checkpoint entry recognised if a pattern matches it.
        tailed.where = find_inode(os.path.dirname(tailed.where or tailed.path), tailed.key)
        if tailed.where is not None:
            self._by_path[tailed.where] = tailed
        elif tailed.fd is None:
            log.warning(
                "%s (inode %d) was rotated while closed and is gone; bytes after offset %d may be unread",
                tailed.path,
                tailed.key.ino,
                tailed.pos,
            )
            tailed.deleted = True
            self.forget(tailed)
            return
        self.ready[tailed] = None

    def forget(self, tailed: TailedFile) -> None:
        """Stop tailing; a deleted file also leaves the checkpoint."""
        tailed.close()
        self.open_changed()
        if self.files.get(tailed.key) is tailed:
            del self.files[tailed.key]
        for path in (tailed.path, tailed.where):
            if path is not None and self._by_path.get(path) is tailed:
                del self._by_path[path]
        if self._latest.get(tailed.path) is tailed:
            del self._latest[tailed.path]
        self.ready.pop(tailed, None)
        if tailed in self.draining:
            self.draining.remove(tailed)
        if tailed in self.leaving:
            self.leaving.remove(tailed)
        self.inflight.hold(tailed, 0)
        if not tailed.deleted and tailed.where is not None:
            self.dormant[tailed.key] = self.entry(tailed)
        self.dirty = True

    def adopt(self, checkpointed: dict[FileKey, Entry]) -> None:
        """At start: resume checkpointed files, wherever rotation moved them meanwhile.

        Each is looked up by inode in the directory it was last seen in (logrotate
        renames within a directory), so a file rotated while the agent was down is
        finished even when no pattern matches its new name. Oldest first (mtime), so
        a rotated file is finished before its successor at the same path.
        """
        self.dormant = dict(checkpointed)
        self._resume_dormant()
        self.dirty = True

    def _resume_dormant(self) -> None:
        """Resume the dormant files a source matches, wherever rotation moved them.

        A source matches an entry by the name its file was found under (a rotated file
        keeps it); entries no source matches stay dormant (a reload may match them
        again), entries whose file is gone are dropped.
        """
        by_dir: dict[str, list[Entry]] = {}
        for entry in self.dormant.values():
            by_dir.setdefault(os.path.dirname(entry.where), []).append(entry)
        found: list[tuple[float, str, int, Entry]] = []
        for directory, entries in by_dir.items():
            inodes = inodes_in(directory)
            for entry in entries:
                where = inodes.get((entry.dev, entry.ino))
                if where is None:
                    del self.dormant[entry.key]
                    self.dirty = True
                    continue
                entry.where = where
                index = self._matcher.source_of(entry.path)
                if index is None:
                    continue
                try:
                    mtime = os.stat(where).st_mtime
                except OSError:
                    continue
                found.append((mtime, where, index, entry))
        for _, where, index, entry in sorted(found, key=lambda item: item[0]):
            del self.dormant[entry.key]
            self._discover(where, index, tag=entry.path, entry=entry)

    def _sweep_dormant(self) -> None:
        """Drop checkpoint entries of files that no longer exist anywhere near their path."""
        if not self.dormant:
            return
        cache: dict[str, dict[tuple[int, int], str]] = {}
        for key, entry in list(self.dormant.items()):
            directory = os.path.dirname(entry.where)
            if directory not in cache:
                cache[directory] = inodes_in(directory)
            where = cache[directory].get((key.dev, key.ino))
            if where is None:
                del self.dormant[key]
                self.dirty = True
            elif where != entry.where:
                entry.where = where
                self.dirty = True

    # -- reload ---------------------------------------------------------------------------

    def reload(self, config: AgentConfig, fresh: frozenset[int] = frozenset()) -> tuple[int, int]:
        """Switch to ``config``'s sources (SIGHUP); returns (files kept, files stopped).

        A tailed file is kept when a source matches the path it was found under (or
        where it is now): it keeps its position, and takes on that source's settings
        from the end of its last message (:meth:`TailedFile.set_source`). A file no
        source matches is stopped: nothing more is read from it, what is in flight is
        acknowledged, then it goes dormant with its position in the checkpoint, so a
        source that matches it again later resumes it exactly there. New files are
        found by the scan that follows (``fresh``: indexes of added sources).
        """
        self.config = config
        self._matcher = Matcher(config.sources)
        if self.watcher is not None:
            self.watcher.set_sources(config.sources)
        kept = stopped = 0
        for tailed in list(self.leaving):  # stopped by the reload before, matched again
            index = self._source_index(tailed)
            if index is not None:
                self._come_back(tailed, index, tailed.where)
        for tailed in list(self.files.values()) + self.draining:
            index = self._source_index(tailed)
            if index is None:
                self._leave(tailed)
                stopped += 1
                continue
            kept += 1
            self._follow_source(tailed, index)
        self._resume_dormant()
        self.scan(fresh=fresh)
        return kept, stopped

    def _source_index(self, tailed: TailedFile) -> int | None:
        """The source matching the name ``tailed`` was found under, or where it is now."""
        index = self._matcher.source_of(tailed.path)
        if index is None and tailed.where is not None:
            index = self._matcher.source_of(tailed.where)
        return index

    def _follow_source(self, tailed: TailedFile, index: int) -> None:
        """Give ``tailed`` the settings of source ``index`` if they changed."""
        source = self.config.sources[index]
        if source != tailed.source or index != tailed.source_index:
            tailed.set_source(source, index)
            self.inflight.hold(tailed, 0)
            self.ready[tailed] = None
            self.dirty = True

    def _come_back(self, tailed: TailedFile, index: int, where: str | None) -> None:
        """A file stopped by a reload is matched again before it went dormant (its chunks
        still in flight): tail it on from where it stopped, as the same file."""
        self.leaving.remove(tailed)
        if tailed.deleted:
            self.draining.append(tailed)
        else:
            if where is not None and where != tailed.where:
                tailed.where = where
                if where != tailed.path and not tailed.rotated:
                    tailed.rotated = True
                    self.metrics.add("rotations")
            self.files[tailed.key] = tailed
            if tailed.where is not None:
                self._by_path[tailed.where] = tailed
            self._latest.setdefault(tailed.path, tailed)
        self._follow_source(tailed, index)
        self.ready[tailed] = None
        self.dirty = True
        log.info("%s: matched again; reading on from offset %d", tailed.path, tailed.pos)

    def _leave(self, tailed: TailedFile) -> None:
        """Stop reading ``tailed`` (no source matches it any more); see :meth:`reload`."""
        log.info(
            "%s: no source matches it any more; stopping at offset %d (kept in the checkpoint)",
            tailed.path,
            tailed.emitted,
        )
        tailed.restart_at(tailed.emitted)  # drop a held partial line: it is re-read on resume
        self.inflight.hold(tailed, 0)
        self.ready.pop(tailed, None)
        if self.files.get(tailed.key) is tailed:
            del self.files[tailed.key]
        if tailed in self.draining:
            self.draining.remove(tailed)
        for path in (tailed.path, tailed.where):
            if path is not None and self._by_path.get(path) is tailed:
                del self._by_path[path]
        if self._latest.get(tailed.path) is tailed:
            del self._latest[tailed.path]
        for other in self.everything():
            if other.waiting_for is tailed:
                other.waiting_for = None
        self.leaving.append(tailed)
        self.dirty = True
        self.finish_leaving()

    def finish_leaving(self) -> None:
        """Make files stopped by a reload dormant once nothing of theirs is in flight."""
        for tailed in list(self.leaving):
            if not tailed.acks.in_flight:
                self.forget(tailed)

    # -- polling -------------------------------------------------------------------------

    def poll_open(self) -> None:
        """fstat open handles: growth makes a file ready; shrinkage is a truncation."""
        for tailed in list(self.files.values()) + self.draining:
            if tailed.fd is None:
                continue
            try:
                st = os.fstat(tailed.fd)
            except OSError:
                continue
            if st.st_nlink == 0 and not tailed.deleted:
                log.info("%s was deleted; reading it to the end before closing", tailed.path)
                self._retire(tailed)
                if tailed.fd is None:
                    continue
            self._observe_size(tailed, st.st_size)

    def poll_closed(self) -> None:
        """stat files closed while idle; reopen the ones that changed."""
        for tailed in list(self.files.values()):
            if tailed.fd is not None or tailed.where is None:
                continue
            try:
                st = os.stat(tailed.where)
            except FileNotFoundError:
                self.closed_file_vanished(tailed)
                continue
            except OSError:
                continue
            if FileKey(st.st_dev, st.st_ino) != tailed.key:
                self.rotated_away(tailed)
                continue
            if st.st_size != tailed.size or st.st_mtime_ns != tailed.mtime_ns:
                # Reopening checks identity (fingerprint) and truncation.
                tailed.mtime_ns = st.st_mtime_ns
                self.ready[tailed] = None

    def closed_file_vanished(self, tailed: TailedFile) -> None:
        """A closed file is not at its path: follow it by inode, or forget it (deleted)."""
        found = find_inode(os.path.dirname(tailed.where or tailed.path), tailed.key)
        if found is None:
            tailed.deleted = True
            self.forget(tailed)
        else:
            if tailed.where is not None and self._by_path.get(tailed.where) is tailed:
                del self._by_path[tailed.where]
            tailed.where = found
            self._by_path[found] = tailed

    def _observe_size(self, tailed: TailedFile, size: int) -> None:
        """React to a file's current size (from fstat)."""
        if size < tailed.pos:
            self.truncated(tailed, size)
            return
        if size != tailed.size:
            if tailed.fp.length and tailed.fd is not None and not tailed.draining:
                head = tailed.head(tailed.fp.length)
                if fingerprint(head) != tailed.fp and len(head) >= tailed.fp.length:
                    # Truncated and rewritten past our position before we looked.
                    self.truncated(tailed, size)
                    return
            tailed.size = size
        if size > tailed.pos:
            tailed.at_eof = False
            self.ready[tailed] = None

    def truncated(self, tailed: TailedFile, size: int) -> None:
        """``tailed`` shrank below the read position (copytruncate): read it from 0."""
        log.info("%s: truncated (size %d < position %d); reading from the start", tailed.path, size, tailed.pos)
        self.metrics.add("truncations")
        tailed.acks.restart(0)
        tailed.fp = EMPTY
        tailed.new_generation()
        tailed.size = size
        self.restart(tailed, 0)
        self.dirty = True

    # -- bookkeeping the loop shares ------------------------------------------------------------

    def restart(self, tailed: TailedFile, offset: int) -> None:
        """Read ``tailed`` again from ``offset`` (what it held unsent is dropped)."""
        tailed.restart_at(offset)
        self.inflight.hold(tailed, 0)
        if tailed not in self.leaving:
            self.ready[tailed] = None

    def fully_read(self, tailed: TailedFile) -> bool:
        """True when a rotated predecessor has been read to its current end (a stat:
        growth makes it ready again, shrinkage restarts it)."""
        if tailed.fd is None:
            # Closed (or not opened yet): its size as last seen may be stale.
            if tailed.where is None:
                return True
            try:
                st = os.stat(tailed.where)
            except OSError:
                return True
            if FileKey(st.st_dev, st.st_ino) != tailed.key:
                return True
            if st.st_size > tailed.pos:
                self.ready[tailed] = None
                return False
            return True
        try:
            size = os.fstat(tailed.fd).st_size
        except OSError:
            return True
        # Growth makes it ready; shrinkage is a truncation: it restarts at 0.
        self._observe_size(tailed, size)
        return tailed.pos >= size

    def open_changed(self) -> None:
        """Recount open handles (after an open or a close)."""
        self.open_count = sum(1 for t in self.everything() if t.fd is not None)
        self.metrics.gauges["open_files"] = self.open_count

    def entry(self, tailed: TailedFile) -> Entry:
        """``tailed``'s checkpoint entry: where it is and how far the brokers have it."""
        return Entry(
            dev=tailed.key.dev,
            ino=tailed.key.ino,
            fp_len=tailed.fp.length,
            fp=tailed.fp.digest,
            path=tailed.path,
            where=tailed.where or tailed.path,
            offset=tailed.acks.acked,
            source=tailed.source.name,
            fid=tailed.file_id,
        )

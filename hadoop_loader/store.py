"""The output's state and the commit protocol that makes landing exactly once.

Layout under the output root (readers such as Spark and Hive skip names starting
with ``_``)::

    _logferry/lock                                  held by the running job
    _logferry/manifests/<20-digit sequence>.json    one per committed run
    _logferry/staging/<sequence>/data/topic=/dt=/hr=/part-*.parquet
    topic=<t>/dt=<YYYY-MM-DD>/hr=<HH>/r<sequence>-part-*.parquet    published files

A run, as a state machine (each arrow is one step; a crash can happen between any two):

1. STAGING: Spark writes run N's files under ``staging/N/data``.
2. COUNTED: the driver lists and counts the staged files and builds manifest N, whose
   offsets are manifest N-1's advanced by the ranges read.
3. COMMITTED: manifest N is created at ``manifests/N.json`` with a create-if-absent
   (write to a temporary name, then link or rename without overwrite). This single
   step is the commit: it advances the offsets and makes the run's files part of the
   output, together.
4. PUBLISHED: each staged file is renamed to its final path (named in the manifest);
   a repair run's manifest also names files its new ones replace, deleted here.
5. DONE: ``staging/N`` is deleted.

Recovery, at the start of every run, under the lock: a staging directory whose
manifest is committed is rolled forward (steps 4-5 are idempotent: a file already at
its final path is checked by size, one still staged is moved, one in neither place is a
:class:`StateError`); a staging directory without a committed manifest is discarded.
So whatever the crash point, a rerun starts from the offsets of the last committed
manifest and every committed file is published exactly once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from broker.common.lake import MANIFESTS_DIR, STATE_DIR
from hadoop_loader.errors import CommitConflictError, StateError
from hadoop_loader.fs import FileSystem, join
from hadoop_loader.manifest import Manifest

SEQ_DIGITS = 20

_HELD: set[str] = set()
"""Lock URIs this process holds now. A lock file naming this process but not in here was
left by one of its earlier runs whose release failed (the NameNode was down), which a
loader looping in one process (``logferry load --every``) takes over as it would a dead
process's; two runs of one process at once still exclude each other."""


def seq_name(sequence: int) -> str:
    return f"{sequence:0{SEQ_DIGITS}d}"


class PublishHooks(TypedDict):
    """Calls made while publishing (the loader's crash points, in tests)."""

    on_moved: Callable[[int], None]
    """After each staged file is moved into place (its number)."""
    before_cleanup: Callable[[], None]
    """After the last move, before the staging directory is removed."""


@dataclass
class Recovery:
    """What recovery found and did."""

    rolled_forward: list[int] = field(default_factory=list)
    """Committed runs whose publishing was completed."""
    discarded: list[int] = field(default_factory=list)
    """Uncommitted runs whose staging was deleted."""
    files_moved: int = 0

    def describe(self) -> str:
        parts = []
        if self.rolled_forward:
            parts.append(
                f"completed publishing of committed run(s) {self.rolled_forward} ({self.files_moved} file(s) moved)"
            )
        if self.discarded:
            parts.append(f"discarded uncommitted run(s) {self.discarded}")
        return "; ".join(parts) or "nothing to recover"


class LandingStore:
    """Manifests, staging, publishing and the lock, under one output root."""

    def __init__(self, fs: FileSystem, root: str):
        self.fs = fs
        self.root = root.rstrip("/")
        self.state = join(self.root, STATE_DIR)
        self.manifests = join(self.root, MANIFESTS_DIR)
        self.staging = join(self.state, "staging")
        self.lock_uri = join(self.state, "lock")

    # -- lock -----------------------------------------------------------------------

    def acquire_lock(self) -> None:
        """Take the lock, or raise naming its holder.

        A lock left by a process of this host that no longer runs (a crash), or by an
        earlier run of this process that could not release it (:data:`_HELD`), is taken
        over; a lock of another host must be removed by hand once that job is known dead.
        """
        owner = {"host": socket.gethostname(), "pid": os.getpid(), "since_ms": _now_ms()}
        data = json.dumps(owner).encode()
        if self.lock_uri in _HELD:
            raise StateError(
                f"another load job holds {self.lock_uri} (a run of this process, pid {owner['pid']}); wait for it"
            )
        try:
            self.fs.create_new(self.lock_uri, data)
            _HELD.add(self.lock_uri)
            return
        except FileExistsError:
            pass
        holder = self._lock_holder()
        pid = int(holder.get("pid", -1))
        if holder.get("host") == owner["host"] and (pid == owner["pid"] or not _pid_alive(pid)):
            self.fs.delete(self.lock_uri)
            try:
                self.fs.create_new(self.lock_uri, data)
                _HELD.add(self.lock_uri)
                return
            except FileExistsError:
                holder = self._lock_holder()
        raise StateError(
            f"another load job holds {self.lock_uri} (host {holder.get('host')}, "
            f"pid {holder.get('pid')}); wait for it, or delete that file if the "
            "job is known to be dead"
        )

    def _lock_holder(self) -> dict[str, Any]:
        try:
            holder: dict[str, Any] = json.loads(self.fs.read_bytes(self.lock_uri))
        except Exception:
            return {}
        return holder

    def release_lock(self) -> None:
        """Delete the lock file; this process no longer holds it either way (a failed
        delete leaves a file the next run of this process takes over)."""
        _HELD.discard(self.lock_uri)
        self.fs.delete(self.lock_uri)

    # -- committed state --------------------------------------------------------------

    def committed(self) -> list[int]:
        """Sequence numbers of committed runs, ascending."""
        out = []
        for name in self.fs.list_names(self.manifests):
            stem, dot, ext = name.partition(".")
            if ext == "json" and stem.isdigit() and len(stem) == SEQ_DIGITS:
                out.append(int(stem))
        return sorted(out)

    def manifest_uri(self, sequence: int) -> str:
        return join(self.manifests, seq_name(sequence) + ".json")

    def read_manifest(self, sequence: int) -> Manifest:
        uri = self.manifest_uri(sequence)
        return Manifest.from_json(self.fs.read_bytes(uri), uri)

    def latest(self) -> Manifest | None:
        """The last committed manifest, or None before the first run."""
        committed = self.committed()
        return self.read_manifest(committed[-1]) if committed else None

    def newest_first(self) -> Iterator[Manifest]:
        """Committed manifests from the newest back (the audit stops when old enough)."""
        for sequence in reversed(self.committed()):
            yield self.read_manifest(sequence)

    # -- one run ----------------------------------------------------------------------

    def staging_dir(self, sequence: int) -> str:
        return join(self.staging, seq_name(sequence))

    def staging_data(self, sequence: int) -> str:
        return join(self.staging_dir(sequence), "data")

    def begin(self, sequence: int) -> str:
        """A fresh staging data directory for run ``sequence`` (call after :meth:`recover`)."""
        if self.fs.exists(self.manifest_uri(sequence)):
            raise CommitConflictError(f"run {sequence} is already committed; another job ran concurrently")
        self.fs.delete(self.staging_dir(sequence))
        self.fs.mkdirs(self.staging_dir(sequence))
        return self.staging_data(sequence)

    def commit(self, manifest: Manifest) -> None:
        """The commit point: create ``manifests/N.json`` unless it exists."""
        previous = self.committed()
        if previous and previous[-1] != manifest.sequence - 1:
            raise CommitConflictError(
                f"cannot commit run {manifest.sequence}: the last committed run is "
                f"{previous[-1]}; another job ran concurrently and this run was discarded"
            )
        try:
            self.fs.create_new(self.manifest_uri(manifest.sequence), manifest.to_json())
        except FileExistsError:
            raise CommitConflictError(
                f"run {manifest.sequence} was committed by another job; this run was discarded"
            ) from None

    def publish(self, manifest: Manifest, after_each: Callable[[int], None] | None = None) -> int:
        """Move a committed run's staged files into place; idempotent. Returns files moved."""
        staged_root = self.staging_data(manifest.sequence)
        moved = 0
        for f in manifest.files:
            final = join(self.root, f.path)
            staged = join(staged_root, f.staged)
            size = self.fs.size(final)
            if size is None:
                if self.fs.size(staged) is None:
                    raise StateError(
                        f"run {manifest.sequence}: file {f.path} is neither staged "
                        f"({staged}) nor published; the output was changed by "
                        "hand. Restore it or remove the run's manifest knowingly."
                    )
                self.fs.rename(staged, final)
                moved += 1
                if after_each is not None:
                    after_each(moved)
                size = self.fs.size(final)
            if size != f.size:
                raise StateError(f"run {manifest.sequence}: {final} has {size} bytes, the manifest says {f.size}")
        for repair in manifest.repairs:  # a repair run: its files replace these
            for path in repair.replaced:
                self.fs.delete(join(self.root, path))
        return moved

    def cleanup(self, sequence: int) -> None:
        self.fs.delete(self.staging_dir(sequence))

    def recover(
        self, on_moved: Callable[[int], None] | None = None, before_cleanup: Callable[[], None] | None = None
    ) -> Recovery:
        """Roll committed runs forward and discard uncommitted ones (under the lock).

        ``on_moved`` and ``before_cleanup`` are called as in a run's own publishing (the
        crash tests hook them).
        """
        report = Recovery()
        committed = set(self.committed())
        for name in self.fs.list_names(self.staging):
            if not name.isdigit():
                self.fs.delete(join(self.staging, name))
                continue
            sequence = int(name)
            if sequence in committed:
                report.files_moved += self.publish(self.read_manifest(sequence), on_moved)
                report.rolled_forward.append(sequence)
                if before_cleanup is not None:
                    before_cleanup()
            else:
                report.discarded.append(sequence)
            self.cleanup(sequence)
        return report


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""The checkpoint file: per file identity, the offset up to which brokers acknowledged.

Written atomically so a crash at any instant leaves either the old or the new file,
never a torn one: write ``checkpoint.json.tmp``, ``fsync`` it, ``rename`` over
``checkpoint.json``, ``fsync`` the directory (so the rename itself is durable).
JSON because it is small and an operator can read it::

    {"version": 2, "host": "web-1", "written": 1700000000.5,
     "files": [{"dev": 2049, "ino": 131, "fp_len": 1024, "fp": "a1b2...",
                "path": "/var/log/app.log", "where": "/var/log/app.log.1",
                "offset": 52311, "source": "app", "fid": 4811916302335812043}]}

``path`` is the path the file was found under (what messages carry), ``where`` its
last known location (after a rotation they differ). ``offset`` is always the end of
a line: every byte before it is acknowledged. ``fid`` is the id of the file's current
generation (:func:`agent.identity.new_file_id`), which its messages carry: a file
resumed from the checkpoint re-sends its lines with the same id. Version 1 files
(without ``fid``) are read too; their files get a new id.

The state directory is also locked (``flock`` on ``lock``) so two agents cannot share
one checkpoint and overwrite each other's progress.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from agent.errors import CheckpointError
from agent.identity import FileKey, Fingerprint

VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass
class Entry:
    """One file's checkpoint."""

    dev: int
    ino: int
    fp_len: int
    fp: str
    path: str
    where: str
    offset: int
    source: str
    fid: int | None = None
    """The file generation's id (None: written by an agent before version 2)."""

    @property
    def key(self) -> FileKey:
        return FileKey(self.dev, self.ino)

    @property
    def fingerprint(self) -> Fingerprint:
        return Fingerprint(self.fp_len, self.fp)


def write_atomically(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` by ``data`` so readers see the old or the new file, whole."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class CheckpointStore:
    """Reads and writes one checkpoint file; holds the state directory's lock."""

    def __init__(self, state_dir: Path, host: str):
        self.state_dir = state_dir
        self.path = state_dir / "checkpoint.json"
        self.host = host
        self._lock_fd: int | None = None
        self.written: float | None = None
        """When the checkpoint :meth:`load` read was written (None: none was)."""

    def lock(self) -> None:
        """Create the state directory and take its lock, or fail saying who holds it."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CheckpointError(f"cannot use state_dir {self.state_dir}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CheckpointError(
                f"state_dir {self.state_dir} is in use by agent pid {holder}; "
                f"stop it or give this agent its own state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock (the process exiting releases it too)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> dict[FileKey, Entry]:
        """The saved entries by file key; empty when there is no checkpoint yet."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CheckpointError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            doc = json.loads(raw)
            if doc.get("version") not in READABLE_VERSIONS:
                raise ValueError(f"version {doc.get('version')!r}, expected one of {READABLE_VERSIONS}")
            entries = [Entry(**item) for item in doc["files"]]
            written = doc.get("written")
            self.written = float(written) if isinstance(written, (int, float)) else None
        except (ValueError, TypeError, KeyError) as exc:
            raise CheckpointError(
                f"{self.path} is corrupt ({exc}); move it away to start "
                f"over (files are then read again from their start)"
            ) from None
        return {entry.key: entry for entry in entries}

    def save(self, entries: Iterable[Entry]) -> None:
        """Write every entry atomically and durably."""
        doc = {"version": VERSION, "host": self.host, "written": time.time(), "files": [asdict(e) for e in entries]}
        try:
            write_atomically(self.path, json.dumps(doc, separators=(",", ":")).encode())
        except OSError as exc:
            raise CheckpointError(f"cannot write {self.path}: {exc.strerror}") from None

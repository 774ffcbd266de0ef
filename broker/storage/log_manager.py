"""All partition logs of a broker, spread over its log dirs.

Each log dir holds ``<topic>-<partition>`` directories. A log dir also holds the
clean-shutdown marker (``.clean_shutdown``) while no broker has it open: :meth:`close`
writes it after every log there was flushed and closed, and :meth:`load` removes it
once the logs are open. A log dir without the marker was not shut down cleanly, so
its logs are recovered (their tails validated and cut) when loaded.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from broker.common.errors import ConfigError, StorageError
from broker.common.names import parse_partition_dir_name, partition_dir_name
from broker.storage.config import LogConfig
from broker.storage.loader import CLEAN_SHUTDOWN_MARKER
from broker.storage.partition_log import DELETED_SUFFIX, PartitionLog
from broker.storage.segment import fsync_dir

log = logging.getLogger("logferry.storage")

Key = tuple[str, int]


class LogManager:
    """Opens, creates, removes and closes the partition logs of one broker.

    Not thread-safe: call it from one thread (the event loop; :meth:`load` may run in
    a worker before the loop uses the manager).
    """

    def __init__(self, log_dirs: list[Path], config: LogConfig):
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self._logs: dict[Key, PartitionLog] = {}
        self._dir_of: dict[Key, Path] = {}
        self._dirs_ready = False
        self._closed = False

    def load(self) -> None:
        """Open every partition found in the log dirs, recovering dirs that crashed.

        Creates missing log dirs; raises ConfigError for one that is not a writable
        directory and StorageError for a partition found in two log dirs.
        """
        self._prepare_dirs()
        recovered = []
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_MARKER
            recover = not marker.exists()
            for path, key in _partition_dirs(log_dir):
                if key in self._logs:
                    raise StorageError(
                        f"partition {partition_dir_name(*key)} is in two log dirs: "
                        f"{self._dir_of[key]} and {log_dir}; remove the stale copy"
                    )
                self._logs[key] = PartitionLog(path, key[0], key[1], self.config, recover)
                self._dir_of[key] = log_dir
                if recover and log_dir not in recovered:
                    recovered.append(log_dir)
        if recovered:
            log.info(
                "recovered logs in %s (no clean-shutdown marker); syncing them to disk", ", ".join(map(str, recovered))
            )
            # Bytes that survived a process crash may sit only in the page cache; they
            # are visible at once, so make them durable first.
            os.sync()
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_MARKER
            if marker.exists():
                # The removal must be durable before anything is appended, or a power
                # loss could bring the marker back over an unrecovered log.
                marker.unlink()
                fsync_dir(log_dir)
        self._closed = False

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None if this broker does not host it."""
        return self._logs.get((topic, partition))

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        """The log dir holding a partition, or None if this broker does not host it."""
        return self._dir_of.get((topic, partition))

    def create(self, topic: str, partition: int) -> PartitionLog:
        """Open the partition's log, creating it in the least-used log dir if needed."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        self._prepare_dirs()
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        log_dir = min(self.log_dirs, key=counts.__getitem__)
        plog = PartitionLog(
            log_dir / partition_dir_name(topic, partition), topic, partition, self.config, recover=False
        )
        self._logs[key] = plog
        self._dir_of[key] = log_dir
        return plog

    def remove(self, topic: str, partition: int) -> None:
        """Delete a partition's log and its data; nothing happens if it is not hosted."""
        key = (topic, partition)
        plog = self._logs.pop(key, None)
        if plog is None:
            return
        del self._dir_of[key]
        plog.delete()

    def logs(self) -> Iterable[tuple[Key, PartitionLog]]:
        """((topic, partition), log) pairs: a snapshot, safe to use across awaits."""
        return list(self._logs.items())

    def topics(self) -> set[str]:
        """Names of the topics with at least one partition hosted here."""
        return {topic for topic, _ in self._logs}

    def close(self) -> None:
        """Flush and close every log, then mark each log dir as cleanly shut down.

        A log dir gets no marker if one of its logs failed to flush or close, or
        cannot vouch for its tail, so that the next start recovers it.
        """
        if self._closed:
            return
        self._closed = True
        unclean: set[Path] = set()
        for key, plog in self._logs.items():
            try:
                if plog.needs_recovery:
                    unclean.add(self._dir_of[key])
                plog.close()
            except Exception as exc:  # keep closing the others; the next start recovers
                unclean.add(self._dir_of[key])
                log.error("closing partition %s failed: %s", plog.name, exc)
        self._logs.clear()
        self._dir_of.clear()
        for log_dir in self.log_dirs:
            if log_dir in unclean or not log_dir.is_dir():
                continue
            try:
                _write_marker(log_dir / CLEAN_SHUTDOWN_MARKER)
            except OSError as exc:
                log.error("cannot mark %s as cleanly shut down: %s", log_dir, exc)

    def _prepare_dirs(self) -> None:
        if self._dirs_ready:
            return
        if not self.log_dirs:
            raise ConfigError("the broker needs at least one log dir")
        for log_dir in self.log_dirs:
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"log dir {log_dir} does not exist and cannot be created: {exc}") from exc
            if not log_dir.is_dir() or not os.access(log_dir, os.W_OK | os.X_OK):
                raise ConfigError(
                    f"log dir {log_dir} is not a writable directory: fix its permissions or choose another in log_dirs"
                )
        self._dirs_ready = True


def _partition_dirs(log_dir: Path) -> list[tuple[Path, Key]]:
    """Partition directories in ``log_dir``; removes leftovers of interrupted deletes."""
    found = []
    with os.scandir(log_dir) as entries:
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.endswith(DELETED_SUFFIX):
                log.info("removing %s, left by an interrupted partition delete", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            key = parse_partition_dir_name(entry.name)
            if key is not None:
                found.append((Path(entry.path), key))
    found.sort()
    return found


def _write_marker(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)

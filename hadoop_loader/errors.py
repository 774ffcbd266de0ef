"""The loader's error hierarchy: every error it raises derives from :class:`LoaderError`.

Errors from the broker's client library (:class:`broker.common.errors.LogferryError`) are
converted at the edge into :class:`SourceError`, keeping their ``retriable`` flag, so a
caller of the loader handles one hierarchy. Every message says what went wrong and what
to do about it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any


class LoaderError(Exception):
    """Root of every error the loader raises."""

    retriable: bool = False
    exit_code: int = 1
    """Process exit code of ``logferry load`` when this error ends the run."""


class LoaderConfigError(LoaderError):
    """A config file key or a data source option is missing, malformed or out of range.

    The message names the key (``load.chunk_bytes``) or option (``maxBytesPerPartition``).
    Errors about a config file key carry ``key`` (its dotted path) and ``file``, with the
    message in the format of every logferry config error, ``<file>: <key>: <problem>``.
    """

    exit_code = 2
    key: str = ""
    file: str = ""

    def __init__(self, message: str, *, key: str = "", file: str = ""):
        super().__init__(message)
        self.key = key
        self.file = file


class SourceError(LoaderError):
    """The brokers could not be reached or answered an error (converted client error)."""


class RetentionGapError(LoaderError):
    """Offsets to be read were deleted by the broker's retention before they were landed."""

    def __init__(self, message: str, gaps: list[Gap] | None = None):
        super().__init__(message)
        self.gaps = gaps or []


class OffsetStateError(LoaderError):
    """Landed offsets and the brokers disagree in a way retention cannot explain.

    For example a landed offset beyond a partition's visible end (the log was truncated,
    or the loader points at the wrong cluster).
    """


class StateError(LoaderError):
    """The output's state (manifests, staging, lock) is inconsistent or held by another run."""


class OutputUnavailableError(LoaderError):
    """The output's file system refused or could not be reached (a NameNode down or in
    safe mode, a DataNode gone mid-write): nothing was committed; the next run starts
    from the last commit."""


class CommitConflictError(StateError):
    """Another run committed the same sequence number first; nothing of this run was kept."""


class LakeDamagedError(StateError):
    """Files earlier runs landed are missing or do not match their manifests (exit 1).

    The run itself landed what was new; ``logferry load --repair`` lands the damaged
    files again while the cluster still holds their offsets.
    """


class AuditError(LoaderError):
    """The audit topic could not be read or holds nothing usable."""


class IncompleteError(LoaderError):
    """Landed counts fall below ``--require-complete`` for at least one audited hour."""

    exit_code = 3


class Gap:
    """A range of offsets deleted by retention before the loader read it."""

    __slots__ = ("topic", "partition", "start", "end")

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic = topic
        self.partition = partition
        self.start = start
        """First missing offset (where the loader wanted to start)."""
        self.end = end
        """The partition's first retained offset."""

    @property
    def bytes(self) -> int:
        """Number of log bytes lost."""
        return self.end - self.start

    def describe(self) -> str:
        """One line naming the partition and the missing range."""
        return (
            f"{self.topic}/{self.partition}: offsets [{self.start}, {self.end}) "
            f"({self.bytes} bytes) were deleted by retention"
        )

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Gap) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Gap({self.topic!r}, {self.partition}, {self.start}, {self.end})"


@contextlib.contextmanager
def source_errors(what: str) -> Iterator[None]:
    """Convert client library errors raised inside the block into :class:`SourceError`.

    ``what`` says what the loader was doing ("reading offsets of topic 'a'"), so the
    message tells the operator where it failed.
    """
    from broker.common.errors import LogferryError  # the edge: the only place that knows them

    try:
        yield
    except LogferryError as exc:
        error = SourceError(f"{what}: {exc}")
        error.retriable = bool(getattr(exc, "retriable", False))
        raise error from exc


class SparkJobError(LoaderError):
    """A Spark job of the run failed for a reason that is not one of the loader's errors."""


_LOADER_ERROR_LINE = re.compile(r"hadoop_loader\.errors\.(\w+): (.+)")


def error_from_spark(what: str, text: str) -> LoaderError:
    """The loader error behind a failed Spark job's message, or a :class:`SparkJobError`.

    An executor's exception reaches the driver as text inside a Java exception; when it
    was one of ours (a retention gap found while reading, say) it is raised again as
    that class with its own message, so the operator sees the cause, not a stack trace.
    """
    found = _LOADER_ERROR_LINE.search(text)
    if found:
        cls = globals().get(found.group(1))
        if isinstance(cls, type) and issubclass(cls, LoaderError):
            error = cls.__new__(cls)
            LoaderError.__init__(error, found.group(2).strip())
            if isinstance(error, RetentionGapError):
                error.gaps = []
            return error
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # py4j's own header ("An error occurred while calling o559.parquet.") names no cause:
    # the deepest "Caused by:" does (an HDFS write with its DataNode gone, a full disk),
    # or else the Java exception on the line after it (": org.apache.iceberg.exceptions.
    # ValidationException: Metadata file for version 4 is missing").
    if lines and lines[0].startswith("An error occurred while calling"):
        causes = [line[len("Caused by: ") :] for line in lines if line.startswith("Caused by: ")]
        if causes:
            return SparkJobError(f"{what} failed: {causes[-1][:500]}")
        if len(lines) > 1 and lines[1].startswith(":"):
            return SparkJobError(f"{what} failed: {lines[1].lstrip(': ')[:500]}")
    first = lines[0] if lines else type(text).__name__
    return SparkJobError(f"{what} failed: {first[:500]}")


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Convert a failed Spark job (a py4j or PySpark exception) into a loader error."""
    try:
        yield
    except LoaderError:
        raise
    except Exception as exc:
        module = type(exc).__module__
        if not (module.startswith("pyspark") or module.startswith("py4j")):
            raise
        raise error_from_spark(what, str(exc)) from exc

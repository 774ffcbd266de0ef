"""What a landing run reports, and the two helpers every kind of run shares: the run's
SparkSession (built only when needed) and its clock of steps.

Both landing paths, Parquet (:mod:`hadoop_loader.job`) and Iceberg
(:mod:`hadoop_loader.iceberg_job`), return a :class:`LoadResult`, which
:mod:`hadoop_loader.summary` prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from hadoop_loader.config import LoaderConfig
from hadoop_loader.errors import Gap, LoaderError
from hadoop_loader.iceberg import session_settings
from hadoop_loader.manifest import RangeEntry
from hadoop_loader.source import LogferryDataSource
from hadoop_loader.store import Recovery
from hadoop_loader.verify import LakeCheck


@dataclass
class TopicStats:
    """What a run landed for one topic."""

    rows: int = 0
    log_bytes: int = 0
    """Log bytes read (offset ranges)."""
    parquet_bytes: int = 0
    files: int = 0
    duplicates: int = 0
    """Rows dropped by dedup as copies of rows already landed."""
    ranges: list[RangeEntry] = field(default_factory=list)
    hours: dict[str, int] = field(default_factory=dict)
    table: str | None = None
    """With ``format = "iceberg"``: the table the topic landed in."""
    snapshot_id: int | None = None
    """With ``format = "iceberg"``: the snapshot of this run's commit (``VERSION AS OF``)."""


@dataclass
class LoadResult:
    """The outcome of one run, for the summary and the tests."""

    sequence: int | None
    """The committed run's sequence number (None: nothing to commit); with ``format =
    "iceberg"`` the highest load number the run committed to a table."""
    recovery: Recovery
    topics: dict[str, TopicStats]
    gaps: list[Gap]
    seconds: float
    walked_bytes: int = 0
    undecodable: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per step: recover, plan, spark (session start), write, count, commit, publish."""
    audit: Any = None
    audit_error: LoaderError | None = None
    """Why the audit failed (the run itself committed)."""
    lake: LakeCheck | None = None
    """What the verification of earlier runs' files found (at the run's start)."""
    dedup: bool = False
    """Whether dedup was on."""
    repair: Any = None
    """What ``--repair`` did (:class:`hadoop_loader.repair.RepairResult`)."""

    @property
    def duplicates(self) -> int:
        return sum(t.duplicates for t in self.topics.values())

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.topics.values())


class LoadSession:
    """The run's SparkSession, built only when needed.

    With a local output, recovery and planning need no JVM, so a run with nothing to
    land (or one that only finishes publishing a crashed run) never starts Spark.
    """

    def __init__(self, config: LoaderConfig, spark: Any, master: str | None):
        self._config = config
        self._spark = spark
        self._master = master

    def get(self) -> Any:
        if self._spark is None:
            from hadoop_loader.spark_session import build_session

            spark_config = self._config.spark
            if self._config.output.format == "iceberg":  # Iceberg's SQL extensions, before the JVM starts
                conf = {**spark_config.conf, **session_settings(spark_config.conf)}
                spark_config = replace(spark_config, conf=conf)
            self._spark = build_session(spark_config, self._master, self._config.load.timezone)
        self._spark.conf.set("spark.sql.session.timeZone", self._config.load.timezone)
        self._spark.dataSource.register(LogferryDataSource)
        return self._spark


class Clock:
    """Seconds spent per step of a run."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = now - self._last
        self._last = now

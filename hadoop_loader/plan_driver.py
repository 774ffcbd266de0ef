"""The driver's side of a read: resolve offsets, check them, plan chunks.

Shared by the batch reader, the stream reader and the landing job. It talks to the
cluster through one :class:`SimpleConsumer` (partitions, offsets, and the boundary walk
of :mod:`hadoop_loader.boundaries`) and resolves the brokers' addresses once, so that
executors connect to brokers directly without ZooKeeper sessions of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.client import Admin, SimpleConsumer
from broker.common.errors import UnknownTopicOrPartitionError
from hadoop_loader.boundaries import FetchBoundaryFinder
from hadoop_loader.config import LoaderConfig
from hadoop_loader.errors import (
    Gap,
    LoaderConfigError,
    OffsetStateError,
    SourceError,
    source_errors,
)
from hadoop_loader.offsets import EARLIEST, LATEST, OffsetSpec, PartitionRange, check_start, resolve
from hadoop_loader.options import Endpoint
from hadoop_loader.planning import Chunk, plan


@dataclass
class RangePlan:
    """What the driver decided to read."""

    ranges: list[PartitionRange]
    """One per topic-partition (possibly empty: start == end)."""
    chunks: list[Chunk]
    gaps: list[Gap] = field(default_factory=list)
    """Retention gaps skipped (only with skip_gaps)."""
    walked_bytes: int = 0
    """Bytes the boundary walk fetched in the driver."""


class DriverPlanner:
    """Offsets and chunk plans for topics of one cluster."""

    def __init__(self, endpoint: Endpoint, walk_step_bytes: int = 8 * 1024 * 1024):
        self.endpoint = endpoint
        with source_errors("connecting to the cluster"):
            self.consumer = SimpleConsumer(
                zk=endpoint.zk,
                brokers=list(endpoint.brokers) if endpoint.brokers else None,
                tls=endpoint.tls,
                sasl=endpoint.credentials(),
                listener=endpoint.listener,
            )
        self.finder = FetchBoundaryFinder(self.consumer, step_bytes=walk_step_bytes)
        self._executor_endpoint: Endpoint | None = None

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> DriverPlanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def executor_endpoint(self) -> Endpoint:
        """The endpoint executors use: the brokers' addresses (no ZooKeeper)."""
        if self._executor_endpoint is None:
            if self.endpoint.brokers is not None:
                self._executor_endpoint = self.endpoint
            else:
                with (
                    source_errors(f"listing brokers registered at {self.endpoint.zk}"),
                    Admin(
                        zk=self.endpoint.zk,
                        tls=self.endpoint.tls,
                        sasl=self.endpoint.credentials(),
                        listener=self.endpoint.listener,
                    ) as admin,
                ):
                    brokers = admin.brokers()
                addresses = tuple(f"{b.host}:{b.port}" for b in brokers.values())
                if not addresses:
                    raise OffsetStateError(f"no broker is registered at {self.endpoint.zk}")
                # the addresses are those of the listener the Admin used
                self._executor_endpoint = Endpoint(None, addresses, self.endpoint.tls, self.endpoint.sasl)
        return self._executor_endpoint

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; a missing topic is a config error naming it."""
        try:
            with source_errors(f"listing partitions of topic {topic!r}"):
                return self.consumer.partitions(topic)
        except SourceError as exc:
            if isinstance(exc.__cause__, UnknownTopicOrPartitionError):
                raise LoaderConfigError(f"topic {topic!r} does not exist in the cluster ({self._where()})") from None
            raise

    def log_range(self, topic: str, partition: int) -> tuple[int, int]:
        """``(first retained offset, visible end)`` of a partition."""
        with source_errors(f"reading offsets of {topic}/{partition}"):
            r = self.consumer.offsets(topic, partition)
        return r.start, r.end

    def current_ends(self, topics: Iterable[str]) -> dict[str, dict[int, tuple[int, int]]]:
        """topic -> partition -> (log start, visible end), read now."""
        return {t: {p: self.log_range(t, p) for p in self.partitions(t)} for t in topics}

    def plan_ranges(
        self,
        topics: Iterable[str],
        starting: OffsetSpec,
        ending: OffsetSpec | None,
        skip_gaps: bool,
        chunk_bytes: int,
        cap_bytes: int | None = None,
    ) -> RangePlan:
        """Resolve start/end per partition, check them, and cut chunks.

        ``starting`` comes from the data source options, or from the landing job's last
        landed offsets (explicit) with ``first_run`` as default. The end is the visible
        end as read now unless ``ending`` names one.
        """
        ranges: list[PartitionRange] = []
        gaps: list[Gap] = []
        for topic in topics:
            for partition in self.partitions(topic):
                log_start, log_end = self.log_range(topic, partition)
                asked = starting.for_partition(topic, partition)
                start, gap = check_start(
                    topic, partition, resolve(asked, log_start, log_end), log_start, log_end, skip_gaps
                )
                if gap is not None:
                    gaps.append(gap)
                end = log_end
                if ending is not None:
                    end = resolve(ending.for_partition(topic, partition), log_start, log_end)
                    if end > log_end:
                        raise LoaderConfigError(
                            f"option endingOffsets: {topic}/{partition} ends at {end}, beyond the visible end {log_end}"
                        )
                if end < start:
                    raise LoaderConfigError(
                        f"{topic}/{partition}: the ending offset {end} is before the starting offset {start}"
                    )
                ranges.append(PartitionRange(topic, partition, start, end))
        before = self.finder.bytes_walked
        chunks = plan(ranges, chunk_bytes, self.finder, cap_bytes)
        if cap_bytes is not None:  # the cap may have cut ranges short: report what is planned
            planned = {(c.topic, c.partition): c.end for c in chunks}
            ranges = [r._replace(end=planned.get((r.topic, r.partition), r.start)) for r in ranges]
        return RangePlan(ranges, chunks, gaps, self.finder.bytes_walked - before)

    def _where(self) -> str:
        return self.endpoint.zk or ",".join(self.endpoint.brokers or ())


def first_run_position(config: LoaderConfig) -> int:
    """Where a partition never landed before starts: ``load.first_run``'s position."""
    return EARLIEST if config.load.first_run == "earliest" else LATEST


def plan_load(config: LoaderConfig, landed: Mapping[str, Mapping[int, int]]) -> tuple[RangePlan, Endpoint]:
    """One landing run's plan (Parquet's and Iceberg's jobs alike): every source topic's
    ranges from ``landed`` (topic -> partition -> next offset; a partition missing starts
    at ``load.first_run``) to the visible end now, cut into chunks as ``[load]`` says;
    and the endpoint the executors read from."""
    source = config.source
    endpoint = Endpoint(source.zk, source.brokers, config.tls, config.sasl, source.listener)
    with DriverPlanner(endpoint) as planner:
        plan = planner.plan_ranges(
            source.topics,
            OffsetSpec(first_run_position(config), {t: dict(landed.get(t, {})) for t in source.topics}),
            None,
            config.load.on_retention_gap == "skip",
            config.load.chunk_bytes,
            config.load.max_bytes_per_partition,
        )
        return plan, planner.executor_endpoint()

"""The ``logferry`` Spark data source: batch and streaming reads of topics.

::

    spark.dataSource.register(LogferryDataSource)      # or hadoop_loader.register(spark)
    df = (spark.read.format("logferry")
          .option("zk", "127.0.0.1:2181/logferry/analysis")
          .option("topics", "app-log,access-log")
          .option("startingOffsets", "earliest")         # latest | {"t": {"0": 1234}}
          .option("endingOffsets", "latest")
          .option("maxBytesPerPartition", 64 << 20)      # input partition (chunk) size
          .load())

Planning runs in Spark's Python planner on the driver (:class:`DriverPlanner`): offsets
are resolved, checked against retention, and cut into chunks at batch boundaries (see
:mod:`hadoop_loader.planning`). Chunks are packed into input partitions of up to
``maxBytesPerPartition``; a task fetches its chunks from the brokers and yields one
Arrow record batch per fetch.

Spark pickles the reader before it calls ``partitions()``, so everything a task needs
(the brokers' addresses, the chunk, whether to decode) travels in the partition
object, not in state set on the reader while planning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from hadoop_loader import zipcache
from hadoop_loader.arrowconv import spark_schema, to_record_batch
from hadoop_loader.fetching import consumer_for, read_chunk
from hadoop_loader.offsets import LATEST, OffsetSpec, PartitionRange, check_start
from hadoop_loader.options import Endpoint, SourceOptions, parse_options
from hadoop_loader.plan_driver import DriverPlanner
from hadoop_loader.planning import Chunk, pack, plan

log = logging.getLogger("logferry.loader.source")

FORMAT = "logferry"

SparkOffsets = dict[str, dict[str, int]]
"""A streaming read's offsets as Spark checkpoints them (JSON): topic -> partition, as
text -> offset."""


class SplitPartition(InputPartition):
    """One input partition (one task): chunks packed up to ``maxBytesPerPartition``."""

    def __init__(self, chunks: Sequence[Chunk], endpoint: Endpoint, decode: dict[str, bool | None], fetch_bytes: int):
        super().__init__([c.to_json() for c in chunks])
        self.chunks = list(chunks)
        self.endpoint = endpoint
        self.decode = decode
        """topic -> True: decode agent records; False: null agent columns; None: no agent
        columns."""
        self.fetch_bytes = fetch_bytes


def read_partition(partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    """Fetch a split's chunks and yield one record batch per fetch (runs in the executor)."""
    zipcache.install()  # the worker's next tasks skip re-reading pyspark.zip (CPython 3.10-3.11)
    consumer = consumer_for(partition.endpoint)
    for chunk in partition.chunks:
        decode = partition.decode.get(chunk.topic)
        undecodable = rows = 0
        for batches in read_chunk(consumer, chunk, partition.fetch_bytes):
            if not batches:
                continue
            converted = to_record_batch(chunk.topic, chunk.partition, batches, decode)
            undecodable += converted.undecodable
            rows += converted.batch.num_rows
            yield converted.batch
        if undecodable:
            log.warning(
                "%s/%s [%d, %d): %d of %d values are not agent records; kept raw with decoded = false",
                chunk.topic,
                chunk.partition,
                chunk.start,
                chunk.end,
                undecodable,
                rows,
            )


def _decode_flag(options: SourceOptions, topic: str) -> bool | None:
    if not options.agent_columns:
        return None
    return topic in options.decode


def to_partitions(options: SourceOptions, chunks: Sequence[Chunk], endpoint: Endpoint) -> list[InputPartition]:
    """Input partitions for ``chunks``, packed up to ``maxBytesPerPartition`` each."""
    decode = {t: _decode_flag(options, t) for t in options.topics}
    return [
        SplitPartition(split, endpoint, decode, options.fetch_bytes)
        for split in pack(chunks, options.max_bytes_per_partition)
    ]


class LogferryDataSource(DataSource):
    """``spark.read.format("logferry")`` and ``spark.readStream.format("logferry")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> SourceOptions:
        return parse_options(self.options)

    def schema(self) -> StructType:
        return spark_schema(self._options().agent_columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogferryReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogferryStreamReader(self._options())


class LogferryReader(DataSourceReader):
    """Batch reads: one plan of chunks at query planning time.

    No ``pushFilters``: with Spark 4.3 a query without filters can reuse the input
    partitions planned for an earlier filtered query on the same DataFrame (seen here:
    ``df.where("partition = 3").count()`` then ``df.count()`` counted partition 3 only),
    so pruning would change results. Spark applies every filter to the rows instead;
    ``topics`` and the offset options select what is read.
    """

    def __init__(self, options: SourceOptions):
        self.options = options

    def _plan(self) -> tuple[list[Chunk], Endpoint]:
        options = self.options
        with DriverPlanner(options.endpoint) as planner:
            endpoint = planner.executor_endpoint()
            if options.chunks is not None:
                return list(options.chunks), endpoint
            result = planner.plan_ranges(
                options.topics, options.starting, options.ending, options.skip_gaps, options.max_bytes_per_partition
            )
            for gap in result.gaps:
                log.warning("skipping a retention gap: %s", gap.describe())
            return result.chunks, endpoint

    def partitions(self) -> list[InputPartition]:
        chunks, endpoint = self._plan()
        return to_partitions(self.options, chunks, endpoint)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return read_partition(partition)


class LogferryStreamReader(DataSourceStreamReader):
    """Structured Streaming: offsets are ``{"topic": {"partition": offset}}`` dicts.

    ``initialOffset`` resolves ``startingOffsets``; ``latestOffset`` reads the visible
    ends; ``partitions`` plans chunks between two offsets. Nothing is committed to the
    brokers (they keep no consumer state): Spark's checkpoint holds the offsets. With
    ``trigger(availableNow=True)`` Spark asks for the ends once, when the query starts,
    and reads up to them.

    PySpark 4.1 (pinned for Apache Iceberg's Spark runtime) gives Python streaming
    sources no admission control (4.2's ``getDefaultReadLimit``/``ReadMaxBytes`` and
    ``latestOffset(start, limit)``), so a micro-batch reads everything visible and the
    option ``maxBytesPerTrigger`` is refused (:data:`hadoop_loader.options.NO_TRIGGER_LIMIT`).
    """

    def __init__(self, options: SourceOptions):
        self.options = options
        self._planner: DriverPlanner | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> DriverPlanner:
        if self._planner is None:
            self._planner = DriverPlanner(self.options.endpoint)
        return self._planner

    def initialOffset(self) -> SparkOffsets:
        plan_ = self.planner.plan_ranges(
            self.options.topics, self.options.starting, OffsetSpec(LATEST), self.options.skip_gaps, 1 << 62
        )
        for gap in plan_.gaps:
            log.warning("skipping a retention gap: %s", gap.describe())
        return _to_offsets({(r.topic, r.partition): r.start for r in plan_.ranges})

    def latestOffset(self) -> SparkOffsets:
        ends = self.planner.current_ends(self.options.topics)
        return _to_offsets({(t, p): e for t, parts in ends.items() for p, (_, e) in parts.items()})

    def partitions(self, start: SparkOffsets, end: SparkOffsets) -> list[InputPartition]:
        begin, stop = _from_offsets(start), _from_offsets(end)
        ranges = []
        for key, end_offset in sorted(stop.items()):
            topic, partition = key
            log_start, _ = self.planner.log_range(topic, partition)
            first = begin.get(key, log_start)
            if first < log_start:
                if not self.options.skip_gaps:
                    check_start(topic, partition, first, log_start, end_offset, False)
                log.warning("skipping a retention gap: %s/%s [%d, %d)", topic, partition, first, log_start)
                first = log_start
            if end_offset > first:
                ranges.append(PartitionRange(topic, partition, first, end_offset))
        chunks = plan(ranges, self.options.max_bytes_per_partition, self.planner.finder)
        return to_partitions(self.options, chunks, self.planner.executor_endpoint())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return read_partition(partition)

    def commit(self, end: SparkOffsets) -> None:
        """Nothing to do: brokers keep no consumer state; Spark checkpoints the offsets."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def _to_offsets(offsets: dict[tuple[str, int], int]) -> SparkOffsets:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _from_offsets(offsets: SparkOffsets | None) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items() for p, o in parts.items()}

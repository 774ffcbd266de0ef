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
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes
from pyspark.sql.types import StructType

from hadoop_loader.arrowconv import spark_schema, to_record_batch
from hadoop_loader.fetching import consumer_for, read_chunk
from hadoop_loader.offsets import LATEST, OffsetSpec, PartitionRange, check_start
from hadoop_loader.options import Endpoint, SourceOptions, parse_options
from hadoop_loader.plan_driver import DriverPlanner
from hadoop_loader.planning import Chunk, pack, plan

log = logging.getLogger("logferry.loader.source")

FORMAT = "logferry"


class SplitPartition(InputPartition):
    """One input partition (one task): chunks packed up to ``maxBytesPerPartition``."""

    def __init__(self, chunks: Sequence[Chunk], endpoint: Endpoint,
                 decode: dict[str, bool | None], fetch_bytes: int):
        super().__init__([c.to_json() for c in chunks])
        self.chunks = list(chunks)
        self.endpoint = endpoint
        self.decode = decode
        """topic -> True: decode agent records; False: null agent columns; None: no agent
        columns."""
        self.fetch_bytes = fetch_bytes


def read_partition(partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    """Fetch a split's chunks and yield one record batch per fetch (runs in the executor)."""
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
            log.warning("%s/%s [%d, %d): %d of %d values are not agent records; kept raw "
                        "with decoded = false", chunk.topic, chunk.partition, chunk.start,
                        chunk.end, undecodable, rows)


def _decode_flag(options: SourceOptions, topic: str) -> bool | None:
    if not options.agent_columns:
        return None
    return topic in options.decode


def to_partitions(options: SourceOptions, chunks: Sequence[Chunk],
                  endpoint: Endpoint) -> list[InputPartition]:
    """Input partitions for ``chunks``, packed up to ``maxBytesPerPartition`` each."""
    decode = {t: _decode_flag(options, t) for t in options.topics}
    return [SplitPartition(split, endpoint, decode, options.fetch_bytes)
            for split in pack(chunks, options.max_bytes_per_partition)]


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
        options = self._options()
        if str(self.options.get("pushFilters", "false")).lower() == "true":
            return LogferryFilteringReader(options)
        return LogferryReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogferryStreamReader(self._options())


class LogferryReader(DataSourceReader):
    """Batch reads: one plan of chunks at query planning time."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def _plan(self) -> tuple[list[Chunk], Endpoint]:
        options = self.options
        with DriverPlanner(options.endpoint) as planner:
            endpoint = planner.executor_endpoint()
            if options.chunks is not None:
                return list(options.chunks), endpoint
            result = planner.plan_ranges(self._topics(), options.starting, options.ending,
                                         options.skip_gaps, options.max_bytes_per_partition)
            for gap in result.gaps:
                log.warning("skipping a retention gap: %s", gap.describe())
            return result.chunks, endpoint

    def _topics(self) -> Sequence[str]:
        return self.options.topics

    def partitions(self) -> list[InputPartition]:
        chunks, endpoint = self._plan()
        chunks = self._prune(chunks)
        return to_partitions(self.options, chunks, endpoint)

    def _prune(self, chunks: list[Chunk]) -> list[Chunk]:
        return chunks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return read_partition(partition)


class LogferryFilteringReader(LogferryReader):
    """A reader that prunes chunks with pushed filters (option ``pushFilters=true``).

    Filters on ``topic`` and ``partition`` (=, IN) drop whole topic-partitions before
    planning; filters on ``offset`` (<, <=, >, >=) drop chunks that cannot hold a
    matching row. Every filter is still handed back to Spark, which checks each row, so
    pruning can only save work, never change a result. Needs the Spark setting
    ``spark.sql.python.filterPushdown.enabled=true``.
    """

    def __init__(self, options: SourceOptions):
        super().__init__(options)
        self.topic_in: set[str] | None = None
        self.partition_in: set[int] | None = None
        self.offset_min: int | None = None
        self.offset_max: int | None = None

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        for f in filters:
            column = f.attribute[0] if len(f.attribute) == 1 else None
            values: set | None = None
            if isinstance(f, EqualTo):
                values = {f.value}
            elif isinstance(f, In):
                values = set(f.value)
            if column == "topic" and values is not None:
                self.topic_in = values if self.topic_in is None else self.topic_in & values
            elif column == "partition" and values is not None:
                self.partition_in = values if self.partition_in is None else self.partition_in & values
            elif column == "offset" and type(getattr(f, "value", None)) is int:
                if isinstance(f, (GreaterThan, GreaterThanOrEqual)):
                    low = f.value + (1 if isinstance(f, GreaterThan) else 0)
                    self.offset_min = low if self.offset_min is None else max(self.offset_min, low)
                elif isinstance(f, (LessThan, LessThanOrEqual)):
                    high = f.value - (1 if isinstance(f, LessThan) else 0)
                    self.offset_max = high if self.offset_max is None else min(self.offset_max, high)
                elif isinstance(f, EqualTo):
                    self.offset_min = self.offset_max = f.value
        return filters

    def _topics(self) -> Sequence[str]:
        if self.topic_in is None:
            return self.options.topics
        return [t for t in self.options.topics if t in self.topic_in]

    def _prune(self, chunks: list[Chunk]) -> list[Chunk]:
        kept = []
        for c in chunks:
            if self.partition_in is not None and c.partition not in self.partition_in:
                continue
            # A chunk holds batches starting in [start, end): row offsets lie in that span.
            if self.offset_min is not None and c.end <= self.offset_min:
                continue
            if self.offset_max is not None and c.start > self.offset_max:
                continue
            kept.append(c)
        return kept


class LogferryStreamReader(DataSourceStreamReader):
    """Structured Streaming: offsets are ``{"topic": {"partition": offset}}`` dicts.

    ``initialOffset`` resolves ``startingOffsets``; ``latestOffset`` reads the visible
    ends (capped by ``maxBytesPerTrigger``, split evenly over partitions with a backlog);
    ``partitions`` plans chunks between two offsets. Nothing is committed to the brokers
    (they keep no consumer state): Spark's checkpoint holds the offsets.
    """

    def __init__(self, options: SourceOptions):
        self.options = options
        self._planner: DriverPlanner | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> DriverPlanner:
        if self._planner is None:
            self._planner = DriverPlanner(self.options.endpoint)
        return self._planner

    def initialOffset(self) -> dict:
        plan_ = self.planner.plan_ranges(self.options.topics, self.options.starting,
                                         OffsetSpec(LATEST), self.options.skip_gaps,
                                         1 << 62)
        for gap in plan_.gaps:
            log.warning("skipping a retention gap: %s", gap.describe())
        return _to_offsets({(r.topic, r.partition): r.start for r in plan_.ranges})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        current = _from_offsets(start)
        ends = self.planner.current_ends(self.options.topics)
        targets: dict[tuple[str, int], int] = {}
        backlog = []
        for topic, parts in ends.items():
            for partition, (log_start, log_end) in parts.items():
                pos = max(current.get((topic, partition), log_start), log_start)
                targets[(topic, partition)] = log_end
                if log_end > pos:
                    backlog.append(PartitionRange(topic, partition, pos, log_end))
        if isinstance(limit, ReadMaxBytes) and backlog:
            share = max(limit.max_bytes // len(backlog), 1)
            for r in backlog:
                if r.bytes > share:
                    chunks = plan([r], share, self.planner.finder, cap_bytes=share)
                    targets[(r.topic, r.partition)] = chunks[-1].end
        merged = dict(current)
        merged.update(targets)
        return _to_offsets(merged)

    def reportLatestOffset(self) -> dict | None:
        ends = self.planner.current_ends(self.options.topics)
        return _to_offsets({(t, p): e for t, parts in ends.items() for p, (_, e) in parts.items()})

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = _from_offsets(start), _from_offsets(end)
        ranges = []
        for key, end_offset in sorted(stop.items()):
            topic, partition = key
            log_start, _ = self.planner.log_range(topic, partition)
            first = begin.get(key, log_start)
            if first < log_start:
                if not self.options.skip_gaps:
                    check_start(topic, partition, first, log_start, end_offset, False)
                log.warning("skipping a retention gap: %s/%s [%d, %d)", topic, partition,
                            first, log_start)
                first = log_start
            if end_offset > first:
                ranges.append(PartitionRange(topic, partition, first, end_offset))
        chunks = plan(ranges, self.options.max_bytes_per_partition, self.planner.finder)
        return to_partitions(self.options, chunks, self.planner.executor_endpoint())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: brokers keep no consumer state; Spark checkpoints the offsets."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def _to_offsets(offsets: dict[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _from_offsets(offsets: dict | None) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items()
            for p, o in parts.items()}

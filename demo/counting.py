"""Counting what each stage holds: messages in a cluster, audit records, Parquet rows.

:class:`ClusterCounter` walks every partition of the given topics from the start to
its visible end, and on later calls only what was appended since, so the demo can
watch a cluster fill up without re-reading it. Counts are messages (a batch's length),
decoded with the client library like any consumer would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.client import AuditRecord
from broker.common.errors import LogferryError


class ClusterCounter:
    """Messages per topic in one cluster, counted incrementally."""

    def __init__(self, zk: str, topics: Iterable[str], client: Mapping[str, Any] | None = None):
        """``client``: more options of its consumer (``tls=``, ``sasl=``)."""
        from broker.client import SimpleConsumer

        self.topics = list(topics)
        self.consumer = SimpleConsumer(zk=zk, max_bytes=4 * 1024 * 1024, **(client or {}))
        self.positions: dict[tuple[str, int], int] = {}
        self.counts: dict[str, int] = dict.fromkeys(self.topics, 0)
        self.bytes: dict[str, int] = dict.fromkeys(self.topics, 0)

    def _partitions(self, topic: str) -> list[int]:
        try:
            return list(self.consumer.partitions(topic))
        except LogferryError:
            return []  # not created yet in this cluster

    def update(self, max_rounds: int = 1000) -> dict[str, int]:
        """Read what was appended since the last call; return the totals per topic."""
        for topic in self.topics:
            for partition in self._partitions(topic):
                key = (topic, partition)
                offset = self.positions.get(key, 0)
                for _ in range(max_rounds):
                    try:
                        result = self.consumer.fetch(topic, partition, offset, max_wait_ms=0)
                    except LogferryError:
                        break
                    for batch in result.batches:
                        self.counts[topic] += len(batch)
                    self.bytes[topic] += result.next_offset - offset
                    if result.next_offset == offset or result.next_offset >= result.visible_end:
                        offset = result.next_offset
                        break
                    offset = result.next_offset
                self.positions[key] = offset
        return dict(self.counts)

    def values(self, topic: str) -> Iterable[bytes]:
        """Every message value of ``topic`` from the start (for the audit topic)."""
        for partition in self._partitions(topic):
            for message in self.consumer.messages(topic, partition, start="earliest", follow=False):
                yield message.value

    def close(self) -> None:
        self.consumer.close()


@dataclass
class AuditSums:
    """The agents' audit records added up (the paper's section 5)."""

    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    acked: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_host: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    records: int = 0
    windows: set[int] = field(default_factory=set)


def audit_sums(values: Iterable[bytes], stage: str = "agent") -> AuditSums:
    """Sum ``sent``/``acked`` per topic (and per host) over the audit topic's records."""
    sums = AuditSums()
    for value in values:
        record = AuditRecord.decode(value)
        if record is None or record.stage != stage:
            continue
        sums.sent[record.topic] += record.sent
        sums.acked[record.topic] += record.acked
        sums.per_host[(record.host, record.topic)] += record.acked
        sums.windows.add(record.window_start)
        sums.records += 1
    return sums


def parquet_files(root: Path) -> dict[str, list[Path]]:
    """Topic -> the published Parquet files under ``root/topic=<t>/``."""
    files: dict[str, list[Path]] = {}
    for topic_dir in sorted(root.glob("topic=*")):
        topic = topic_dir.name.split("=", 1)[1]
        files[topic] = sorted(
            p
            for p in topic_dir.rglob("*.parquet")
            if not any(part.startswith(("_", ".")) for part in p.relative_to(topic_dir).parts)
        )
    return files


def parquet_rows(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(rows per topic, files per topic), read from the Parquet footers with pyarrow."""
    import pyarrow.parquet as pq  # the demo only: the broker itself never needs pyarrow

    rows: dict[str, int] = {}
    counts: dict[str, int] = {}
    for topic, paths in parquet_files(root).items():
        rows[topic] = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
        counts[topic] = len(paths)
    return rows, counts

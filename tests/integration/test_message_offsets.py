"""Message offsets kept by a real broker process through kill -9 and retention.

The broker writes the segments and their ``.index`` files; after it stops, the log dir is
opened offline and every batch's message offset is checked against what was produced.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from broker.client import Producer, SimpleConsumer
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records

pytestmark = pytest.mark.integration

_COUNT_AT = 10  # a batch header's record count: bytes 10-13 of every magic


def _produce(bootstrap: str, first: int, n: int) -> int:
    sent = 0
    with Producer(brokers=bootstrap) as producer:
        for i in range(first, first + n):
            count = 1 + i % 7
            # 60 s: after a kill -9 the restarted broker leads again only once ZooKeeper
            # has expired the killed process's session (6 s), later on a busy machine
            producer.send("mo", [b"mo-%d-%d-" % (i, j) + b"y" * 60 for j in range(count)], partition=0).wait(60)
            sent += count
    return sent


def _batches(directory: Path, plog: PartitionLog) -> list[tuple[int, int]]:
    """(byte offset, count) of every batch in the log, read from its segment files."""
    out = []
    for seg in plog.segments:
        data = seg.read(0, seg.size)
        for pos, raw in records.iter_raw_batches(data):
            out.append((seg.base_offset + pos, struct.unpack_from(">I", raw, _COUNT_AT)[0]))
    return out


def test_message_offsets_survive_kill_9_and_retention(broker_cluster):
    cluster = broker_cluster(
        1, broker={"retention_check_ms": 200}, log={"segment_bytes": 4096, "retention_bytes": 20000}
    )
    broker = cluster.brokers[0]
    produced = _produce(cluster.bootstrap, 0, 80)
    broker.kill()  # the active segment's index on disk is stale now
    broker.start()
    produced += _produce(cluster.bootstrap, 80, 120)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        deadline = time.monotonic() + 15
        start, end = consumer.offsets("mo", 0)
        while (start == 0 or end - start > 20000) and time.monotonic() < deadline:
            time.sleep(0.1)
            start, end = consumer.offsets("mo", 0)
        assert start > 0, "retention deleted nothing"
        retained = sum(1 for _ in consumer.messages("mo", 0))
    broker.kill()
    broker.start()  # recovery after a second kill -9, with retention behind it
    broker.stop()
    directory = broker.log_dir / "mo-0"
    assert sorted(p.stem for p in directory.glob("*.index")) == sorted(p.stem for p in directory.glob("*.log"))
    plog = PartitionLog(directory, "mo", 0, LogConfig(segment_bytes=4096), recover=False)
    try:
        assert plog.end_message == produced
        assert plog.start_message == produced - retained > 0
        message = plog.start_message
        for offset, count in _batches(directory, plog):
            assert plog.message_offset_at(offset) == message
            assert plog.batch_for_message(message + count - 1) == (offset, count - 1)
            message += count
        assert message == produced
    finally:
        plog.close()

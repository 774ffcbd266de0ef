"""The idempotent producer without sockets: the magic 2 batch format, the partition's
producer state (duplicate, gap, fencing, epochs), its rebuild from the log and its
snapshots, and the sender's numbering and retries against a fake cluster."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.client.accumulator import Accumulator
from broker.client.idempotence import MAX_EPOCH, ProducerSequences
from broker.client.sender import RetryPolicy, Sender
from broker.common.errors import (
    CorruptBatchError,
    NotLeaderError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    error_for_code,
)
from broker.storage import producer_snapshots
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.storage.producer_state import ProducerStateTable
from broker.wire import protocol, records
from broker.wire.producer_id import parse_init_producer_id_answer

PID = 7 << 32


def v2(seq: int, n: int = 3, pid: int = PID, epoch: int = 0, codec: int = 0, tag: int = 0) -> bytes:
    return records.encode_batch(
        [b"%d-%d-%d" % (tag, seq, j) for j in range(n)], None, 1_000, codec, producer=(pid, epoch, seq)
    )


def infos(data: bytes) -> list[records.ProducerInfo]:
    scan = records.validate_message_set(data)
    assert scan.producers is not None
    return scan.producers


# -- the format ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [records.CODEC_NONE, records.CODEC_GZIP, records.CODEC_ZSTD])
@pytest.mark.parametrize("n", [1, 200])  # the small-batch and the reused-packer paths
def test_magic_2_round_trips_beside_magic_1(codec: int, n: int) -> None:
    old = records.encode_batch([b"old"] * n, [b"k"] * n, 5, codec)
    new = v2(41, n, codec=codec)
    data = old + new + old
    scan = records.validate_message_set(data)
    assert scan.batches == 3 and scan.messages == 3 * n
    assert scan.producers == [records.ProducerInfo(len(old), PID, 0, 41, n, len(new))]
    batches, used = records.decode_batches(data, 100)
    assert used == len(data)
    assert [b.producer_id for b in batches] == [records.NO_PRODUCER, PID, records.NO_PRODUCER]
    assert batches[1].values == [b"0-41-%d" % j for j in range(n)]
    assert (batches[1].producer_epoch, batches[1].base_sequence) == (0, 41)
    assert batches[1].offset == 100 + len(old) and batches[1].next_offset == 100 + len(old) + len(new)
    assert records.count_messages(data) == (3, 3 * n)
    assert records.BATCH_HEADER.unpack_from(new)[1] == records.MAGIC_V2
    assert records.walk_producers(data) == (scan.producers, len(data))


def test_magic_2_fields_are_covered_by_the_crc_and_kept_by_compression() -> None:
    new = bytearray(v2(5))
    new[records.HEADER_SIZE + 11] ^= 1  # a bit of base_sequence
    assert "CRC" in (records.scan(new).error or "")
    with pytest.raises(CorruptBatchError):
        records.decode_batches(bytes(new), 0)
    plain = v2(9, 50)
    packed = records.compress_batch(plain, records.CODEC_ZSTD)
    [batch], _ = records.decode_batches(packed, 0)
    assert (batch.producer_id, batch.base_sequence, batch.codec) == (PID, 9, records.CODEC_ZSTD)
    assert infos(bytes(packed))[0].count == 50


def test_a_magic_2_header_shorter_than_its_fields_is_malformed() -> None:
    good = v2(0, 1)
    bad = bytearray(good[: records.HEADER_SIZE])
    bad[0:4] = (records.HEADER_SIZE - 4).to_bytes(4, "big")
    assert "malformed" in (records.scan(bytes(bad)).error or "")


# -- the partition's state -------------------------------------------------------------


def test_next_batches_append_and_a_retry_is_held_at_its_first_offset() -> None:
    table = ProducerStateTable("t-0")
    b0, b1 = v2(0), v2(3)
    assert table.check(infos(b0), 0) is None
    table.record(infos(b0), 0)
    assert table.check(infos(b1), len(b0)) is None
    table.record(infos(b1), len(b0))
    held = table.check(infos(b1), 999)
    assert held is not None and (held.offset, held.nbytes, held.messages) == (len(b0), len(b1), 3)
    held = table.check(infos(b0 + b1), 999)  # a retried request of two batches
    assert held is not None and held.offset == 0 and held.nbytes == len(b0) + len(b1)


def test_a_set_whose_first_batches_are_held_appends_only_the_rest() -> None:
    table = ProducerStateTable("t-0")
    b0, b1, b2 = v2(0), v2(3), v2(6)
    table.record(infos(b0 + b1), 0)
    data = b1 + b2
    held = table.check(infos(data), 500)
    assert held is not None and held.offset == len(b0) and held.nbytes == len(b1)
    rest, producers = held.rest(memoryview(data), infos(data))
    assert bytes(rest) == b2 and producers == infos(b2)


def test_a_gap_is_refused() -> None:
    table = ProducerStateTable("t-0")
    table.record(infos(v2(0)), 0)
    with pytest.raises(OutOfOrderSequenceError, match="expects 3"):
        table.check(infos(v2(4)), 10)
    with pytest.raises(OutOfOrderSequenceError, match="not consecutive"):
        table.check(infos(v2(3) + v2(7)), 10)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(infos(v2(3) + v2(0)), 10)  # a held batch after a new one
    with pytest.raises(OutOfOrderSequenceError, match="already has after"):
        table.check(infos(v2(0, pid=PID + 1) + v2(0)), 10)  # another producer's, then held


def test_an_older_epoch_is_fenced_and_a_newer_one_starts_at_zero() -> None:
    table = ProducerStateTable("t-0")
    table.record(infos(v2(0, epoch=2)), 0)
    with pytest.raises(ProducerFencedError):
        table.check(infos(v2(3, epoch=1)), 10)
    with pytest.raises(OutOfOrderSequenceError, match="not 0"):
        table.check(infos(v2(3, epoch=3)), 10)
    assert table.check(infos(v2(0, epoch=3)), 10) is None
    # an epoch bump inside one set (old batches retried, then new ones)
    assert table.check(infos(v2(3, epoch=2) + v2(0, epoch=3)), 10) is None


def test_copied_batches_are_deduplicated_but_never_refused() -> None:
    table = ProducerStateTable("t-0")
    b0 = v2(0, epoch=2)
    table.record(infos(b0), 0)
    held = table.check(infos(b0 + v2(9, epoch=2)), 100, strict=False)
    assert held is not None and held.offset == 0 and held.nbytes == len(b0)
    assert table.check(infos(v2(9, epoch=2)), 100, strict=False) is None  # a gap: the source skipped
    assert table.check(infos(v2(3, epoch=1)), 100, strict=False) is None  # an older epoch
    table.record(infos(v2(9, epoch=2)), 100)
    assert table.check(infos(v2(12, epoch=2)), 200) is None  # strict again from there


def test_produce_requests_name_their_copied_parts() -> None:
    from broker.wire.produce import ProducePart, encode_produce_request, parse_produce_request

    fields = encode_produce_request(1, [ProducePart("t", 0, 0), ProducePart("t", 1, 0)], [1])
    assert parse_produce_request({**fields, "id": 1}, memoryview(b"")).copies == {1}
    assert parse_produce_request({"acks": 1, "parts": []}, memoryview(b"")).copies == frozenset()
    with pytest.raises(Exception, match="copies"):
        parse_produce_request({"acks": 1, "parts": [], "copies": "x"}, memoryview(b""))


def test_unknown_producers_and_plain_batches_are_appended() -> None:
    table = ProducerStateTable("t-0")
    assert table.check(infos(v2(12345)), 0) is None  # state expired, or a mirror's copy
    assert table.check(infos(v2(0, pid=records.NO_PRODUCER)), 0) is None


def test_only_the_last_five_batches_are_remembered_and_sequences_wrap() -> None:
    table = ProducerStateTable("t-0")
    seq = records.SEQUENCE_MODULUS - 6
    offset = 0
    for _ in range(6):
        b = v2(seq)
        table.record(infos(b), offset)
        offset += len(b)
        seq = (seq + 3) % records.SEQUENCE_MODULUS
    assert seq == 12
    assert table.check(infos(v2(12)), offset) is None
    assert len(table.producers[PID].batches) == 5
    with pytest.raises(OutOfOrderSequenceError):  # the sixth-newest is forgotten
        table.check(infos(v2(records.SEQUENCE_MODULUS - 6)), offset)


def test_snapshot_round_trip_truncation_and_expiry() -> None:
    table = ProducerStateTable("t-0")
    table.record(infos(v2(0)), 0)
    table.record(infos(v2(0, pid=PID + 1)), 100)
    table.record(infos(v2(3)), 200)
    copy, at = ProducerStateTable.from_bytes(table.to_bytes(300), "t-0")
    assert at == 300 and copy.check(infos(v2(3)), 300).offset == 200  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        ProducerStateTable.from_bytes(b"\x93garbage", "t-0")
    copy.truncate_to(200)
    assert copy.check(infos(v2(3)), 200) is None
    assert copy.expire_before(50) == 1 and list(copy.producers) == [PID + 1]


# -- the log: rebuilt on load, kept across truncation ---------------------------------


def open_log(path: Path, recover: bool = False, **config: int) -> PartitionLog:
    return PartitionLog(path / "t-0", "t", 0, LogConfig(**config), recover)


def append(plog: PartitionLog, data: bytes) -> int:
    scan = records.validate_message_set(data)
    return plog.append(data, scan.messages, scan.producers)


@pytest.mark.parametrize("clean", [True, False])
def test_the_state_is_rebuilt_from_the_log_on_load(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, segment_bytes=300)
    offsets = [append(plog, v2(seq)) for seq in range(0, 30, 3)]
    assert len(plog.segments) > 2
    plog.flush()
    if clean:
        plog.close()  # writes a snapshot at the end
    else:
        for seg in plog.segments:
            seg.close()
        for snap in producer_snapshots.list_snapshots(plog.directory):
            snap[1].unlink()  # no snapshot at all: only the tail is walked
    again = open_log(tmp_path, recover=not clean, segment_bytes=300)
    held = again.check_producers(infos(v2(27)))
    assert held is not None and held.offset == offsets[-1]
    with pytest.raises(OutOfOrderSequenceError):
        again.check_producers(infos(v2(33)))
    assert again.check_producers(infos(v2(30))) is None
    again.close()


def test_a_stale_snapshot_past_the_log_end_is_ignored(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    first = append(plog, v2(0))
    append(plog, v2(3))
    plog.close()
    # the log lost its last batch (a crash before the fsync) but the snapshot was kept
    [(at, path)] = producer_snapshots.list_snapshots(plog.directory)
    seg = plog.directory / "00000000000000000000.log"
    with open(seg, "r+b") as f:
        f.truncate(len(v2(0)))
    again = open_log(tmp_path, recover=True)
    assert not path.exists()
    assert again.check_producers(infos(v2(0))).offset == first  # type: ignore[union-attr]
    assert again.check_producers(infos(v2(3))) is None  # not held: it is appended again
    again.close()


def test_a_clean_start_without_a_snapshot_walks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plog = open_log(tmp_path)
    end = len(records.encode_batch([b"plain"], None, 1))
    append(plog, records.encode_batch([b"plain"], None, 1))  # no idempotent producer: no snapshot
    plog.close()
    assert producer_snapshots.list_snapshots(plog.directory) == []
    walked_from: list[int] = []
    real = producer_snapshots.walk_segments

    def spy(table, segments, start):
        walked_from.append(start)
        return real(table, segments, start)

    monkeypatch.setattr(producer_snapshots, "walk_segments", spy)
    open_log(tmp_path).close()
    open_log(tmp_path, recover=True).close()
    assert walked_from == [end, 0]  # clean: from the end (nothing); after a crash: the tail


def test_the_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.storage import producer_state

    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 3)
    table = ProducerStateTable("t-0")
    for i in range(5):
        table.record(infos(v2(0, pid=PID + i)), 100 * i)
    assert sorted(table.producers) == [PID + 2, PID + 3, PID + 4]


def test_truncation_forgets_the_cut_batches(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, v2(0))
    cut_at = append(plog, v2(3))
    plog.truncate_to(cut_at)
    assert plog.check_producers(infos(v2(3))) is None
    plog.close()


# -- the client: numbering, retries, resets --------------------------------------------


class FakeConnection:
    address = ("h", 1)

    def __init__(self) -> None:
        self.requests: list = []

    def request(self, api, fields, payload, expect_response=True, callback=None):
        future = SimpleNamespace(error=None, frame=None, done=lambda: False)
        self.requests.append((api, fields, [bytes(p) for p in payload], future, callback))
        return future


class FakeCluster:
    def __init__(self) -> None:
        self.conn = FakeConnection()
        self.ids = iter(range(100, 200))

    def leader_address(self, topic, partition):
        return ("h", 1)

    def connection(self, address):
        return self.conn

    def forget(self, topic):
        pass

    def call_any(self, api, fields):
        assert api == protocol.INIT_PRODUCER_ID
        return SimpleNamespace(header={"id": 1, "err": 0, "producer_id": next(self.ids), "epoch": 0})


def setup_sender():
    now = [10.0]
    acc = Accumulator(
        linger=0.0,
        batch_bytes=1 << 20,
        batch_messages=2,
        buffer_bytes=1 << 20,
        block_timeout=0.0,
        max_request_bytes=1 << 20,
        clock=lambda: now[0],
    )
    cluster = FakeCluster()
    sender = Sender(
        acc,
        cluster,
        acks=-1,
        codec=records.CODEC_NONE,
        request_timeout=30.0,
        max_request_bytes=1 << 20,
        retry=RetryPolicy(None, 0.1, 120.0, rng=lambda: 0.0),
        clock=lambda: now[0],
        idempotent=True,
    )
    return acc, cluster, sender, now


def answer(request, parts) -> None:
    _, _, _, future, callback = request
    future.frame = SimpleNamespace(header={"err": 0, "parts": parts})
    callback(future)


def fields_of(payload: list[bytes]) -> list[tuple[int, int, int, int]]:
    return [(p.producer_id, p.epoch, p.base_sequence, p.count) for p in infos(b"".join(payload))]


def test_the_sender_numbers_batches_per_partition_and_retries_the_same_bytes() -> None:
    acc, cluster, sender, now = setup_sender()
    f1 = acc.append(("t", 0), [b"a", b"b", b"c"], 3, None, 5)  # two batches: 2 + 1
    acc.append(("t", 1), [b"x"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    first = cluster.conn.requests[0]
    assert fields_of(first[2][:2]) == [(100, 0, 0, 2), (100, 0, 2, 1)]
    assert fields_of(first[2][2:]) == [(100, 0, 0, 1)]
    answer(first, [["t", 0, NotLeaderError.code, None, "moved"], ["t", 1, 0, 0, None]])
    now[0] += 1
    sender.send(acc.ready(now[0])[0])
    retry = cluster.conn.requests[1]
    assert retry[2] == first[2][:2]  # the same bytes, the same sequences
    answer(retry, [["t", 0, 0, 64, None]])
    assert f1.wait(0) is not None
    acc.append(("t", 0), [b"d"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    assert fields_of(cluster.conn.requests[2][2]) == [(100, 0, 3, 1)]


def test_a_batch_failed_for_good_restarts_the_sequences_in_a_new_epoch() -> None:
    acc, cluster, sender, now = setup_sender()
    failed = acc.append(("t", 0), [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    answer(cluster.conn.requests[0], [["t", 0, OutOfOrderSequenceError.code, None, "gap"]])
    with pytest.raises(OutOfOrderSequenceError):
        failed.wait(0)
    acc.append(("t", 0), [b"b"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    assert fields_of(cluster.conn.requests[1][2]) == [(100, 1, 0, 1)]
    acc.append(("t", 0), [b"c"], 1, None, 5)
    answer(cluster.conn.requests[1], [["t", 0, ProducerFencedError.code, None, "fenced"]])
    acc.append(("t", 0), [b"d"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    assert fields_of(cluster.conn.requests[2][2]) == [(101, 0, 0, 1)]  # a new id


def test_raw_batches_are_sent_as_they_are_and_marked_as_copies() -> None:
    acc, cluster, sender, now = setup_sender()
    copied = v2(40, pid=PID)
    acc.append_raw(("t", 0), copied, 3)
    acc.append(("t", 1), [b"own"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    _, fields, payload, _, _ = cluster.conn.requests[0]
    assert payload[0] == copied and fields["copies"] == [0]
    assert fields_of(payload[1:]) == [(100, 0, 0, 1)]


def test_a_broker_without_producer_ids_gets_plain_batches() -> None:
    acc, cluster, sender, now = setup_sender()

    def unsupported(api, fields):
        raise error_for_code(2, "unsupported api 12")

    cluster.call_any = unsupported
    acc.append(("t", 0), [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    [batch], _ = records.decode_batches(cluster.conn.requests[0][2][0], 0)
    assert batch.producer_id == records.NO_PRODUCER and sender.sequences is None


def test_sequences_bump_to_a_new_id_at_the_last_epoch() -> None:
    seqs = ProducerSequences()
    seqs.set_id(5, MAX_EPOCH)
    assert seqs.assign(("t", 0), 10) == (5, MAX_EPOCH, 0)
    seqs.reset()
    assert seqs.needs_id


def test_wire_pieces() -> None:
    assert isinstance(error_for_code(40), OutOfOrderSequenceError)
    assert isinstance(error_for_code(41), ProducerFencedError)
    assert parse_init_producer_id_answer({"producer_id": 3, "epoch": 0}) == (3, 0)
    assert protocol.API_NAMES[protocol.INIT_PRODUCER_ID] == "init_producer_id"

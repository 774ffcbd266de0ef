"""Kafka transactions, sans IO: the coordinator's state machine, the markers, and the
per-partition index of open and aborted transactions (the last stable offset), also
as rebuilt from a log after a crash and a clean stop."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import msgpack
import pytest
from kio.schema.errors import ErrorCode

from broker.common.errors import ControlBatchRefusedError, ProducerFencedError
from broker.server.kafka import convert
from broker.server.kafka.record_batch import CRC_START, encode_record_batch
from broker.server.kafka.txn_markers import marker_batch
from broker.server.kafka.txn_state import MAX_EPOCH, TxnError, TxnMetadata, TxnState, check_timeout
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.storage.producer_state import ProducerStateTable
from broker.storage.txn_index import AbortedTxn, TxnIndex
from broker.wire import kafka_batch, records

PID = 7 << 32


# -- the coordinator's state machine -------------------------------------------------------


def fresh() -> TxnMetadata:
    return TxnMetadata("tid", PID, 3, 60_000)


def code_of(call: object) -> ErrorCode:
    with pytest.raises(TxnError) as caught:
        call()  # type: ignore[operator]
    return caught.value.code


def test_a_transaction_goes_ongoing_prepare_complete() -> None:
    meta = fresh()
    meta.add(PID, 3, 1000, {("t", 0)}, None)
    meta.add(PID, 3, 1100, {("t", 1)}, "g")
    assert meta.state is TxnState.ONGOING and meta.partitions == {("t", 0), ("t", 1)} and meta.groups == {"g"}
    assert meta.started_ms == 1000  # the first add starts the clock
    assert meta.end(PID, 3, True, 1200) is True and meta.state is TxnState.PREPARE_COMMIT
    # while markers are written, nothing else may happen
    assert code_of(lambda: meta.add(PID, 3, 1300, {("t", 2)}, None)) == ErrorCode.concurrent_transactions
    assert code_of(lambda: meta.end(PID, 3, True, 1300)) == ErrorCode.concurrent_transactions
    meta.complete(1400)
    assert meta.state is TxnState.COMPLETE_COMMIT and not meta.partitions and meta.started_ms == -1
    assert meta.end(PID, 3, True, 1500) is False  # a client's retry: success, nothing to do
    assert code_of(lambda: meta.end(PID, 3, False, 1500)) == ErrorCode.invalid_txn_state
    meta.add(PID, 3, 1600, {("t", 0)}, None)  # the next transaction
    assert meta.state is TxnState.ONGOING and meta.partitions == {("t", 0)} and meta.started_ms == 1600


def test_other_producers_and_old_epochs_are_refused() -> None:
    meta = fresh()
    assert code_of(lambda: meta.add(PID + 1, 3, 0, set(), "g")) == ErrorCode.invalid_producer_id_mapping
    assert code_of(lambda: meta.add(PID, 2, 0, set(), "g")) == ErrorCode.producer_fenced
    assert code_of(lambda: meta.add(PID, 4, 0, set(), "g")) == ErrorCode.invalid_producer_epoch
    assert code_of(lambda: meta.end(PID, 3, True, 0)) == ErrorCode.invalid_txn_state  # Empty: nothing to end
    assert meta.state is TxnState.EMPTY


def test_timeout_and_fencing_abort_with_a_new_epoch() -> None:
    meta = fresh()
    meta.add(PID, 3, 1000, {("t", 0)}, None)
    assert not meta.expired(61_000) and meta.expired(61_001)
    meta.fence_and_abort(61_001)
    assert meta.state is TxnState.PREPARE_ABORT and meta.epoch == 4 and meta.partitions == {("t", 0)}
    assert code_of(lambda: meta.end(PID, 3, True, 0)) == ErrorCode.producer_fenced
    meta.complete(62_000)
    assert meta.state is TxnState.COMPLETE_ABORT and not meta.expired(10**9)
    meta.epoch = MAX_EPOCH
    meta.bump_epoch(PID + 9)
    assert (meta.producer_id, meta.epoch) == (PID + 9, 0)


def test_state_survives_its_json() -> None:
    meta = fresh()
    meta.add(PID, 3, 1000, {("a/b", 0), ("t", 4)}, "g")
    again = TxnMetadata.from_json("tid", meta.to_json())
    assert again == meta
    with pytest.raises(ValueError, match="tid"):
        TxnMetadata.from_json("tid", b'{"producer_id": 1}')
    check_timeout(900_000)
    for bad in (0, -1, 900_001):
        with pytest.raises(TxnError, match="transaction.timeout.ms"):
            check_timeout(bad)


# -- markers and transactional batches in the log ------------------------------------------


def txn_data(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    """A transactional record batch v2 stored as a Kafka producer's (magic 3)."""
    raw = bytearray(encode_record_batch(0, len(values) - 1, 1000, None, None, list(values)))
    struct.pack_into(">qhi", raw, kafka_batch.PRODUCER_AT, pid, epoch, seq)
    struct.pack_into(">h", raw, 21, kafka_batch.TRANSACTIONAL)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    return bytes(convert.store_batches(bytes(raw)))


def test_a_marker_is_one_transactional_control_batch() -> None:
    commit, abort = bytes(marker_batch(PID, 2, True)), bytes(marker_batch(PID, 2, False))
    data = txn_data(PID, 2, 0, [b"a", b"b"])
    scan = records.validate_message_set(data + commit + abort)
    assert scan.messages == 4  # a marker takes one message offset, as in Kafka
    assert scan.txns == [
        records.TxnInfo(0, PID, 2, records.TXN_DATA),
        records.TxnInfo(len(data), PID, 2, kafka_batch.CONTROL_COMMIT),
        records.TxnInfo(len(data) + len(commit), PID, 2, kafka_batch.CONTROL_ABORT),
    ]
    assert scan.producers is not None and [p.position for p in scan.producers] == [0]  # markers carry no sequence
    # native clients see no message in a marker
    batches, _ = records.decode_batches(commit, 0)
    assert batches[0].values == [] and batches[0].producer_id == PID
    # a Kafka client may not write markers itself: the produce path refuses them
    with pytest.raises(ControlBatchRefusedError):
        convert.store_batches(bytes(commit[records.KAFKA_AT :]))


def test_the_index_tracks_open_and_aborted_transactions() -> None:
    index = TxnIndex()
    D, C, A = records.TXN_DATA, kafka_batch.CONTROL_COMMIT, kafka_batch.CONTROL_ABORT
    index.record([records.TxnInfo(0, 1, 0, D), records.TxnInfo(100, 2, 0, D), records.TxnInfo(150, 1, 0, D)], 1000)
    assert index.open == {1: 1000, 2: 1100} and index.first_unstable() == 1000
    index.record([records.TxnInfo(0, 1, 0, A)], 1200)  # producer 1 aborts
    assert index.first_unstable() == 1100 and index.aborted == [AbortedTxn(1, 1000, 1200)]
    index.record([records.TxnInfo(0, 2, 0, C)], 1300)  # producer 2 commits
    assert index.first_unstable() is None and index.aborted == [AbortedTxn(1, 1000, 1200)]
    index.record([records.TxnInfo(0, 3, 0, C)], 1400)  # a marker with no data here: nothing
    assert index.first_unstable() is None
    assert index.aborted_overlapping(0, 1000) == []
    assert index.aborted_overlapping(0, 1001) == [AbortedTxn(1, 1000, 1200)]
    assert index.aborted_overlapping(1200, 5000) == [AbortedTxn(1, 1000, 1200)]
    assert index.aborted_overlapping(1201, 5000) == []
    again = TxnIndex.from_state(index.to_state())
    assert again.open == index.open and again.aborted == index.aborted
    # cut below both markers: both transactions are open again
    index.truncate_to(1150)
    assert index.open == {1: 1000, 2: 1100} and index.aborted == []
    again.expire_before(1201)
    assert again.aborted == []


def open_log(path: Path, recover: bool = False) -> PartitionLog:
    return PartitionLog(path / "t-0", "t", 0, LogConfig(segment_bytes=400), recover)


def append(plog: PartitionLog, data: bytes) -> int:
    scan = records.validate_message_set(data)
    if scan.producers:
        assert plog.check_producers(scan.producers) is None
    return plog.append(data, scan.messages, scan.producers, scan.txns)


@pytest.mark.parametrize("clean", [True, False])
def test_the_index_is_rebuilt_from_the_log(tmp_path: Path, clean: bool) -> None:
    """After a clean stop (snapshot) and after a crash (snapshot at a roll, plus a walk
    of the headers after it) the same transactions are open and aborted."""
    plog = open_log(tmp_path)
    a1 = append(plog, txn_data(PID, 0, 0, [b"x" * 50] * 2))
    append(plog, txn_data(PID + 1, 0, 0, [b"y" * 50]))
    abort = append(plog, bytes(marker_batch(PID, 0, False)))
    for seq in range(1, 6):  # rolls segments: snapshots on the way
        append(plog, txn_data(PID + 1, 0, seq, [b"z" * 80]))
    open_at = append(plog, txn_data(PID, 1, 0, [b"w"]))  # a new epoch after the abort
    append(plog, bytes(marker_batch(PID + 1, 0, True)))
    assert len(plog.segments) > 2
    before = (dict(plog.producers.txns.open), list(plog.producers.txns.aborted))
    assert before == ({PID: open_at}, [AbortedTxn(PID, a1, abort)])
    plog.flush()
    if clean:
        plog.close()
    again = open_log(tmp_path, recover=not clean)
    assert (dict(again.producers.txns.open), list(again.producers.txns.aborted)) == before
    assert again.producers.txns.first_unstable() == open_at
    again.close()


def test_a_marker_from_a_newer_epoch_fences_the_older_one(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, txn_data(PID, 0, 0, [b"a"]))
    append(plog, bytes(marker_batch(PID, 1, False)))  # the coordinator aborted with epoch 1
    zombie = records.validate_message_set(txn_data(PID, 0, 1, [b"b"]))
    assert zombie.producers is not None
    with pytest.raises(ProducerFencedError):
        plog.check_producers(zombie.producers)
    fresh_epoch = records.validate_message_set(txn_data(PID, 1, 0, [b"c"]))
    assert fresh_epoch.producers is not None and plog.check_producers(fresh_epoch.producers) is None
    plog.close()


def test_a_snapshot_from_before_transactions_still_loads() -> None:
    old = msgpack.packb({"v": 1, "offset": 10, "producers": [[PID, 0, [[0, 4, 0]]]]}, use_bin_type=True)
    loaded, offset = ProducerStateTable.from_bytes(old, "t-0")
    assert offset == 10 and list(loaded.producers) == [PID] and not loaded.txns

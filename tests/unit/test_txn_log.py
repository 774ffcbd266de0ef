"""The transaction coordinator's state log as records (broker/server/kafka/txn_log.py):
the last record of an id wins, a tombstone forgets it, a snapshot followed by later
records replays to the same states whether the log starts before it or at it, and the
bytes can come whole, cut anywhere, or one at a time."""

from __future__ import annotations

import pytest

from broker.common.errors import CorruptBatchError
from broker.server.kafka import txn_log
from broker.server.kafka.txn_log import TOMBSTONE, Replay, encode_records, partition_for, replay, snapshot_batches
from broker.server.kafka.txn_state import TxnMetadata, TxnState


def state(txn_id: str, epoch: int, status: TxnState = TxnState.EMPTY) -> bytes:
    return TxnMetadata(txn_id, 7, epoch, 60_000, status, updated_ms=1).to_json()


def test_the_last_record_of_an_id_wins_and_a_tombstone_forgets_it() -> None:
    log = (
        encode_records([("a", state("a", 0)), ("b", state("b", 0))], 1)
        + encode_records([("a", state("a", 1, TxnState.ONGOING))], 2)
        + encode_records([("b", TOMBSTONE), ("c", state("c", 3))], 3)
    )
    states = replay(log)
    assert states == {"a": state("a", 1, TxnState.ONGOING), "c": state("c", 3)}
    assert TxnMetadata.from_json("a", states["a"]).state is TxnState.ONGOING


def test_bytes_cut_anywhere_or_one_at_a_time_replay_alike() -> None:
    log = b"".join(encode_records([(f"id-{i}", state(f"id-{i}", i))], i) for i in range(20))
    whole = replay(log)
    rebuilt = Replay(1000)
    pending = b""
    for byte in log:  # one byte at a time: a batch is applied once whole
        pending += bytes([byte])
        pending = pending[rebuilt.feed(pending) :]
    assert pending == b"" and rebuilt.states == whole and rebuilt.offset == 1000 + len(log)
    assert rebuilt.records == 20
    cut = Replay(0)
    used = cut.feed(log[:-5])  # the last batch cut: left for the next read
    assert used < len(log) - 5 + 1 and len(cut.states) == 19


def test_a_corrupt_batch_is_an_error_not_a_state() -> None:
    log = bytearray(encode_records([("a", state("a", 0))], 1))
    log[-3] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        replay(bytes(log))


def test_a_snapshot_replays_to_the_same_states_from_before_or_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(txn_log, "SNAPSHOT_BATCH_BYTES", 2000)  # several batches
    history = b"".join(
        encode_records([(f"id-{i % 50}", state(f"id-{i % 50}", i)), (f"gone-{i}", TOMBSTONE)], i) for i in range(400)
    )
    states = replay(history)
    snapshot = list(snapshot_batches(states, 5))
    assert len(snapshot) > 1
    later = encode_records([("id-3", TOMBSTONE), ("id-4", state("id-4", 999))], 6)
    expected = dict(states)
    del expected["id-3"]
    expected["id-4"] = state("id-4", 999)
    assert replay(history + b"".join(snapshot) + later) == expected  # the log start not moved yet
    assert replay(b"".join(snapshot) + later) == expected  # moved to the snapshot
    assert list(snapshot_batches({}, 5)) == []


def test_an_id_always_maps_to_the_same_partition() -> None:
    ids = [f"producer-{i}" for i in range(200)]
    partitions = [partition_for(i, 8) for i in ids]
    assert partitions == [partition_for(i, 8) for i in ids]
    assert set(partitions) == set(range(8))  # spread over all of them

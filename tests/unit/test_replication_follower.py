"""A follower applying what its replica fetches brought back, on a real partition log:
appending, ignoring answers the role has moved past, reconciling a diverged tail,
and the errors that move the fetch position."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from broker.common.errors import OffsetOutOfRangeError, UnknownError
from broker.coordination.partition_state import PartitionState
from broker.replication.follower import FollowerApplier
from broker.replication.roles import FOLLOWER, Replica
from broker.replication.services import ReplicationServices
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records
from broker.wire.fetch import ReplicaFetchAnswerPart, encode_fetch_answer, parse_fetch_answer

EPOCH = 4


def _batch(value: bytes) -> bytes:
    return records.encode_batch([value] * 3, None, 1_700_000_000_000)


_opened: list[PartitionLog] = []
"""The logs a test opened, closed after it (their segment files with them)."""


@pytest.fixture(autouse=True)
def _close_logs() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def _follower(tmp_path) -> tuple[FollowerApplier, Replica, list, Counter]:
    copied: list = []
    truncated: Counter = Counter()
    unused = SimpleNamespace()
    services = ReplicationServices(
        config=unused,
        logs=unused,
        admin_pool=unused,  # type: ignore[arg-type]
        fsync_pool=unused,
        isr_changes=Counter(),  # type: ignore[arg-type]
        truncated_bytes=truncated,
        wake_consumers=lambda key: None,
        wake_fetchers=lambda key: None,
        replicated_in=lambda *args: copied.append(args),
    )
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    _opened.append(plog)
    replica = Replica(("t", 0), plog)
    replica.replicas = [1, 2]
    replica.role = FOLLOWER
    replica.state = PartitionState(1, EPOCH, (1, 2), 55)
    return FollowerApplier(services), replica, copied, truncated


def _answer(
    code: int = 0, start: int = 0, hw: int = 0, data: bytes = b"", leo: int = 0, message: str = ""
) -> ReplicaFetchAnswerPart:
    return ReplicaFetchAnswerPart("t", 0, code, message, start, hw, len(data), leo)


def test_fetched_batches_are_appended_as_they_are(tmp_path):
    applier, replica, copied, _ = _follower(tmp_path)
    data = _batch(b"a") + _batch(b"b")
    applier.on_fetched(replica, EPOCH, 0, _answer(hw=len(data) - 1, data=data, leo=len(data)), memoryview(data))
    assert replica.plog.read_bytes(0, len(data)) == data
    assert copied == [(("t", 0), len(data), 6)]
    replica.plog.flush()
    assert replica.plog.visible_end == len(data) - 1  # capped by the leader's high watermark
    assert applier.fetch_position(replica) == len(data)


def test_an_answer_from_another_epoch_or_offset_is_ignored(tmp_path):
    applier, replica, copied, _ = _follower(tmp_path)
    data = _batch(b"a")
    applier.on_fetched(replica, EPOCH - 1, 0, _answer(data=data, leo=len(data)), memoryview(data))
    applier.on_fetched(replica, EPOCH, 7, _answer(data=data, leo=len(data)), memoryview(data))
    assert replica.plog.end_offset == 0 and copied == []


def test_a_diverged_tail_is_cut_where_the_leader_differs(tmp_path):
    applier, replica, copied, truncated = _follower(tmp_path)
    common, mine, theirs = _batch(b"same"), _batch(b"mine"), _batch(b"theirs")
    replica.plog.append(common + mine, 6)
    replica.reconcile_at = 0
    leader = common + theirs
    applier.on_fetched(replica, EPOCH, 0, _answer(data=leader, leo=len(leader)), memoryview(leader))
    assert replica.plog.end_offset == len(common)
    assert truncated[()] == len(mine)
    assert replica.reconcile_at is None and copied == []


def test_a_leader_whose_log_starts_past_ours_restarts_the_log_there(tmp_path):
    applier, replica, _, _ = _follower(tmp_path)
    applier.on_fetched(
        replica, EPOCH, 0, _answer(code=OffsetOutOfRangeError.code, start=5000, leo=9000), memoryview(b"")
    )
    assert replica.plog.start_offset == replica.plog.end_offset == 5000
    assert applier.fetch_position(replica) == 5000


def test_other_errors_retry_after_a_pause(tmp_path):
    applier, replica, _, _ = _follower(tmp_path)
    applier.on_fetched(replica, EPOCH, 0, _answer(code=UnknownError.code, message="boom"), memoryview(b""))
    assert replica.retry_at > 0 and replica.plog.end_offset == 0


def test_a_leaders_start_inside_a_segment_moves_the_followers_start(tmp_path):
    """Records deleted up to a message on the leader (Kafka's DeleteRecords): its
    answers carry the start's message offset and the follower hides the same records."""
    applier, replica, _, _ = _follower(tmp_path)
    data = _batch(b"a") + _batch(b"b") + _batch(b"c")
    second = len(_batch(b"a"))
    answer = _answer(start=second, hw=len(data), data=data, leo=len(data))._replace(
        start_message=4, start_batch_message=3
    )
    applier.on_fetched(replica, EPOCH, 0, answer, memoryview(data))
    assert (replica.plog.start_offset, replica.plog.start_message) == (second, 4)
    empty = _answer(start=second, hw=len(data), leo=len(data))._replace(start_message=2, start_batch_message=0)
    applier.on_fetched(replica, EPOCH, len(data), empty, memoryview(b""))
    assert replica.plog.start_message == 4  # behind its own start: kept


def test_a_leader_whose_moved_start_is_past_ours_restarts_the_log_at_its_batch_then_its_message(tmp_path):
    """The follower counts from the leader's start batch's first message (320), and
    takes the start inside that batch (322) once the batch is appended."""
    applier, replica, _, _ = _follower(tmp_path)
    moved = {"start_message": 322, "start_batch_message": 320}
    answer = _answer(code=OffsetOutOfRangeError.code, start=5000, leo=9000)._replace(**moved)
    applier.on_fetched(replica, EPOCH, 0, answer, memoryview(b""))
    plog = replica.plog
    assert (plog.start_offset, plog.start_message, plog.end_message) == (5000, 320, 320)
    data = _batch(b"a")
    fetched = _answer(start=5000, hw=5000 + len(data), data=data, leo=5000 + len(data))._replace(**moved)
    applier.on_fetched(replica, EPOCH, 5000, fetched, memoryview(data))
    assert (plog.start_offset, plog.start_message, plog.end_message) == (5000, 322, 323)
    assert plog.batch_for_message(322) == (5000, 2)


def test_a_replica_answer_part_without_a_moved_start_keeps_the_eight_fields_older_brokers_read():
    plain = ReplicaFetchAnswerPart("t", 0, 0, None, 0, 10, 0, 12)
    moved = plain._replace(start_message=7, start_batch_message=5)
    encoded = encode_fetch_answer([plain, moved])["parts"]
    assert [len(p) for p in encoded] == [8, 10]
    assert parse_fetch_answer({"parts": [list(p) for p in encoded]}, replica=True) == [plain, moved]

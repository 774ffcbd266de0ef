"""The transaction coordinator's requests (broker/server/kafka/txn_service.py) over a real
state log (the store of tests/unit/test_txn_store.py), with the markers stood in for:
EndTxn is answered once its decision is stored, before its markers; the id's next
request waits for them on the id's lock (no CONCURRENT_TRANSACTIONS, and no batch of
the next transaction before the marker); markers that cannot be written leave the
transaction Prepare* and the next request CONCURRENT_TRANSACTIONS, as before."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.errors import LeaderNotAvailableError
from broker.server.kafka.protocol import Api, Request
from broker.server.kafka.txn_service import KafkaTxnService
from broker.server.kafka.txn_state import TxnState
from tests.unit.test_txn_store import make_store

TXN_ID = "etl-1"
PARTITION = ("t", 0)


class HeldMarkers:
    """Marker writes that wait until :attr:`release` is set (or fail, once told to)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[tuple[set[tuple[str, int]], bool]] = []
        self.written: list[tuple[set[tuple[str, int]], bool]] = []
        self.fail = False

    async def write(self, partitions: set[tuple[str, int]], producer_id: int, epoch: int, commit: bool) -> None:
        self.started.append((partitions, commit))
        await self.release.wait()
        if self.fail:
            raise LeaderNotAvailableError("no leader for the markers (test)")
        self.written.append((partitions, commit))


def make_service(tmp_path: Path) -> tuple[KafkaTxnService, HeldMarkers]:
    store, _ = make_store(tmp_path)
    store.view().topics["t"] = {0: [1]}
    markers = HeldMarkers()

    async def producer_id() -> int:
        return 42

    service = KafkaTxnService(1, store.view, lambda: None, None, producer_id, markers, None, state_log=store)  # type: ignore[arg-type]
    return service, markers


def add_partitions(epoch: int) -> Request:
    topic = SimpleNamespace(name=PARTITION[0], partitions=[PARTITION[1]])
    body = SimpleNamespace(
        v3_and_below_transactional_id=TXN_ID,
        v3_and_below_producer_id=42,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[topic],
    )
    return Request(int(Api.ADD_PARTITIONS_TO_TXN), 3, 1, "test", body)


def end(epoch: int, commit: bool = True) -> Request:
    body = SimpleNamespace(transactional_id=TXN_ID, producer_id=42, producer_epoch=epoch, committed=commit)
    return Request(int(Api.END_TXN), 3, 2, "test", body)


def add_code(answer: Any) -> ErrorCode:
    return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code  # type: ignore[no-any-return]


CHANNEL = SimpleNamespace(principal=None)


async def begin(service: KafkaTxnService) -> int:
    """InitProducerId and a first partition added; the epoch."""
    error, pid, epoch = await service.init_producer_id(end(0), None, TXN_ID, 60_000, -1, -1)
    assert (error, pid) == (ErrorCode.none, 42)
    assert add_code(await service.add_partitions_to_txn(add_partitions(epoch), CHANNEL)) == ErrorCode.none
    return epoch


def test_end_txn_answers_before_its_markers_and_the_next_request_waits_for_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        service, markers = make_service(tmp_path)
        epoch = await begin(service)
        answer = await asyncio.wait_for(service.end_txn(end(epoch), CHANNEL), 5)
        assert answer.error_code == ErrorCode.none
        assert markers.started == [({PARTITION}, True)] and not markers.written  # answered first
        stored = await service.state_log.get(TXN_ID)
        assert stored is not None and b'"PrepareCommit"' in stored[0]  # the decision is in the log
        # a client's retry of the EndTxn, and the next transaction's first request, wait
        retry = asyncio.ensure_future(service.end_txn(end(epoch), CHANNEL))
        await asyncio.sleep(0.01)  # the retry reaches the lock first
        next_add = asyncio.ensure_future(service.add_partitions_to_txn(add_partitions(epoch), CHANNEL))
        await asyncio.sleep(0.05)
        assert not next_add.done() and not retry.done()
        markers.release.set()
        assert add_code(await asyncio.wait_for(next_add, 5)) == ErrorCode.none
        assert (await asyncio.wait_for(retry, 5)).error_code == ErrorCode.none  # it had completed
        assert markers.written == [({PARTITION}, True)]  # once: the retry found it complete
        stored = await service.state_log.get(TXN_ID)
        assert stored is not None and b'"Ongoing"' in stored[0]

    asyncio.run(scenario())


def test_a_local_marker_is_written_after_the_answer_not_before(tmp_path: Path) -> None:
    """A marker written without waiting (a partition led here) must not slip in between
    the decision and the answer: the client waits for the answer only."""

    async def scenario() -> None:
        service, markers = make_service(tmp_path)
        markers.release.set()  # written at once
        epoch = await begin(service)
        answered: list[bool] = []
        original = markers.write

        async def write(partitions: set[tuple[str, int]], producer_id: int, epoch: int, commit: bool) -> None:
            answered.append(done.done())
            await original(partitions, producer_id, epoch, commit)

        markers.write = write  # type: ignore[method-assign]
        done = asyncio.ensure_future(service.end_txn(end(epoch), CHANNEL))
        for _ in range(5):
            await asyncio.sleep(0)
        assert done.done() and answered == [True]

    asyncio.run(scenario())


def test_markers_not_written_leave_it_prepared_and_the_next_request_retriable(tmp_path: Path) -> None:
    async def scenario() -> None:
        service, markers = make_service(tmp_path)
        epoch = await begin(service)
        markers.fail = True
        markers.release.set()
        answer = await asyncio.wait_for(service.end_txn(end(epoch, commit=False), CHANNEL), 5)
        assert answer.error_code == ErrorCode.none  # the decision is stored: the expiry round finishes it
        await asyncio.sleep(0.01)  # the markers' task fails
        assert markers.started == [({PARTITION}, False)] and not markers.written
        stored = await service.state_log.get(TXN_ID)
        assert stored is not None and f'"{TxnState.PREPARE_ABORT.value}"'.encode() in stored[0]
        code = add_code(await service.add_partitions_to_txn(add_partitions(epoch), CHANNEL))
        assert code == ErrorCode.concurrent_transactions
        markers.fail = False
        await service.expire_once()
        assert markers.written == [({PARTITION}, False)]
        assert add_code(await service.add_partitions_to_txn(add_partitions(epoch), CHANNEL)) == ErrorCode.none

    asyncio.run(scenario())

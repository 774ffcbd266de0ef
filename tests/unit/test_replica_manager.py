"""A leader's ISR writes and fencing, with a fake ZooKeeper and a real partition log.

The leader's view of the ISR must never be smaller than what ZooKeeper may hold: a
view read before its own write must not undo it, and a write whose answer was lost
keeps counting its members until a later read settles it. A leader whose connection
was suspended again while it checked its leadership after a reconnect stays fenced.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionLossException

from broker.common.errors import LeaderNotAvailableError, NotLeaderError
from broker.coordination.partition_state import PartitionState
from broker.coordination.registry import ClusterView
from broker.replication.manager import LEADER, OFFLINE, ReplicaManager
from broker.replication.services import ReplicationServices
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records
from tests.support.waiting import wait_until_async

KEY = ("t", 0)
SESSION = 101
CREATED = 77  # creation zxid of the state znode


class FakeZooKeeper:
    """Answers ``set`` and ``read_state`` from scripts: a value, or an exception."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = PartitionState(1, 3, (1, 2), SESSION, version=5, created=CREATED)
        self.set_errors: list[Exception] = []
        self.read_errors: list[Exception] = []
        self.sets = 0
        self.reads = 0

    # the kazoo client's part
    def set(self, path: str, data: bytes, version: int) -> SimpleNamespace:
        with self.lock:
            self.sets += 1
            if self.set_errors:
                raise self.set_errors.pop(0)
            assert version == self.state.version
            new = PartitionState.decode(data, version + 1, CREATED)
            assert new is not None
            self.state = new
            return SimpleNamespace(version=new.version)

    def add_listener(self, listener) -> None:  # pragma: no cover - not started here
        pass

    # the registry's part
    def read_state(self, topic: str, partition: int) -> PartitionState:
        with self.lock:
            self.reads += 1
            if self.read_errors:
                raise self.read_errors.pop(0)
            return self.state


def _services(tmp_path, zk: FakeZooKeeper) -> ReplicationServices:
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    config = SimpleNamespace(
        broker_id=1,
        min_insync_replicas=2,
        replica_lag_time_max_ms=400,
        acks_all_timeout_ms=5000,
        log_dirs=[tmp_path],
        zk_session_timeout_s=10.0,
    )
    pool = ThreadPoolExecutor(1)
    return ReplicationServices(
        config=config,
        zk=zk,  # type: ignore[arg-type]
        registry=SimpleNamespace(
            read_state=zk.read_state,  # type: ignore[arg-type]
            session=SESSION,
        ),
        logs=SimpleNamespace(get=lambda topic, partition: plog),  # type: ignore[arg-type]
        admin_pool=pool,
        fsync_pool=pool,
        isr_changes=Counter(),
        truncated_bytes=Counter(),
        wake_fetchers=lambda key: None,
        wake_consumers=lambda key: None,
        replicated_in=lambda *args: None,
    )


def _view(state: PartitionState) -> ClusterView:
    return ClusterView(topics={"t": {0: [1, 2, 3]}}, states={KEY: state}, session=SESSION)


async def _leader_with_a_follower_catching_up(tmp_path, zk: FakeZooKeeper):
    services = _services(tmp_path, zk)
    manager = ReplicaManager(services)
    manager.loop = asyncio.get_running_loop()
    manager.lease.until = float("inf")
    manager.apply(_view(zk.state))
    replica = manager.replicas[KEY]
    assert replica.role == LEADER
    batch = records.encode_batch([b"x" * 100] * 10, None, 1_700_000_000_000)
    replica.plog.append(batch, 10)
    end = replica.plog.end_offset

    async def followers_fetching() -> None:  # both caught up, fetching every 50 ms
        while True:
            manager.record_replica_fetch(replica, 2, end)
            manager.record_replica_fetch(replica, 3, end)  # joins at the first one
            await asyncio.sleep(0.05)

    loop = asyncio.get_running_loop()
    fetching = loop.create_task(followers_fetching())
    upkeep = loop.create_task(manager._upkeep_loop())
    await asyncio.sleep(0)
    return manager, replica, upkeep, services, fetching


def test_a_view_read_before_the_leaders_own_isr_write_does_not_undo_it(tmp_path):
    async def scenario() -> None:
        zk = FakeZooKeeper()
        stale = zk.state
        manager, replica, upkeep, services, fetching = await _leader_with_a_follower_catching_up(tmp_path, zk)
        try:
            await wait_until_async(lambda: replica.state.version == 6, 5.0, "the isr write")
            assert replica.tracker.isr == (1, 2, 3)
            manager.apply(_view(stale))  # published before the write's watch fired
            assert replica.tracker.isr == (1, 2, 3), "a stale view shrank the isr"
            assert replica.state.version == 6
        finally:
            upkeep.cancel()
            fetching.cancel()
            services.admin_pool.shutdown()

    asyncio.run(scenario())


def test_an_isr_write_whose_answer_was_lost_is_settled_by_a_read(tmp_path):
    async def scenario() -> None:
        zk = FakeZooKeeper()
        zk.set_errors = [ConnectionLossException()]  # the first write never lands
        zk.read_errors = [ConnectionLossException()]  # nor does the first read
        manager, replica, upkeep, services, fetching = await _leader_with_a_follower_catching_up(tmp_path, zk)
        try:
            await wait_until_async(lambda: zk.sets == 1, 5.0, "the first isr write")
            tracker = replica.tracker
            await wait_until_async(lambda: zk.reads >= 1, 5.0, "the settling read")
            assert 3 in tracker.ack_set()  # it may have been written: it counts
            assert zk.sets == 1  # and no second write before the question is settled
            await wait_until_async(lambda: tracker.proposal is None, 5.0, "the write settled")
            # Not written (the read still has version 5): 3 is still caught up, so the
            # leader writes again, and this time it lands.
            await wait_until_async(lambda: replica.state.version == 6, 5.0, "the second isr write")
            assert zk.state.isr == (1, 2, 3) and tracker.isr == (1, 2, 3)
            assert zk.reads == 2 and zk.sets == 2
        finally:
            upkeep.cancel()
            fetching.cancel()
            services.admin_pool.shutdown()

    asyncio.run(scenario())


def test_a_reconnect_check_overtaken_by_a_new_suspension_leaves_the_leader_fenced(tmp_path):
    async def scenario() -> None:
        zk = FakeZooKeeper()
        services = _services(tmp_path, zk)
        manager = ReplicaManager(services)
        manager.loop = asyncio.get_running_loop()
        manager.lease.until = float("inf")
        manager.apply(_view(zk.state))
        release = threading.Event()
        reading = threading.Event()
        real_read = zk.read_state

        def slow_read(topic: str, partition: int) -> PartitionState:
            reading.set()
            release.wait(5)
            return real_read(topic, partition)

        services.registry.read_state = slow_read  # type: ignore[union-attr]
        answers = []
        fencing = manager.fencing
        unfence = fencing._unfence
        fencing._unfence = lambda *args: (answers.append(args), unfence(*args))  # type: ignore
        try:
            fencing.fence("SUSPENDED")
            fencing.unfence_after_check()  # CONNECTED: check leadership, then unfence
            await wait_until_async(reading.is_set, 5.0, "the check's read")
            fencing.fence("SUSPENDED")  # the connection drops again meanwhile
            release.set()
            await wait_until_async(lambda: answers, 5.0, "the check's answer")
            assert fencing.fenced, "an older check unfenced a suspended leader"
            fencing.unfence_after_check()  # the next CONNECTED
            await wait_until_async(lambda: not fencing.fenced, 5.0, "the unfence after the next check")
        finally:
            release.set()
            services.admin_pool.shutdown()

    asyncio.run(scenario())


def test_a_reconnect_says_which_partitions_it_still_leads_and_after_an_expired_session_none(tmp_path, caplog):
    """The nemesis "leader isolated" found the old leader logging "leadership confirmed,
    writes accepted again" right after its session expired, for a partition it no
    longer led. The check after a reconnect now says what it found."""

    async def scenario() -> None:
        zk = FakeZooKeeper()
        services = _services(tmp_path, zk)
        manager = ReplicaManager(services)
        manager.loop = asyncio.get_running_loop()
        manager.lease.until = float("inf")
        manager.apply(_view(zk.state))
        replica = manager.replicas[KEY]
        fencing = manager.fencing
        caplog.set_level(logging.INFO, logger="logferry.replication")
        try:
            fencing.fence("SUSPENDED")  # the connection back in the same session
            fencing.unfence_after_check()
            await wait_until_async(lambda: not fencing.fenced, 5.0, "the check after the reconnect")
            assert replica.role == LEADER and manager.leader_log("t", 0, for_write=True) is replica.plog
            assert "still leading t-0; writes to them accepted again" in caplog.text

            caplog.clear()
            fencing.fence("LOST")  # the session expired: the registry forgets it
            services.registry.session = 0  # type: ignore[union-attr]
            fencing.unfence_after_check()  # connected again, in a new session
            await wait_until_async(lambda: not fencing.fenced, 5.0, "the check after the reconnect")
            assert replica.role == OFFLINE  # the state names it in its old session
            with pytest.raises(LeaderNotAvailableError):
                manager.leader_log("t", 0, for_write=True)
            assert "earlier session" in caplog.text
            assert "no longer leads t-0" in caplog.text
            assert "still leading" not in caplog.text and "confirmed" not in caplog.text
        finally:
            services.admin_pool.shutdown()

    asyncio.run(scenario())


def test_a_fenced_leader_refuses_acks_1_writes_and_takes_acks_all_ones(tmp_path):
    """ZooKeeper away (the nemesis "ZooKeeper cut from every broker"): the leader's ISR
    cannot change, so acks=all writes, which every in-sync replica must confirm, go on
    (Kafka's rule); acks 0 and 1 writes, which a replaced leader would acknowledge and
    lose, are refused until the leadership is confirmed again."""

    async def scenario() -> None:
        zk = FakeZooKeeper()
        services = _services(tmp_path, zk)
        manager = ReplicaManager(services)
        manager.loop = asyncio.get_running_loop()
        manager.lease.until = float("inf")
        manager.apply(_view(zk.state))
        replica = manager.replicas[KEY]
        try:
            manager.fencing.fence("SUSPENDED")
            with pytest.raises(NotLeaderError, match="cannot confirm with ZooKeeper"):
                manager.leader_log("t", 0, for_write=True)
            assert manager.leader_log("t", 0, for_write=True, acks_all=True) is replica.plog
            manager.lease.until = 0.0  # and with the lease run out (a paused process)
            assert manager.leader_log("t", 0, for_write=True, acks_all=True) is replica.plog
            assert manager.leader_log("t", 0, for_write=False) is replica.plog  # reads go on
            # Replaced meanwhile (a new epoch under another leader): acks=all refused too.
            manager.apply(_view(PartitionState(2, 4, (2, 3), 55, version=7, created=CREATED)))
            with pytest.raises(NotLeaderError, match="led by broker 2"):
                manager.leader_log("t", 0, for_write=True, acks_all=True)
        finally:
            services.admin_pool.shutdown()

    asyncio.run(scenario())

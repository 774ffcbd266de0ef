"""A stateful model of one replicated partition, run on the broker's own rules.

Three brokers hold one partition (replication factor 3, min in-sync replicas 2).
Hypothesis drives them through any interleaving of: acks=all produces, follower
fetches (cut short anywhere, or not made at all: a partition), flushes, ISR writes
(answered, refused, or applied with the answer lost), controller passes, brokers
learning the state, ZooKeeper sessions expiring while the broker runs on (a zombie
leader), kill -9 and restarts (kill -9 keeps the page cache, so a log keeps its
bytes; its high-watermark checkpoint may be stale), and time passing.

The model does only the IO: byte logs in memory, a ZooKeeper of one znode, the
order things happen in. Every decision is the broker's, called as the broker calls
it: who leads and who is in sync after a failure (``partition_state.elect`` and
``roles.role_for``), followers' progress, ISR shrink and expand and the high
watermark (``isr.LeaderTracker``), when an acks=all batch may be answered
(``acks.ack_limit``), and where a returning follower's log parts from its leader's
(``reconcile.reconcile_step``). The glue mirrors ``replication.manager.transition``,
``leader.LeaderSide`` and ``follower.FollowerApplier`` step by step.

Invariants, checked after every step (with the default ``unclean = false``):

* every acknowledged batch is, byte for byte at its offset, in the log of every
  replica ZooKeeper names in sync, and no truncation ever cuts one;
* a leader's high watermark never goes back during its leadership;
* any two replicas hold the same bytes below the lower of their high watermarks.

``test_unclean_election_loses_what_only_the_isr_had`` plays one schedule with
``unclean = true``: the acknowledged batch is lost, counted, where the default
keeps the partition offline instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.coordination.partition_state import PartitionState, elect, initial_state
from broker.replication.acks import ack_limit
from broker.replication.isr import LeaderTracker
from broker.replication.reconcile import reconcile_step
from broker.replication.roles import FOLLOWER, LEADER, OFFLINE, role_for

BROKERS = (1, 2, 3)
MIN_INSYNC = 2
LAG = 1.5
"""replica_lag_time_max_ms, in seconds."""

broker_ids = st.sampled_from(BROKERS)


def make_batch(number: int, size: int) -> bytes:
    """A batch as the log frames it: a 4-byte length, then ``size`` bytes of payload
    unique to ``number`` (so two batches never compare equal, yet batches of equal
    size line up at the same boundaries in two different logs)."""
    payload = f"#{number}".encode().ljust(size, b".")
    return struct.pack(">I", len(payload)) + payload


def boundaries(log: bytes | bytearray) -> list[int]:
    """Every batch start in ``log``, and its end."""
    out, pos = [0], 0
    while pos + 4 <= len(log):
        pos += 4 + struct.unpack_from(">I", log, pos)[0]
        out.append(pos)
    return out


def batch_start_at_or_before(log: bytes | bytearray, offset: int) -> int:
    """``PartitionLog.batch_start_at_or_before`` on a log that starts at 0."""
    offset = min(offset, len(log))
    return max(b for b in boundaries(log) if b <= offset)


def whole_batches(data: bytes) -> bytes:
    """The leading whole batches of a fetch answer (what ``records.scan`` keeps)."""
    return data[: max(b for b in boundaries(data) if b <= len(data))]


@dataclass
class Broker:
    """One broker process and its replica of the partition."""

    me: int
    log: bytearray = field(default_factory=bytearray)
    flushed: int = 0
    cap: int = 0
    """``PartitionLog.set_high_watermark``: the replication cap on the visible end."""
    checkpoint: int = 0
    """The high-watermark checkpoint on disk (what a restart starts comparing from)."""
    running: bool = True
    connected: bool = True
    session: int = 0
    view: PartitionState | None = None
    role: str = OFFLINE
    tracker: LeaderTracker | None = None
    reconcile_at: int | None = None
    pending: list[tuple[int, int]] = field(default_factory=list)
    """acks=all answers waiting: (batch end, batch number)."""

    @property
    def end(self) -> int:
        return len(self.log)

    @property
    def visible_end(self) -> int:
        """``PartitionLog.visible_end`` (the flushed end is the publishable end)."""
        return min(self.cap, self.flushed)


class ReplicationModel(RuleBasedStateMachine):
    """One partition on three brokers and one ZooKeeper (see the module docstring)."""

    unclean = False

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.zxid = 0
        self.registered: dict[int, int] = {}
        """ZooKeeper's live sessions: broker -> session (its registration's zxid)."""
        self.brokers = {b: Broker(b) for b in BROKERS}
        for broker in self.brokers.values():
            self._register(broker)
        self.state = replace(initial_state(BROKERS, self.registered), version=0)
        self.acked: dict[int, tuple[int, bytes]] = {}
        """Acknowledged batches: number -> (offset, bytes)."""
        self.lost: list[int] = []
        """Acknowledged batches some truncation cut (must stay empty unless unclean)."""
        self.produced = 0
        self.hw_seen: dict[int, int] = {}
        for broker in self.brokers.values():
            self._learn(broker)

    # -- ZooKeeper --------------------------------------------------------------------

    def _register(self, broker: Broker) -> None:
        self.zxid += 1
        broker.session = self.zxid
        broker.connected = True
        self.registered[broker.me] = self.zxid

    def _publish(self, state: PartitionState) -> None:
        self.state = replace(state, version=self.state.version + 1)

    # -- what the replica manager does (manager.transition) -----------------------------

    def _learn(self, broker: Broker) -> None:
        """The broker reads the state and takes up the role it gives."""
        state = self.state
        role, _leader = role_for(state, broker.me, broker.session)
        old = broker.view
        if (
            old is not None
            and role == broker.role
            and (old.leader, old.leader_epoch) == (state.leader, state.leader_epoch)
        ):
            broker.view = state
            if role == LEADER and broker.tracker is not None and state.version != old.version:
                broker.tracker.adopt(state.isr, state.version)
                self._update_high_watermark(broker)
            return
        self._leave_role(broker)
        broker.view = state
        broker.role = role
        if role == LEADER:
            broker.tracker = LeaderTracker(
                broker.me, BROKERS, state.isr, broker.visible_end, self.now, epoch_start=broker.end
            )
            broker.cap = broker.tracker.high_watermark
            self.hw_seen[id(broker.tracker)] = broker.tracker.high_watermark
            self._update_high_watermark(broker)
        elif role == FOLLOWER:
            mark = broker.visible_end
            broker.reconcile_at = mark if mark < broker.end else None

    def _leave_role(self, broker: Broker) -> None:
        broker.tracker = None
        broker.pending = []  # failed: appended, maybe kept, never acknowledged
        broker.role = OFFLINE

    # -- what the leader does (leader.LeaderSide, acks) ----------------------------------

    def _update_high_watermark(self, broker: Broker) -> None:
        tracker = broker.tracker
        assert tracker is not None
        if tracker.advance_high_watermark(broker.end, broker.flushed):
            broker.cap = tracker.high_watermark
        limit = ack_limit(tracker, broker.end, MIN_INSYNC)
        for end, number in broker.pending:
            if end <= limit:
                self.acked[number] = (end - len(self._batch_bytes(broker, end)), self._batch_bytes(broker, end))
        broker.pending = [(end, n) for end, n in broker.pending if end > limit]

    @staticmethod
    def _batch_bytes(broker: Broker, end: int) -> bytes:
        start = max(b for b in boundaries(broker.log) if b < end)
        return bytes(broker.log[start:end])

    def _truncate(self, broker: Broker, at: int) -> None:
        for number, (offset, data) in self.acked.items():
            if offset + len(data) > at and broker.log[offset : offset + len(data)] == data:
                self.lost.append(number)
        del broker.log[at:]
        broker.flushed = min(broker.flushed, at)

    # -- rules ----------------------------------------------------------------------------

    def _leaders(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.running and b.role == LEADER and b.tracker is not None]

    @precondition(lambda self: self._leaders())
    @rule(pick=st.integers(0, 2), size=st.sampled_from([4, 6]), flush=st.booleans())
    def produce(self, pick: int, size: int, flush: bool = True) -> None:
        """An acks=all batch sent to a broker that leads (or believes it does: a zombie
        after its session expired): refused below min ISR, else appended and held."""
        leaders = self._leaders()
        broker = leaders[pick % len(leaders)]
        assert broker.tracker is not None
        if len(broker.tracker.isr) < MIN_INSYNC:  # acks.check_min_insync
            return
        self.produced += 1
        broker.log += make_batch(self.produced, size)
        broker.pending.append((broker.end, self.produced))
        if flush:
            broker.flushed = broker.end
        self._update_high_watermark(broker)

    @rule()
    def fetch_round(self) -> None:
        """Every follower fetches once, up to 40 bytes, and flushes."""
        for b in BROKERS:
            self.fetch(b, 40)
            if self.brokers[b].role == FOLLOWER:
                self.brokers[b].flushed = self.brokers[b].end

    @rule(b=broker_ids, max_bytes=st.integers(min_value=1, max_value=40))
    def fetch(self, b: int, max_bytes: int) -> None:
        """Follower ``b`` fetches from the leader it knows of, as ``FollowerApplier`` does."""
        follower = self.brokers[b]
        if not follower.running or follower.role != FOLLOWER or follower.view is None:
            return
        leader = self.brokers[follower.view.leader]
        if not leader.running or leader.role != LEADER or leader.tracker is None or leader.view is None:
            return
        epoch = follower.view.leader_epoch
        if epoch != leader.view.leader_epoch:  # leader.check_replica_fetch
            stale = leader if epoch > leader.view.leader_epoch else follower
            if stale.connected:
                self._learn(stale)
            return
        offset = follower.reconcile_at if follower.reconcile_at is not None else follower.end
        if leader.tracker.record_fetch(follower.me, offset, leader.end, self.now):
            self._update_high_watermark(leader)
        leo = leader.end
        if offset > leo:  # OffsetOutOfRangeError: this follower is ahead
            follower.reconcile_at = batch_start_at_or_before(follower.log, leo)
            return
        if offset not in boundaries(leader.log):  # InvalidOffsetError: the logs differ before it
            back = batch_start_at_or_before(follower.log, max(offset - 1, 0))
            follower.reconcile_at = back if back < offset else None
            if back >= offset:
                self._truncate(follower, back)
            return
        data = bytes(leader.log[offset : offset + max_bytes])
        if follower.reconcile_at is not None:
            local = bytes(follower.log[offset : offset + len(data)])
            at, done = reconcile_step(offset, data, local, leo, follower.end)
            if done:
                follower.reconcile_at = None
                if at < follower.end:
                    self._truncate(follower, at)
            else:
                follower.reconcile_at = at
            return
        follower.log += whole_batches(data)
        follower.cap = min(leader.visible_end, follower.end)

    @precondition(lambda self: self._leaders())
    @rule(pick=st.integers(0, 2), outcome=st.sampled_from(["written", "answer lost"]))
    def write_isr(self, pick: int, outcome: str) -> None:
        """A leader writes the ISR its tracker proposes, conditional on the version it read."""
        leaders = self._leaders()
        broker = leaders[pick % len(leaders)]
        tracker = broker.tracker
        if tracker is None or broker.view is None:
            return
        isr = tracker.proposed_isr(self.now, LAG)
        if isr is None:
            return
        base = broker.view.version
        tracker.begin_write(isr, base)
        if not broker.connected:
            return  # unknown outcome: the proposal keeps counting until a read settles it
        if self.state.version != base:  # BadVersionError: read again
            self._settle_by_reading(broker, tracker)
            return
        self._publish(replace(self.state, isr=isr))
        if outcome == "written":
            broker.view = self.state
            tracker.adopt(isr, self.state.version)
            self._update_high_watermark(broker)
        else:
            self._settle_by_reading(broker, tracker)

    def _settle_by_reading(self, broker: Broker, tracker: LeaderTracker) -> None:
        """``LeaderSide._apply_read_state`` after a write that failed or went unanswered."""
        state = self.state
        assert broker.view is not None
        if state.leader == broker.me and state.leader_epoch == broker.view.leader_epoch:
            broker.view = state
            tracker.adopt(state.isr, state.version, read_after_write=True)
            self._update_high_watermark(broker)
        else:
            self._learn(broker)

    @rule()
    def controller(self) -> None:
        """A controller pass: elect a leader if the leader's session is gone, drop dead ISR members."""
        new = elect(self.state, BROKERS, self.registered, unclean=self.unclean)
        if new is not None:
            self._publish(new)

    @rule(learners=st.sets(broker_ids, min_size=1))
    def learn(self, learners: set[int]) -> None:
        """``learners`` read the state (a watch fired); the others have not yet."""
        for b in sorted(learners):
            broker = self.brokers[b]
            if broker.running and broker.connected:
                self._learn(broker)

    def expire_session(self, b: int) -> None:
        """``b``'s ZooKeeper session expires (killed, paused or cut off); a running
        broker does not know yet and goes on in its role."""
        self.registered.pop(b, None)
        self.brokers[b].connected = False

    def reconnect(self, b: int) -> None:
        broker = self.brokers[b]
        if broker.running and not broker.connected:
            self._register(broker)
            self._learn(broker)

    def kill(self, b: int) -> None:
        """kill -9: the process goes, its written bytes stay (page cache); its session
        lives on until it expires."""
        broker = self.brokers[b]
        if broker.running:
            self._leave_role(broker)
            broker.running = False
            broker.view = None

    def restart(self, b: int) -> None:
        """A restart after kill -9, before or after its old session expired: it registers
        in a new session (so the controller sees a leader that restarted as gone, and may
        elect it again at once); recovery keeps the whole log; the cap is the
        checkpointed high watermark, possibly stale."""
        broker = self.brokers[b]
        if broker.running:
            return
        broker.running = True
        broker.flushed = broker.end
        broker.cap = min(broker.checkpoint, broker.end)
        self._register(broker)
        self._learn(broker)

    @rule(
        kind=st.sampled_from(["kill", "expire_session", "kill and expire", "restart", "reconnect"]),
        whom=st.sampled_from(["leader", "follower", "other follower"]),
    )
    def fault(self, kind: str, whom: str) -> None:
        """A fault or a recovery, aimed at a role: one rule for all, so that faults are
        rarer than normal steps. ``whom`` is ZooKeeper's leader or one of the others."""
        leader = self.state.leader if self.state.leader > 0 else BROKERS[0]
        others = [b for b in BROKERS if b != leader]
        b = {"leader": leader, "follower": others[0], "other follower": others[1]}[whom]
        if kind in ("restart", "reconnect"):  # whoever needs it, the target first
            needs = [x for x in (b, *BROKERS) if not self.brokers[x].running or not self.brokers[x].connected]
            b = needs[0] if needs else b
        if kind == "kill and expire":
            self.kill(b)
            self.expire_session(b)
        else:
            getattr(self, kind)(b)

    @rule(how=st.sampled_from(["kill", "zombie"]), learners=st.sets(broker_ids))
    def failover(self, how: str, learners: set[int]) -> None:
        """The leader fails (kill -9, or its session expires while it runs on: a zombie),
        the controller elects, and ``learners`` hear of it now, the others later."""
        leader = self.state.leader
        if leader < 0:
            return
        if how == "kill":
            self.kill(leader)
        self.expire_session(leader)
        self.controller()
        if learners:
            self.learn(learners)

    @rule()
    def recover(self) -> None:
        """Every broker down restarts (its old session expired meanwhile), every one cut
        off reconnects; the controller acts, every broker reads the state."""
        for b in BROKERS:
            if not self.brokers[b].running:
                self.expire_session(b)
            self.restart(b)
            self.reconnect(b)
        self.controller()
        self.learn(set(BROKERS))

    @rule(dt=st.sampled_from([0.1, 0.5, 1.0]), checkpoint=st.booleans())
    def tick(self, dt: float, checkpoint: bool) -> None:
        """Time passes; with ``checkpoint`` every running broker writes its
        high-watermark checkpoint (else the one on disk grows stale)."""
        self.now += dt
        for broker in self.brokers.values():
            if checkpoint and broker.running:
                broker.checkpoint = broker.visible_end

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def acknowledged_batches_are_on_every_in_sync_replica(self) -> None:
        if self.unclean:
            return
        assert not self.lost, f"acknowledged batches truncated: {self.lost}"
        for number, (offset, data) in self.acked.items():
            for r in self.state.isr:
                got = bytes(self.brokers[r].log[offset : offset + len(data)])
                assert got == data, f"acknowledged batch #{number} at {offset} missing on in-sync replica {r}"

    @invariant()
    def a_leaders_high_watermark_never_goes_back(self) -> None:
        for broker in self.brokers.values():
            if broker.tracker is not None:
                key = id(broker.tracker)
                hw = broker.tracker.high_watermark
                assert hw >= self.hw_seen.get(key, hw), f"broker {broker.me}: high watermark went back"
                assert broker.cap == hw
                self.hw_seen[key] = hw

    @invariant()
    def replicas_agree_below_the_high_watermark(self) -> None:
        if self.unclean:
            return
        for a in self.brokers.values():
            assert a.visible_end <= a.end
            for b in self.brokers.values():
                h = min(a.visible_end, b.visible_end)
                assert a.log[:h] == b.log[:h], f"brokers {a.me} and {b.me} differ below {h}"


ReplicationModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReplicationModel = ReplicationModel.TestCase


def _schedule(model: ReplicationModel) -> None:
    """Follower 3 falls behind and leaves the ISR; a batch is acknowledged by 1 and 2;
    both die, and only 3 comes back."""
    model.fetch(2, 100)
    model.fetch(3, 100)
    model.tick(2.0, False)
    model.fetch(2, 100)
    model.write_isr(0, "written")  # 3 has not fetched for 2 s: ISR (1, 2)
    model.produce(0, 6)
    model.fetch(2, 100)
    model.fetch(2, 100)  # 2's fetch past the batch: acknowledged
    for b in (1, 2):
        model.kill(b)
        model.expire_session(b)
    model.controller()


def test_unclean_election_loses_what_only_the_isr_had() -> None:
    clean = ReplicationModel()
    _schedule(clean)
    assert list(clean.acked) == [1]
    assert clean.state.leader == -1  # offline: waits for 1 or 2 to return
    unclean = ReplicationModel()
    unclean.unclean = True
    _schedule(unclean)
    assert list(unclean.acked) == [1] and unclean.state.leader == 3
    unclean.learn({3})
    unclean.restart(2)
    unclean.fetch(2, 100)  # the returning replica compares with the new leader and cuts
    unclean.fetch(2, 100)
    assert unclean.lost == [1]


def test_a_restarted_leader_lets_no_follower_join_below_its_log_end() -> None:
    """``LeaderTracker``'s ``epoch_start`` rule, on the schedule that needs it: broker 1
    leads with ISR (1, 2) while 3 lags; batch 2 is acknowledged by 1 and 2; 1 restarts
    before its session expires, with a stale checkpoint (its high watermark below batch
    2), and is elected again. Its ISR member 2 is assumed to hold that high watermark
    only, so 3, fetching there without receiving anything, reaches the replicated end;
    were it let in, ZooKeeper would name in sync a replica without batch 2."""
    model = ReplicationModel()
    model.produce(0, 6)
    for _ in range(3):
        model.fetch_round()
    model.tick(1.0, True)  # every checkpoint at the end of batch 1
    model.fetch(2, 40)
    model.tick(1.0, False)
    model.fetch(2, 40)
    model.write_isr(0, "written")
    assert model.state.isr == (1, 2)
    model.produce(0, 6)
    model.fetch(2, 40)
    model.fetch(2, 40)
    assert sorted(model.acked) == [1, 2]
    model.kill(1)
    model.restart(1)
    model.controller()
    model.learn({1, 2, 3})
    leader = model.brokers[1]
    assert leader.role == LEADER and leader.tracker is not None
    assert leader.tracker.high_watermark < leader.end  # what it knows is below batch 2
    model.fetch(3, 1)  # a fetch at 3's end whose answer brings nothing
    assert 3 not in leader.tracker.joining
    model.write_isr(0, "written")
    assert model.state.isr == (1, 2)
    model.acknowledged_batches_are_on_every_in_sync_replica()

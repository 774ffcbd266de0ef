"""Partition state, leader election and replica placement (sans IO).

The state of a partition lives in ZooKeeper (``.../partitions/<p>/state``) and is
written in two places only: by the controller, which elects leaders (bumping the
leader epoch), and by the leader, which shrinks and grows its in-sync replica set
(ISR) under the same epoch. Both write conditionally on the znode version, so a
writer acting on an old read loses instead of overwriting.

A leader is elected for one *session* of a broker: the state records the creation
zxid of the leader's registration znode (``leader_session``). A broker that restarts
or whose ZooKeeper session expires registers anew with another zxid, so a state that
names it leader is stale until the controller elects it again; the broker will not
act as leader on such a state, and the controller treats its leader as gone.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

NO_LEADER = -1


@dataclass(frozen=True)
class PartitionState:
    """Who leads a partition, under which epoch, and which replicas are in sync."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader_session: int = 0
    """Creation zxid of the leader's registration when it was elected (0: unknown)."""
    version: int = -1
    """ZooKeeper's version of the state znode this was read from (-1: not read)."""
    created: int = 0
    """Creation zxid of that znode: tells a re-created topic's state from an old one."""

    def older_than(self, other: PartitionState) -> bool:
        """True if this was read from the same znode as ``other`` but before it."""
        return self.created == other.created and 0 <= self.version < other.version

    def encode(self) -> bytes:
        """The znode payload (JSON, readable with zkCli)."""
        return json.dumps(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "leader_session": self.leader_session,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, raw: bytes | None, version: int = -1, created: int = 0) -> PartitionState | None:
        """Parse a state znode's payload; None if it is blank or malformed."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(
                int(data["leader"]),
                int(data["leader_epoch"]),
                tuple(int(b) for b in data["isr"]),
                int(data.get("leader_session", 0)),
                version,
                created,
            )
        except (ValueError, KeyError, TypeError):
            return None


def initial_state(replicas: Sequence[int], live: Mapping[int, int]) -> PartitionState:
    """State of a new partition: the first live replica leads, every live one is in sync.

    ``live`` maps each live broker id to its session (registration creation zxid).
    """
    isr = tuple(r for r in replicas if r in live)
    if not isr:
        return PartitionState(NO_LEADER, 0, ())
    return PartitionState(isr[0], 0, isr, live[isr[0]])


def elect(
    state: PartitionState,
    replicas: Sequence[int],
    live: Mapping[int, int],
    *,
    unclean: bool = False,
    preferred: bool = False,
    shutting: AbstractSet[int] = frozenset(),
) -> PartitionState | None:
    """The controller's decision for one partition; None when nothing changes.

    ``live`` maps each live broker id to its session. A leader whose session is not
    the one it was elected in has restarted: it counts as gone (and may be elected
    again at once, with a new epoch, if it is the best choice). ``shutting``: live
    brokers in a controlled shutdown; they lead only when no other in-sync replica can.

    * The leader is gone (or there is none): the first replica, in preference order,
      that is alive and in the ISR leads (one not shutting down first); dead replicas
      leave the ISR; the epoch goes up. With no live ISR member the partition goes
      offline (leader -1, the last ISR kept, so that replica leads again when it
      returns) unless ``unclean`` allows any live replica to lead, at the price of the
      messages only the ISR had.
    * The leader is alive but shutting down: the first other live in-sync replica not
      shutting down takes over (new epoch; the ISR is kept, so the leaving broker keeps
      counting for acks=all while it still fetches). None there: it stays.
    * The leader is alive: dead followers leave the ISR (same epoch), and with
      ``preferred`` the first replica takes over if it is alive, in sync and not
      shutting down.
    """
    live_isr = tuple(r for r in state.isr if r in live)
    leader_alive = state.leader in live and live[state.leader] == state.leader_session
    staying = [r for r in replicas if r in live_isr and r not in shutting]
    if not leader_alive:
        for r in [*staying, *replicas]:
            if r in live_isr:
                return PartitionState(r, state.leader_epoch + 1, live_isr, live[r])
        if unclean:
            for r in replicas:
                if r in live:
                    return PartitionState(r, state.leader_epoch + 1, (r,), live[r])
        if state.leader == NO_LEADER:
            return None
        return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr)
    if state.leader in shutting:
        others = [r for r in staying if r != state.leader]
        if others:
            return PartitionState(others[0], state.leader_epoch + 1, live_isr, live[others[0]])
    elif (
        preferred
        and replicas
        and replicas[0] != state.leader
        and replicas[0] in live_isr
        and replicas[0] not in shutting
    ):
        return PartitionState(replicas[0], state.leader_epoch + 1, live_isr, live[replicas[0]])
    if live_isr != state.isr:
        return replace(state, isr=live_isr, version=-1)
    return None


def leads_movable(state: PartitionState | None, me: int, live: AbstractSet[int]) -> bool:
    """True if ``me`` leads the partition and another live in-sync replica could take
    over: what a broker in a controlled shutdown waits to see gone."""
    return state is not None and state.leader == me and any(r != me and r in live for r in state.isr)


def assign_replicas(
    topic: str, partitions: int, replication_factor: int, brokers: Mapping[int, str]
) -> dict[int, list[int]]:
    """Place each partition's replicas on distinct brokers, spread over racks.

    ``brokers`` maps broker id -> rack ("" when undeclared). Brokers are ordered so that
    racks alternate (one from each rack in turn); partition p's replicas are the
    ``replication_factor`` brokers from position ``start + p`` on, so the leaders
    (first replicas) rotate over all brokers and a partition's replicas sit on as many
    racks as there are (with racks of unequal size, the larger racks fill the rest). The
    start depends on the topic name, so small topics do not all lead on one broker.
    Deterministic.
    """
    if partitions < 1:
        raise ValueError("a topic needs at least one partition")
    if replication_factor < 1:
        raise ValueError("the replication factor must be at least 1")
    if not brokers:
        raise ValueError("no live broker to place partitions on")
    if replication_factor > len(brokers):
        raise ValueError(
            f"replication factor {replication_factor} needs {replication_factor} "
            f"live brokers, only {len(brokers)} are registered"
        )
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    racks = [by_rack[r] for r in sorted(by_rack)]
    ordered: list[int] = []
    for i in range(max(len(r) for r in racks)):
        ordered += [r[i] for r in racks if i < len(r)]
    n = len(ordered)
    start = zlib.crc32(topic.encode()) % n
    return {p: [ordered[(start + p + k) % n] for k in range(replication_factor)] for p in range(partitions)}


__all__ = ["NO_LEADER", "PartitionState", "assign_replicas", "elect", "initial_state", "leads_movable"]

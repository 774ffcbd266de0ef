"""Partition reassignment: plans, their checks, and the controller's next step (sans IO).

A *plan* maps partitions to their new replica lists (the first replica is the preferred
leader). ``logferry reassign generate`` makes one (:func:`generate`), ``broker
decommission`` makes one that empties a broker (:func:`decommission`); ``execute``
checks it (:func:`check_plan`) and stores it, with each partition's original replicas
and the throttle, in ``/admin/reassign_partitions``. The controller then moves every
partition through the same steps (:func:`next_step`), as Kafka does:

1. **widen**: replicas = original + the new ones; the new ones start as followers and
   copy the log from the leader (throttled);
2. **wait** until every new replica is in the ISR;
3. **lead**: move leadership to the plan's first replica if it does not lead (a new
   epoch, to an in-sync replica: no acknowledged write is lost, as in controlled
   shutdown);
4. **narrow**: replicas = the plan's, the ISR loses the removed ones; their brokers
   delete the partition's local log.

Cancelling sets the target of every partition not done back to its original replicas:
the same steps then undo the widening.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.common.errors import ReassignmentError
from broker.coordination.partition_state import PartitionState

PartitionKey = tuple[str, int]
Plan = dict[PartitionKey, list[int]]

THROTTLE_KEY = "reassign_throttle"
"""Key in a topic's stored settings while it is reassigned: ``{"bytes_per_s": N,
"adding": {"<partition>": [broker ids]}}``. The brokers named there throttle their
fetches for that partition (follower side) until the key goes."""


# -- plans --------------------------------------------------------------------------


def plan_to_json(plan: Mapping[PartitionKey, Sequence[int]]) -> str:
    """The plan file's text (Kafka's shape: ``{"version": 1, "partitions": [...]}``)."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())],
        },
        indent=1,
    )


def plan_from_json(text: str) -> Plan:
    """Read a plan file; ReassignmentError saying what is wrong with it."""
    try:
        data = json.loads(text)
        entries = data["partitions"]
        plan: Plan = {}
        for e in entries:
            key = (str(e["topic"]), int(e["partition"]))
            if key in plan:
                raise ReassignmentError(f"the plan names {key[0]}-{key[1]} twice")
            plan[key] = [int(b) for b in e["replicas"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReassignmentError(
            f"not a reassignment plan ({type(exc).__name__}: {exc}); expected "
            '{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [..]}]}'
        ) from None
    if not plan:
        raise ReassignmentError("the plan names no partition")
    return plan


def check_plan(
    plan: Mapping[PartitionKey, Sequence[int]],
    assignments: Mapping[str, Mapping[int, Sequence[int]]],
    brokers: Iterable[int],
) -> None:
    """Refuse a plan naming unknown topics, partitions or brokers, a replica twice, no
    replica, or more replicas than there are brokers (ReassignmentError)."""
    live = set(brokers)
    for (topic, partition), replicas in sorted(plan.items()):
        name = f"{topic}-{partition}"
        if topic not in assignments:
            raise ReassignmentError(f"the plan names topic {topic!r}, which does not exist")
        if partition not in assignments[topic]:
            raise ReassignmentError(
                f"the plan names partition {name}; topic {topic!r} has partitions 0-{len(assignments[topic]) - 1}"
            )
        if not replicas:
            raise ReassignmentError(f"the plan gives {name} no replica")
        if len(set(replicas)) != len(replicas):
            raise ReassignmentError(f"the plan names a broker twice for {name}: {list(replicas)}")
        if len(replicas) > len(live):
            raise ReassignmentError(
                f"the plan gives {name} {len(replicas)} replicas; only {len(live)} brokers "
                f"are registered ({sorted(live)})"
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise ReassignmentError(
                f"the plan puts {name} on broker(s) {unknown}, which are not registered (registered: {sorted(live)})"
            )


def generate(
    current: Mapping[PartitionKey, Sequence[int]],
    brokers: Mapping[int, str],
    replication_factor: int | None = None,
    load: Mapping[int, int] | None = None,
) -> Plan:
    """Spread ``current``'s partitions over ``brokers`` (id -> rack), moving little.

    Each partition keeps the replicas it has on the chosen brokers while that broker
    holds fewer than its fair share (the ceiling of replicas / brokers); the missing
    ones go to the least loaded brokers, preferring racks the partition is not on yet.
    Then each partition's leader (first replica) is chosen so that every broker leads
    a fair share: the current leader stays if it may. Deterministic.
    ``replication_factor`` (default: each partition's own) may change it.
    """
    if not brokers:
        raise ReassignmentError("no broker to place the partitions on")
    ids = sorted(brokers)
    for key, reps in sorted(current.items()):
        rf = replication_factor or len(reps)
        if rf < 1:
            raise ReassignmentError("the replication factor must be at least 1")
        if rf > len(ids):
            raise ReassignmentError(
                f"replication factor {rf} for {key[0]}-{key[1]} needs {rf} brokers; the plan "
                f"may use only {len(ids)} ({ids})"
            )
    keys = sorted(current)
    rfs = {k: replication_factor or len(current[k]) for k in keys}
    cap = math.ceil(sum(rfs.values()) / len(ids))
    held = {b: 0 for b in ids}
    chosen: dict[PartitionKey, list[int]] = {}
    for k in keys:  # keep what may stay
        keep: list[int] = []
        for b in current[k]:
            if b in held and held[b] < cap and len(keep) < rfs[k]:
                keep.append(b)
                held[b] += 1
        chosen[k] = keep
    extra = dict(load or {})
    for k in keys:  # fill the rest
        while len(chosen[k]) < rfs[k]:
            racks = {brokers[b] for b in chosen[k]}
            b = min(
                (b for b in ids if b not in chosen[k]),
                key=lambda b: (brokers[b] in racks, held[b] >= cap, held[b], extra.get(b, 0), b),
            )
            chosen[k].append(b)
            held[b] += 1
    return _choose_leaders(current, chosen, ids)


def _choose_leaders(
    current: Mapping[PartitionKey, Sequence[int]], chosen: Mapping[PartitionKey, list[int]], ids: Sequence[int]
) -> Plan:
    keys = sorted(chosen)
    cap = math.ceil(len(keys) / len(ids))
    floor = len(keys) // len(ids)
    leads = {b: 0 for b in ids}
    leader: dict[PartitionKey, int] = {}
    for k in keys:  # a current leader that stays a replica keeps leading, up to the cap
        old = current[k][0] if current[k] else -1
        if old in chosen[k] and leads[old] < cap:
            leader[k] = old
            leads[old] += 1
    for k in keys:
        if k not in leader:
            b = min(chosen[k], key=lambda b: (leads[b], chosen[k].index(b)))
            leader[k] = b
            leads[b] += 1
    for _ in range(len(keys)):  # hand a partition from a busy leader to an idle replica
        moved = False
        for k in keys:
            b = leader[k]
            if leads[b] <= floor:
                continue
            idle = [r for r in chosen[k] if leads[r] < floor or leads[r] + 1 < leads[b]]
            if idle:
                r = min(idle, key=lambda r: (leads[r], r))
                leads[b] -= 1
                leads[r] += 1
                leader[k] = r
                moved = True
        if not moved:
            break
    return {k: [leader[k], *[b for b in chosen[k] if b != leader[k]]] for k in keys}


def decommission(
    broker: int,
    current: Mapping[PartitionKey, Sequence[int]],
    states: Mapping[PartitionKey, PartitionState | None],
    brokers: Mapping[int, str],
) -> Plan:
    """A plan moving every replica off ``broker`` (onto the registered ``brokers``,
    id -> rack): each replica of it goes to the least loaded broker not holding the
    partition, one on the same rack first; a partition it led is then led by its next
    replica. Refuses (ReassignmentError, nothing planned) when another broker is
    missing for some partition, or when ``broker`` is a replicated partition's only
    in-sync replica (the copies could only come from it)."""
    others = {b: r for b, r in brokers.items() if b != broker}
    if not others:
        raise ReassignmentError(
            f"broker {broker} is the only broker of the cluster; there is nowhere to move its partitions"
        )
    load = {b: 0 for b in others}
    for reps in current.values():
        for b in reps:
            if b in load:
                load[b] += 1
    for k, reps in sorted(current.items()):
        state = states.get(k)
        if broker in reps and len(reps) > 1 and state is not None and tuple(state.isr) == (broker,):
            raise ReassignmentError(
                f"cannot decommission broker {broker}: it is the only in-sync replica of "
                f"{k[0]}-{k[1]} (isr {list(state.isr)}); wait until the other replicas "
                "catch up"
            )
    plan: Plan = {}
    rack = brokers.get(broker, "")
    for k, reps in sorted(current.items()):
        if broker not in reps:
            continue
        name = f"{k[0]}-{k[1]}"
        free = [b for b in sorted(others) if b not in reps]
        if not free:
            raise ReassignmentError(
                f"cannot decommission broker {broker}: {name} has {len(reps)} replicas "
                f"and only {len(others)} other brokers are registered ({sorted(others)}); "
                "lower its replication factor first (reassign) or add a broker"
            )
        target = min(free, key=lambda b: (others[b] != rack, load[b], b))
        load[target] += 1
        rest = [b for b in reps if b != broker]
        plan[k] = [*rest, target] if reps[0] == broker else [target if b == broker else b for b in reps]
    if not plan:
        raise ReassignmentError(f"broker {broker} holds no partition; nothing to move")
    return plan


# -- execution ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What the controller does next for one partition.

    ``kind``: ``done``; ``widen`` (write ``replicas``); ``wait`` (for new replicas to
    join the ISR, or for a leader); ``lead`` (write ``state``: another leader);
    ``narrow`` (write ``replicas`` and ``state`` together)."""

    kind: str
    replicas: tuple[int, ...] = ()
    state: PartitionState | None = None


def next_step(
    current: Sequence[int], target: Sequence[int], state: PartitionState | None, live: Mapping[int, int]
) -> Step:
    """The next step moving a partition from ``current`` replicas to ``target``
    (see the module docstring); ``live`` maps live broker ids to their sessions."""
    if list(current) == list(target):
        return Step("done")
    union = [*current, *[b for b in target if b not in current]]
    if len(union) != len(current):
        return Step("widen", tuple(union))
    if state is None or state.leader < 0 or state.leader not in live:
        return Step("wait")
    if any(b not in state.isr for b in target):
        return Step("wait")
    wanted = next((b for b in target if b in live and b in state.isr), None)
    if wanted is None:
        return Step("wait")
    if state.leader not in target or (state.leader != target[0] and wanted == target[0]):
        return Step("lead", state=PartitionState(wanted, state.leader_epoch + 1, state.isr, live[wanted]))
    isr = tuple(b for b in state.isr if b in target)
    return Step("narrow", tuple(target), PartitionState(state.leader, state.leader_epoch, isr, state.leader_session))


def adding(current: Sequence[int], original: Sequence[int]) -> list[int]:
    """Replicas of ``current`` that the reassignment added (they catch up throttled)."""
    return [b for b in current if b not in original]


def progress(leader_end: int, replica_ends: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Per replica: (bytes it holds, bytes the leader holds), for ``verify``."""
    return {b: (min(end, leader_end), leader_end) for b, end in sorted(replica_ends.items())}


def encode_job(
    plan: Mapping[PartitionKey, Sequence[int]],
    original: Mapping[PartitionKey, Sequence[int]],
    throttle: int,
    cancelled: bool = False,
) -> bytes:
    """``/admin/reassign_partitions``'s payload."""
    return json.dumps(
        {
            "version": 1,
            "throttle_bytes_per_s": throttle,
            "cancelled": cancelled,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r), "original": list(original[(t, p)])}
                for (t, p), r in sorted(plan.items())
            ],
        },
        sort_keys=True,
    ).encode()


@dataclass(frozen=True)
class Job:
    """A stored reassignment: targets, original replicas, throttle."""

    targets: dict[PartitionKey, list[int]]
    original: dict[PartitionKey, list[int]]
    throttle: int
    cancelled: bool = False


def decode_job(raw: bytes | None) -> Job | None:
    """Read ``/admin/reassign_partitions``; None when blank or malformed."""
    if not raw:
        return None
    try:
        data: Any = json.loads(raw)
        targets, original = {}, {}
        for e in data["partitions"]:
            key = (str(e["topic"]), int(e["partition"]))
            targets[key] = [int(b) for b in e["replicas"]]
            original[key] = [int(b) for b in e["original"]]
        return Job(targets, original, int(data["throttle_bytes_per_s"]), bool(data.get("cancelled", False)))
    except (ValueError, KeyError, TypeError):
        return None


def check_throttle(value: int) -> int:
    """A throttle is a positive number of bytes per second."""
    if value <= 0:
        raise ReassignmentError(
            f"--throttle {value}: give a positive number of bytes per second (e.g. 10000000 for 10 MB/s)"
        )
    return value


__all__ = [
    "Job",
    "Plan",
    "Step",
    "THROTTLE_KEY",
    "adding",
    "check_plan",
    "check_throttle",
    "decode_job",
    "decommission",
    "encode_job",
    "generate",
    "next_step",
    "plan_from_json",
    "plan_to_json",
    "progress",
]

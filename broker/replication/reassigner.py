"""The controller's side of a partition reassignment: the IO around
:func:`broker.coordination.reassignment.next_step`.

While ``/admin/reassign_partitions`` exists the active controller makes a pass every
half second (and at once when the node changes): for each partition of the job it
reads the replica list and state, and writes what the next step says, always in a
transaction that checks the controller epoch (a deposed controller writes nothing)
and the versions it read (a leader's concurrent ISR write makes it read again). The
replica-list change and the ISR change of the last step go in one transaction, so no
reader sees a removed broker in the ISR of a partition it no longer replicates.
While new replicas copy, the topic's settings carry :data:`THROTTLE_KEY` naming them,
so their brokers throttle those fetches. When every partition is done the job node
is deleted. A new controller takes over where the last one stopped: every step is
read from ZooKeeper, nothing is kept in memory between passes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from broker.coordination import zk
from broker.coordination.partition_state import PartitionState
from broker.coordination.reassignment import (
    THROTTLE_KEY,
    Job,
    PartitionKey,
    adding,
    decode_job,
    next_step,
)
from broker.replication.progress import PROGRESS

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger("logferry.controller")

PASS_INTERVAL_S = 0.5


class Reassigner:
    """Moves the stored reassignment on, one pass at a time (controller thread)."""

    def __init__(self, controller: Any):
        self.controller = controller
        self.running = False
        """True while a job node exists (the controller then passes every 0.5 s)."""

    @property
    def client(self) -> KazooClient:
        return self.controller.client

    def run_pass(self) -> None:
        """One pass over the job; deletes the job node when every partition is done."""
        try:
            raw, stat = self.client.get(zk.REASSIGN_PARTITIONS)
        except NoNodeError:
            self.running = False
            return
        job = decode_job(raw)
        if job is None:
            log.error("%s is malformed; deleting it (nothing was moved by it)", zk.REASSIGN_PARTITIONS)
            self._delete(stat.version)
            return
        if not self.running:
            log.info(
                "reassignment of %d partitions under way (throttle %d bytes/s)%s",
                len(job.targets),
                job.throttle,
                " (cancelled)" if job.cancelled else "",
            )
        self.running = True
        live, _ = self.controller._live_brokers()
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(job.targets):
            by_topic.setdefault(topic, []).append(partition)
        remaining = 0
        for topic, partitions in by_topic.items():
            remaining += self._topic_pass(job, topic, partitions, live)
        if remaining == 0:
            log.info("reassignment done: %d partitions", len(job.targets))
            self._delete(stat.version)

    def _delete(self, version: int) -> None:
        try:
            self.client.delete(zk.REASSIGN_PARTITIONS, version=version)
            self.running = False
            self.client.delete(PROGRESS, recursive=True)
        except Exception:  # changed meanwhile (cancel): the next pass reads it again
            log.debug("could not delete %s", zk.REASSIGN_PARTITIONS, exc_info=True)

    def _topic_pass(self, job: Job, topic: str, partitions: list[int], live: dict[int, int]) -> int:
        """Advance one topic's partitions; the number not done yet."""
        for _ in range(10):
            try:
                raw, tstat = self.client.get(zk.topic_path(topic))
            except NoNodeError:
                log.warning("reassignment: topic %s was deleted; skipping it", topic)
                return 0
            assignment = zk.read_assignment(raw)
            config = zk.read_topic_config(raw)
            new_assignment = dict(assignment)
            states: list[tuple[int, PartitionState, int]] = []
            throttled: dict[str, list[int]] = {}
            remaining = 0
            raced = False
            for p in partitions:
                key: PartitionKey = (topic, p)
                current = assignment.get(p)
                if current is None:
                    continue
                state, version = self._state(topic, p)
                step = next_step(current, job.targets[key], state, live)
                if step.kind == "done":
                    continue
                remaining += 1
                if step.kind == "widen":
                    new_assignment[p] = list(step.replicas)
                    log.info("%s-%d: replicas %s -> %s (new ones catch up)", topic, p, current, list(step.replicas))
                elif step.kind == "lead":
                    assert step.state is not None
                    if not self.controller._write(zk.partition_state_path(topic, p), step.state, version):
                        raced = True
                        break
                    self.controller.elections[()] += 1
                    log.info(
                        "%s-%d: leader %d -> %d (epoch %d) for the reassignment",
                        topic,
                        p,
                        state.leader if state else -1,
                        step.state.leader,
                        step.state.leader_epoch,
                    )
                    continue
                elif step.kind == "narrow":
                    assert step.state is not None
                    new_assignment[p] = list(step.replicas)
                    states.append((p, step.state, version))
                    log.info(
                        "%s-%d: replicas %s -> %s, isr %s (done)",
                        topic,
                        p,
                        current,
                        list(step.replicas),
                        list(step.state.isr),
                    )
                    continue
                added = adding(new_assignment[p], job.original[key])
                if added:
                    throttled[str(p)] = added
            if raced:
                continue
            new_config = dict(config)
            if throttled:
                new_config[THROTTLE_KEY] = {"bytes_per_s": job.throttle, "adding": throttled}
            else:
                new_config.pop(THROTTLE_KEY, None)
            if new_assignment == assignment and new_config == config and not states:
                return remaining
            tx = self.client.transaction()
            tx.check(zk.CONTROLLER_EPOCH, self.controller._epoch_version)
            tx.set_data(zk.topic_path(topic), zk.encode_topic(new_assignment, new_config), version=tstat.version)
            for p, state, version in states:
                tx.set_data(zk.partition_state_path(topic, p), state.encode(), version=version)
            if self.controller._committed(tx.commit()):
                return remaining
        return len(partitions)

    def _state(self, topic: str, partition: int) -> tuple[PartitionState | None, int]:
        try:
            raw, stat = self.client.get(zk.partition_state_path(topic, partition))
        except NoNodeError:
            return None, -1
        return PartitionState.decode(raw, stat.version), stat.version


__all__ = ["PASS_INTERVAL_S", "Reassigner"]

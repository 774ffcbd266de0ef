"""Copy progress of reassigned replicas, published for ``logferry reassign verify``.

A broker copying a partition that a reassignment added to it (its replica is
throttled, :mod:`.throttle`) writes, about once a second, how far it has got and how
far the leader's log reached at its last fetch into
``/admin/reassign_progress/<topic>-<partition>-<broker>`` (``{"end", "leader_end"}``).
The controller deletes the folder when the reassignment is done. A write that fails
is only skipped: progress is for people, the reassignment does not depend on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from broker.replication.roles import FOLLOWER, Replica

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger("logferry.replication")

PROGRESS = "/admin/reassign_progress"


def progress_path(topic: str, partition: int, broker: int) -> str:
    """Where one copying replica's progress goes."""
    return f"{PROGRESS}/{topic}-{partition}-{broker}"


def copying(replicas: Iterable[Replica]) -> list[tuple[tuple[str, int], int, int]]:
    """(key, local end, leader end) of every throttled follower (loop thread)."""
    return [(r.key, r.plog.end_offset, r.leader_end) for r in replicas if r.throttle > 0 and r.role == FOLLOWER]


def publish(client: KazooClient, me: int, rows: list[tuple[tuple[str, int], int, int]]) -> None:
    """Write the rows (admin pool); failures are logged at debug level only."""
    for (topic, partition), end, leader_end in rows:
        path = progress_path(topic, partition, me)
        data = json.dumps({"end": end, "leader_end": max(leader_end, end)}).encode()
        try:
            try:
                client.set(path, data)
            except NoNodeError:
                client.create(path, data, makepath=True)
        except Exception:
            log.debug("could not write %s", path, exc_info=True)


def read_progress(client: KazooClient) -> dict[tuple[str, int, int], tuple[int, int]]:
    """(topic, partition, broker) -> (end, leader end) as last published."""
    out: dict[tuple[str, int, int], tuple[int, int]] = {}
    try:
        children = client.get_children(PROGRESS)
    except NoNodeError:
        return out
    for child in children:
        name, _, broker = child.rpartition("-")
        topic, _, partition = name.rpartition("-")
        try:
            raw, _ = client.get(f"{PROGRESS}/{child}")
            data = json.loads(raw)
            out[(topic, int(partition), int(broker))] = (int(data["end"]), int(data["leader_end"]))
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue
    return out


__all__ = ["PROGRESS", "copying", "progress_path", "publish", "read_progress"]

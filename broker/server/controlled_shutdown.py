"""Controlled shutdown: hand this broker's leadership to in-sync replicas before it stops.

A broker that simply stops makes its partitions leaderless until the controller sees
its registration go; producers meanwhile wait or retry. Asked to stop (SIGTERM), a
broker first writes an ephemeral ``/admin/controlled_shutdown/<id>`` (as
``topic elect-leaders`` writes its trigger), and the controller moves the leadership
of every partition it leads to another live in-sync replica
(:func:`broker.coordination.partition_state.elect` with ``shutting``). The broker keeps
serving, now as a follower, until its view shows it leads nothing that could move, or
until the timeout; then the ordinary stop runs. A partition with no other in-sync
replica (replication factor 1, or the others out of sync) cannot move and stops with
the broker, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from broker.coordination import zk
from broker.coordination.partition_state import leads_movable
from broker.coordination.registry import ClusterView

log = logging.getLogger("logferry.broker")


def movable_leadership(view: ClusterView, me: int) -> list[tuple[str, int]]:
    """Partitions ``me`` leads in ``view`` that another live in-sync replica could lead."""
    live = set(view.brokers)
    return sorted(key for key, state in view.states.items() if leads_movable(state, me, live))


async def hand_over_leadership(
    me: int, client: Any, view: Callable[[], ClusterView], pool: Executor, timeout: float
) -> list[tuple[str, int]]:
    """Ask the controller to move ``me``'s leadership and wait (at most ``timeout`` s)
    until the view shows it done; returns the partitions still led (logged)."""
    started = time.monotonic()
    remaining = movable_leadership(view(), me)
    if not remaining:
        return []
    log.info("controlled shutdown: asking the controller to move the leadership of %d partitions", len(remaining))

    if not client.connected:
        log.warning("controlled shutdown: not connected to ZooKeeper; stopping without moving leadership first")
        return remaining

    def ask() -> None:
        # bounded: kazoo waits for ever on a call queued while it reconnects
        path = zk.controlled_shutdown_path(me)
        try:
            client.ensure_path_async(zk.CONTROLLED_SHUTDOWN).get(timeout=min(timeout, 5.0))
            client.create_async(path, b"", ephemeral=True).get(timeout=min(timeout, 5.0))
        except zk.NodeExistsError:
            pass  # asked already (a second signal)

    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(pool, ask)
    except Exception as exc:  # ZooKeeper went away: stop the ordinary way
        log.warning(
            "controlled shutdown: could not ask the controller (%s); stopping without moving leadership first", exc
        )
        return remaining
    while remaining and time.monotonic() - started < timeout and client.connected:
        await asyncio.sleep(0.01)
        remaining = movable_leadership(view(), me)
    if remaining:
        log.warning(
            "controlled shutdown: %d partitions still led here after %.1fs (%s); stopping anyway",
            len(remaining),
            time.monotonic() - started,
            ", ".join(f"{t}-{p}" for t, p in remaining[:10]),
        )
    else:
        log.info("controlled shutdown: leadership moved in %.3fs", time.monotonic() - started)
    return remaining


__all__ = ["hand_over_leadership", "movable_leadership"]

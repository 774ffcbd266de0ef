"""The agent's heartbeat: its state published every ``[audit] heartbeat_s`` to ``_agents``.

Agents register nothing in ZooKeeper; a dashboard (the console) learns of them from this
topic through the client library: host, version, files with their lag, the time of the
heartbeat (:class:`broker.client.AgentHeartbeat` is the schema). The last one, at a clean
stop, says ``stopped``. Sending is fire-and-forget: a lost heartbeat only makes the agent
look stale a little sooner, and never holds up the data.
"""

from __future__ import annotations

import logging
import time
from importlib import metadata
from typing import Any

from agent.metrics import Snapshot
from broker.client import AgentHeartbeat, file_entries
from broker.common.errors import LogferryError

log = logging.getLogger("logferry.agent")


def _version() -> str:
    try:
        return metadata.version("logferry")
    except metadata.PackageNotFoundError:
        return "unknown"


class Heartbeats:
    """When the next heartbeat is due, and what it says (from the agent's status snapshot)."""

    def __init__(self, topic: str, interval_s: float, host: str):
        self.topic = topic
        self.interval_s = interval_s
        self.host = host
        self.version = _version()
        self.sent = 0
        self._next = 0.0  # the first one goes out at the first status refresh

    def record(self, snapshot: Snapshot, state: str | None = None, now: float | None = None) -> AgentHeartbeat:
        """The heartbeat for ``snapshot`` (``state`` overrides the snapshot's)."""
        now = time.time() if now is None else now
        return AgentHeartbeat(
            host=self.host,
            version=self.version,
            pid=snapshot.pid,
            started_ms=int(snapshot.started * 1000),
            time_ms=int(now * 1000),
            interval_s=self.interval_s,
            state=state or snapshot.state,
            lag_bytes=int(snapshot.gauges.get("lag_bytes", 0)),
            files=file_entries(snapshot.files),
        )

    def maybe_publish(self, producer: Any, snapshot: Snapshot, state: str | None = None, force: bool = False) -> bool:
        """Send a heartbeat if one is due (or ``force``); True when one was handed over."""
        now = time.monotonic()
        if producer is None or not (force or now >= self._next):
            return False
        self._next = now + self.interval_s
        try:
            producer.send(self.topic, self.record(snapshot, state).encode(), key=self.host.encode())
        except LogferryError as exc:
            log.debug("heartbeat not sent: %s", exc)
            return False
        self.sent += 1
        return True


__all__ = ["Heartbeats"]

"""The agents view: each agent's newest heartbeat from a cluster's ``_agents`` topic.

Agents publish a small :class:`broker.client.AgentHeartbeat` every few seconds (host,
version, files with their lag). :class:`AgentsReader` reads the topic's last
:data:`LOOKBACK_MS` at the first poll (by time, so a long history costs nothing), then
only what is new, and keeps the newest heartbeat per host. An agent is *stale* when its
newest heartbeat is older than three of its intervals (and it did not say it stopped).
"""

from __future__ import annotations

import time
from typing import Any

from broker.client import AgentHeartbeat, LogferryError, SimpleConsumer, messages_of

LOOKBACK_MS = 15 * 60 * 1000
"""How far back the first poll reads: agents silent longer than this are forgotten."""
MAX_READ_BYTES = 4 * 1024 * 1024
FILES_SHOWN = 20


class AgentsReader:
    """Newest heartbeat per host, read incrementally from the agents topic."""

    def __init__(self, topic: str = "_agents"):
        self.topic = topic
        self.latest: dict[str, AgentHeartbeat] = {}
        self.positions: dict[int, int] = {}

    def add(self, beat: AgentHeartbeat) -> None:
        """Keep ``beat`` if it is the host's newest (sans IO)."""
        known = self.latest.get(beat.host)
        if known is None or beat.time_ms >= known.time_ms:
            self.latest[beat.host] = beat

    def poll(self, consumer: SimpleConsumer, partitions: list[int], now_ms: int | None = None) -> None:
        """Read what is new in every partition (LogferryError propagates)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for p in partitions:
            offset = self.positions.get(p)
            if offset is None:
                offset = consumer.offset_for_time(self.topic, p, now_ms - LOOKBACK_MS)
            result = consumer.fetch(self.topic, p, offset, max_bytes=MAX_READ_BYTES)
            for batch in result.batches:
                for message in messages_of(self.topic, p, batch):
                    beat = AgentHeartbeat.decode(message.value) if message.value else None
                    if beat is not None:
                        self.add(beat)
            self.positions[p] = result.next_offset

    def view(self, now_ms: int | None = None) -> dict[str, Any]:
        """The page's agents list: one entry per host, stale ones marked."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        agents = []
        for host, beat in sorted(self.latest.items()):
            agents.append(
                {
                    "host": host,
                    "version": beat.version,
                    "state": beat.state,
                    "pid": beat.pid,
                    "time_ms": beat.time_ms,
                    "age_s": round(max(now_ms - beat.time_ms, 0) / 1000, 1),
                    "interval_s": beat.interval_s,
                    "lag_bytes": beat.lag_bytes,
                    "stale": beat.state != "stopped" and beat.stale(now_ms),
                    "files": list(beat.files[:FILES_SHOWN]),
                    "file_count": len(beat.files),
                }
            )
        return {"topic": self.topic, "agents": agents}


def read_agents(reader: AgentsReader, consumer: SimpleConsumer, partitions: list[int]) -> dict[str, Any]:
    """Poll ``reader`` and return its view, with the error instead when a broker fails."""
    try:
        reader.poll(consumer, partitions)
    except LogferryError as exc:
        return {**reader.view(), "error": str(exc)}
    return reader.view()


__all__ = ["AgentsReader", "read_agents"]

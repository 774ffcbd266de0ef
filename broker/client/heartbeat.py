"""The agent heartbeat: one small record an agent publishes every few seconds to ``_agents``.

Agents register nothing in ZooKeeper; instead each one publishes, every ``interval_s``
(``[audit] heartbeat_s`` of the agent, 10 by default), one msgpack map keyed by its host
to the agents topic::

    {"host": str, "version": str, "pid": int, "started_ms": int, "time_ms": int,
     "interval_s": float, "state": str, "lag_bytes": int,
     "files": [{"path": str, "lag": int, "offset": int, "size": int,
                "where": str | None, "inode": int, "rotated": bool, "deleted": bool}, ...]}

so a dashboard reads the fleet through the client library alone (the console reads the
topic's last minutes). An agent whose newest heartbeat is older than
:data:`STALE_INTERVALS` intervals is *stale*: stopped, hung or cut off from the brokers.
This module is the schema both sides share (no IO).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

AGENTS_TOPIC = "_agents"
STALE_INTERVALS = 3
"""A heartbeat older than this many of its intervals marks the agent stale."""
MAX_FILES = 200
"""Files listed per heartbeat (the most lagging first): the record stays small."""


class AgentHeartbeat(NamedTuple):
    """One agent's state at ``time_ms``."""

    host: str
    version: str
    pid: int
    started_ms: int
    time_ms: int
    interval_s: float
    state: str
    lag_bytes: int
    files: tuple[dict[str, Any], ...] = ()

    def encode(self) -> bytes:
        """The message value (msgpack map)."""
        packed: bytes = msgpack.packb({**self._asdict(), "files": list(self.files)})
        return packed

    @classmethod
    def decode(cls, value: bytes) -> AgentHeartbeat | None:
        """Parse a message value; None when it is not a heartbeat."""
        try:
            m = msgpack.unpackb(value, raw=False)
            if not isinstance(m, Mapping) or not isinstance(m.get("host"), str):
                return None
            files = tuple(dict(f) for f in m.get("files") or () if isinstance(f, Mapping))
            return cls(
                m["host"],
                str(m.get("version", "")),
                int(m.get("pid", 0)),
                int(m.get("started_ms", 0)),
                int(m["time_ms"]),
                float(m.get("interval_s", 10.0)),
                str(m.get("state", "")),
                int(m.get("lag_bytes", 0)),
                files,
            )
        except (KeyError, ValueError, TypeError, msgpack.UnpackException):
            return None

    def stale(self, now_ms: int) -> bool:
        """True when this heartbeat is older than :data:`STALE_INTERVALS` intervals."""
        return now_ms - self.time_ms > STALE_INTERVALS * self.interval_s * 1000


def file_entries(files: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The heartbeat's file list from an agent's status files: path, lag, offset, size,
    and what tells the files of one path apart once it rotated: ``where`` the file is now
    (None: rotated somewhere unknown), its ``inode``, ``rotated`` and ``deleted``. The
    most lagging first, at most :data:`MAX_FILES`."""
    rows: list[dict[str, Any]] = [
        {
            "path": str(f.get("path", "")),
            "lag": int(f.get("lag") or 0),
            "offset": int(f.get("offset") or 0),
            "size": int(f.get("size") or 0),
            "where": None if f.get("where") is None else str(f.get("where")),
            "inode": int(f.get("inode") or 0),
            "rotated": bool(f.get("rotated")),
            "deleted": bool(f.get("deleted")),
        }
        for f in files
    ]
    rows.sort(key=lambda f: (-int(f["lag"]), str(f["path"]), int(f["inode"])))
    return tuple(rows[:MAX_FILES])


__all__ = ["AGENTS_TOPIC", "AgentHeartbeat", "MAX_FILES", "STALE_INTERVALS", "file_entries"]

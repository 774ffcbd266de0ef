"""Recognising and decoding an agent record (docs/agent.md, "Message value").

The agent sends each log line as one msgpack map with at least ``time``, ``host``,
``file``, ``offset`` and ``line`` (``ptime``, ``cut``, ``fields`` and ``unparsed`` are
optional). Every reader that shows messages to a person (``logferry consume``, the
console's messages view) decodes values with this one function, so they agree on what
counts as an agent record.
"""

from __future__ import annotations

from typing import Any

import msgpack

AGENT_RECORD_FIELDS = ("time", "host", "file", "offset", "line")
"""The fields every agent record has."""

_TYPES: tuple[tuple[str, type], ...] = (("time", int), ("host", str), ("file", str), ("offset", int), ("line", str))


def agent_record(value: bytes | None) -> dict[str, Any] | None:
    """The decoded agent record in ``value``, or None when it is not one.

    Cheap for other values: only a msgpack map (first byte 0x80-0x8f, 0xde or 0xdf) is
    unpacked, and only a map with the agent's field names and types counts.
    """
    if not value or not (0x80 <= value[0] <= 0x8F or value[0] in (0xDE, 0xDF)):
        return None
    try:
        record = msgpack.unpackb(value, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if not isinstance(record, dict):
        return None
    for name, kind in _TYPES:
        if not isinstance(record.get(name), kind):
            return None
    return record


__all__ = ["AGENT_RECORD_FIELDS", "agent_record"]

"""The messages view: a page of a partition from an offset or a time, agent records decoded.

Reads with :class:`broker.client.SimpleConsumer` (fetch by offset; a time resolves
to the first message stamped at or after it, as ``logferry consume --from`` does).
A value that is an agent record (a msgpack map with ``time``, ``host``, ``file``,
``offset`` and ``line``, docs/agent.md) is shown decoded; other values as UTF-8 text
(invalid bytes replaced).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from broker.client import SimpleConsumer, agent_record, messages_of

MAX_LIMIT = 500
MAX_VALUE_CHARS = 2000


def page_record(value: bytes | None) -> dict[str, Any] | None:
    """The agent record in ``value`` as the page shows it (decoded by the client
    library's :func:`broker.client.agent_record`), or None when it is not one.

    The page gets JSON, so bytes inside the record become text (invalid UTF-8
    replaced) and only named fields are kept.
    """
    record = agent_record(value)
    if record is None:
        return None
    return {
        k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
        for k, v in record.items()
        if isinstance(k, str)
    }


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def parse_start(offset: str | None, time_ms: str | None) -> int | str | dt.datetime:
    """The start of a browse: ``earliest``/``latest``/a byte offset, or a time in ms."""
    if time_ms not in (None, ""):
        return dt.datetime.fromtimestamp(int(time_ms) / 1000, tz=dt.UTC)
    if offset in (None, "", "earliest", "latest"):
        return offset or "earliest"
    value = int(offset)
    if value < 0:
        raise ValueError("offset must be 0 or more")
    return value


def message_row(topic: str, partition: int, message: Any) -> dict[str, Any]:
    """One message as the page shows it."""
    record = page_record(message.value)
    return {
        "offset": message.offset,
        "index": message.index,
        "timestamp": message.timestamp,
        "key": _text(message.key),
        "value": record["line"] if record else _text(message.value),
        "record": {k: v for k, v in record.items() if k != "line"} if record else None,
    }


def browse(
    consumer: SimpleConsumer,
    topic: str,
    partition: int,
    start: int | str | dt.datetime,
    limit: int = 50,
    skip: int = 0,
) -> dict[str, Any]:
    """Up to ``limit`` messages from ``start`` (a byte offset then skips ``skip`` messages
    of its batch); ``next`` and ``next_skip`` say where the next page starts: inside the
    last batch shown when the page ended in it, so paging loses no message."""
    limit = max(1, min(limit, MAX_LIMIT))
    offset, resolved_skip = consumer.resolve_position(topic, partition, start)
    skip = skip if isinstance(start, int) else resolved_skip
    rows: list[dict[str, Any]] = []
    log_range = consumer.offsets(topic, partition)
    next_offset, next_skip = offset, skip
    while len(rows) < limit and next_offset < log_range.end:
        result = consumer.fetch(topic, partition, next_offset)
        if not result.batches:
            break
        for batch in result.batches:
            for i, message in enumerate(messages_of(topic, partition, batch)):
                if skip:
                    skip -= 1
                    continue
                rows.append(message_row(topic, partition, message))
                if len(rows) >= limit:
                    more = i + 1 < len(batch)
                    next_offset, next_skip = (batch.offset, i + 1) if more else (batch.next_offset, 0)
                    break
            if len(rows) >= limit:
                break
        else:
            next_offset, next_skip = result.next_offset, 0
    return {
        "topic": topic,
        "partition": partition,
        "start": offset,
        "next": next_offset,
        "next_skip": next_skip,
        "log_start": log_range.start,
        "log_end": log_range.end,
        "messages": rows,
    }


def tail(consumer: SimpleConsumer, topic: str, partition: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """New messages from ``offset`` (no waiting); returns them and the next offset."""
    result = consumer.fetch(topic, partition, offset)
    rows = [message_row(topic, partition, m) for b in result.batches for m in messages_of(topic, partition, b)]
    return rows[-MAX_LIMIT:], result.next_offset


__all__ = ["browse", "message_row", "page_record", "parse_start", "tail"]

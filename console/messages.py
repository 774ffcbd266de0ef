"""The messages view: a page of a partition from an offset or a time, agent records decoded.

Reads with :class:`broker.client.SimpleConsumer` (fetch by offset; a time resolves
to the first message stamped at or after it, as ``logferry consume --from`` does).
A value that is an agent record (a msgpack map with ``time``, ``host``, ``file``,
``offset`` and ``line``, docs/agent.md) is shown decoded; other values as UTF-8 text
(invalid bytes replaced).

Every message carries its offset as Kafka clients see it (``message_offset``: one per
message, the broker's message offsets, asked once per page for the page's first batch
and counted on from the batches' message counts) beside the native position (batch byte
offset and index); a page may start from either. A search (``query``) keeps the
messages whose key or text contains it, reading at most :data:`MAX_SCAN` messages per
page: it covers the range it read, says which, and the next page searches on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

from broker.client import LogferryError, SimpleConsumer, agent_record, messages_of

MAX_LIMIT = 500
MAX_VALUE_CHARS = 2000
MAX_SCAN = 10_000
"""Messages one search page reads at most (then ``next`` says where to go on)."""


class MessageStart(NamedTuple):
    """A browse from a message offset as Kafka clients number messages."""

    message: int


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


Start = int | str | dt.datetime | MessageStart


def parse_start(offset: str | None, time_ms: str | None, message: str | None = None) -> Start:
    """The start of a browse: ``earliest``/``latest``/a byte offset, a time in ms, or a
    message offset (Kafka's numbering)."""
    if time_ms not in (None, ""):
        return dt.datetime.fromtimestamp(int(time_ms) / 1000, tz=dt.UTC)
    if message not in (None, ""):
        value = int(message)
        if value < 0:
            raise ValueError("message offset must be 0 or more")
        return MessageStart(value)
    if offset in (None, "", "earliest", "latest"):
        return offset or "earliest"
    value = int(offset)
    if value < 0:
        raise ValueError("offset must be 0 or more")
    return value


def message_row(topic: str, partition: int, message: Any) -> dict[str, Any]:
    """One message as the page shows it (``message_offset`` filled in by the caller)."""
    record = page_record(message.value)
    return {
        "offset": message.offset,
        "index": message.index,
        "message_offset": None,
        "timestamp": message.timestamp,
        "key": _text(message.key),
        "value": record["line"] if record else _text(message.value),
        "record": {k: v for k, v in record.items() if k != "line"} if record else None,
    }


def matches(row: dict[str, Any], needle: str) -> bool:
    """Whether a page row's key, text or agent record (host, file) contains ``needle``
    (lower case), ignoring case."""
    record = row["record"] or {}
    fields = (row["key"], row["value"], record.get("host"), record.get("file"))
    return any(isinstance(f, str) and needle in f.lower() for f in fields)


def _position(consumer: SimpleConsumer, topic: str, partition: int, start: Start) -> tuple[int, int]:
    if isinstance(start, MessageStart):
        found = consumer.position_of_message(topic, partition, start.message)
        if found is None:
            raise ValueError("this cluster's broker has no message offsets (older than them): start from a byte offset")
        return found
    return consumer.resolve_position(topic, partition, start)


def _message_offset(consumer: SimpleConsumer, topic: str, partition: int, offset: int) -> int | None:
    """The message offset of the batch at byte ``offset``, None when the broker cannot
    say (older than message offsets, or the offset left the log meanwhile)."""
    try:
        return consumer.message_offset_at(topic, partition, offset)
    except LogferryError:
        return None


def browse(
    consumer: SimpleConsumer,
    topic: str,
    partition: int,
    start: Start,
    limit: int = 50,
    skip: int = 0,
    query: str | None = None,
) -> dict[str, Any]:
    """Up to ``limit`` messages from ``start`` (a byte offset then skips ``skip`` messages
    of its batch); ``next`` and ``next_skip`` say where the next page starts: inside the
    last batch shown when the page ended in it, so paging loses no message. With
    ``query``, only the messages that match (:func:`matches`), out of at most
    :data:`MAX_SCAN` read (``scanned``)."""
    limit = max(1, min(limit, MAX_LIMIT))
    offset, resolved_skip = _position(consumer, topic, partition, start)
    skip = start_skip = skip if isinstance(start, int) else resolved_skip
    needle = query.lower() if query else None
    rows: list[dict[str, Any]] = []
    log_range = consumer.offsets(topic, partition)
    next_offset, next_skip = offset, skip
    before: dict[int, int] = {}
    """Batch byte offset -> the messages of the page's batches before it (for message offsets)."""
    counted = scanned = 0
    while len(rows) < limit and next_offset < log_range.end and (needle is None or scanned < MAX_SCAN):
        result = consumer.fetch(topic, partition, next_offset)
        if not result.batches:
            break
        stop = False
        for batch in result.batches:
            before[batch.offset] = counted
            counted += len(batch)
            for i, message in enumerate(messages_of(topic, partition, batch)):
                if skip:
                    skip -= 1
                    continue
                scanned += 1
                row = message_row(topic, partition, message)
                if needle is None or matches(row, needle):
                    rows.append(row)
                if len(rows) >= limit or (needle is not None and scanned >= MAX_SCAN):
                    more = i + 1 < len(batch)
                    next_offset, next_skip = (batch.offset, i + 1) if more else (batch.next_offset, 0)
                    stop = True
                    break
            if stop:
                break
        else:
            next_offset, next_skip = result.next_offset, 0
    base = _message_offset(consumer, topic, partition, offset)
    for row in rows:
        row["message_offset"] = None if base is None else base + before[row["offset"]] + row["index"]
    return {
        "topic": topic,
        "partition": partition,
        "start": offset,
        "start_message": None if base is None else base + start_skip,
        "next": next_offset,
        "next_skip": next_skip,
        "next_message": None if base is None else base + before.get(next_offset, counted) + next_skip,
        "log_start": log_range.start,
        "log_end": log_range.end,
        "messages": rows,
        "query": query or None,
        "scanned": scanned,
        "scan_limit": MAX_SCAN if needle is not None else None,
    }


def tail(
    consumer: SimpleConsumer, topic: str, partition: int, offset: int, message: int | None = None
) -> tuple[list[dict[str, Any]], int, int | None]:
    """New messages from ``offset`` (no waiting), numbered on from ``message`` (the
    message offset at ``offset``, None when unknown); returns them, the next offset and
    the next message offset."""
    result = consumer.fetch(topic, partition, offset)
    rows = []
    for b in result.batches:
        for m in messages_of(topic, partition, b):
            row = message_row(topic, partition, m)
            if message is not None:
                row["message_offset"] = message + m.index
            rows.append(row)
        if message is not None:
            message += len(b)
    return rows[-MAX_LIMIT:], result.next_offset, message


__all__ = ["MAX_SCAN", "MessageStart", "browse", "matches", "message_row", "page_record", "parse_start", "tail"]

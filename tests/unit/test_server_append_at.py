"""The append-at handler without sockets: appends only at the log's end, starts an empty
log where asked, answers queries with the last batch, and refuses bad batches."""

from __future__ import annotations

import asyncio
import zlib

from broker.common.errors import CorruptBatchError, OffsetMismatchError
from broker.server.services.responder import Responder
from broker.wire import protocol, records
from broker.wire.append_at import QUERY, AppendAtPart, encode_append_at_request, parse_append_at_answer
from tests.unit.test_server_handlers import Channel, _request, _services


def call(dispatcher, metrics, parts, corr=1):
    channel = Channel()
    fields = encode_append_at_request(1, parts)
    head, frame = _request(protocol.APPEND_AT, corr, fields, b"".join(bytes(p.data) for p in parts))
    assert dispatcher.is_synchronous(head)
    dispatcher.handle_produce(head, frame, Responder(channel, corr, head.name, metrics.count_request))
    (answer,) = channel.frames()
    return parse_append_at_answer(answer.header)


async def _append_at_the_end_only(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=1000)
    a = records.encode_batch([b"a", b"b"], None, 1)
    b = records.encode_batch([b"c"], None, 2)
    (q,) = call(dispatcher, metrics, [AppendAtPart("t", 0, QUERY, b"")])
    assert (q.error, q.start, q.end, q.last) == (0, 0, 0, -1)
    ok, again, wrong = call(
        dispatcher, metrics, [AppendAtPart("t", 0, 0, a), AppendAtPart("t", 0, 0, a), AppendAtPart("t", 0, 999, b)]
    )
    assert (ok.error, ok.end) == (0, len(a))
    assert (again.error, again.end) == (OffsetMismatchError.code, len(a))  # a repeat: refused
    assert wrong.error == OffsetMismatchError.code and "ends at offset" in wrong.message
    (ok,) = call(dispatcher, metrics, [AppendAtPart("t", 0, len(a), b)])
    assert ok.end == len(a) + len(b)
    (q,) = call(dispatcher, metrics, [AppendAtPart("t", 0, QUERY, b"")])
    assert (q.last, q.last_len, q.last_crc) == (len(a), len(b), zlib.crc32(b))
    assert logs.get("t", 0).read_bytes(0, 1 << 20) == a + b
    pool.shutdown()
    logs.close()


async def _empty_log_starts(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=1000)
    a = records.encode_batch([b"a"], None, 1)
    bad = bytearray(a)
    bad[-1] ^= 0xFF
    (refused,) = call(dispatcher, metrics, [AppendAtPart("t", 0, 5000, a)])
    assert refused.error == OffsetMismatchError.code
    (corrupt,) = call(dispatcher, metrics, [AppendAtPart("t", 0, 5000, bytes(bad), True)])
    assert corrupt.error == CorruptBatchError.code and logs.get("t", 0).start_offset == 0
    (started,) = call(dispatcher, metrics, [AppendAtPart("t", 0, 5000, a, True)])
    assert (started.error, started.start, started.end) == (0, 5000, 5000 + len(a))
    # a non-empty log is never restarted, flag or not
    (kept,) = call(dispatcher, metrics, [AppendAtPart("t", 0, 9000, a, True)])
    assert (kept.error, kept.end) == (OffsetMismatchError.code, 5000 + len(a))
    pool.shutdown()
    logs.close()


def test_append_at_the_end_only_and_queries_report_the_last_batch(tmp_path):
    asyncio.run(_append_at_the_end_only(tmp_path))  # the flusher needs a running loop


def test_an_empty_log_starts_at_the_offset_only_when_asked(tmp_path):
    asyncio.run(_empty_log_starts(tmp_path))


async def _idempotent_batches(tmp_path):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=1000)
    # a copy of a source partition whose producer 7 was already at sequence 40: no gap
    # is refused (the copy may start anywhere), and the producer state records it
    first = records.encode_batch([b"a", b"b"], None, 1, producer=(7, 0, 40))
    second = records.encode_batch([b"c"], None, 2, producer=(7, 0, 42))
    ok, ok2 = call(dispatcher, metrics, [AppendAtPart("t", 0, 0, first), AppendAtPart("t", 0, len(first), second)])
    assert (ok.error, ok2.error) == (0, 0)
    assert 7 in logs.get("t", 0).producers.producers
    pool.shutdown()
    logs.close()


def test_idempotent_producers_batches_are_copied_as_they_are_and_recorded(tmp_path):
    asyncio.run(_idempotent_batches(tmp_path))

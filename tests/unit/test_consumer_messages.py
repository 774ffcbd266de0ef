"""SimpleConsumer.messages: whole batches handed out at once, and a limit or a
message-exact start honoured inside a batch (fetches stubbed, no broker)."""

from __future__ import annotations

import pytest

from broker.client.consumer import FetchResult, SimpleConsumer
from broker.wire import records


def _consumer(batches_of: list[int], skip: int = 0) -> tuple[SimpleConsumer, list[int]]:
    """A consumer whose partition holds batches of these sizes (values 0, 1, 2, ...),
    two batches per fetch (so a limit can fall inside an answer); returns it and the
    offsets it fetched."""
    log = b""
    value = 0
    for size in batches_of:
        log += records.encode_batch([b"%d" % (value + i) for i in range(size)], None, 1)
        value += size
    batches, _ = records.decode_batches(log, 0)
    fetched: list[int] = []
    consumer = SimpleConsumer(brokers=["127.0.0.1:9"])

    def fetch(topic, partition, offset, max_wait_ms=0):
        fetched.append(offset)
        answer = [b for b in batches if b.offset >= offset][:2]
        return FetchResult(answer, answer[-1].next_offset if answer else offset, len(log))

    consumer.fetch = fetch  # type: ignore[method-assign]
    consumer.resolve_position = lambda topic, partition, start: (0, skip)  # type: ignore[method-assign]
    consumer._fetch_ahead = lambda topic, partition, offset: None  # type: ignore[method-assign]
    return consumer, fetched


@pytest.mark.parametrize("limit", [None, 1, 3, 4, 6, 7, 9, 50])
def test_a_limit_stops_at_exactly_that_many_messages_in_order(limit) -> None:
    consumer, _ = _consumer([3, 3, 3])
    got = [int(m.value) for m in consumer.messages("t", 0, "earliest", limit=limit)]
    assert got == list(range(9 if limit is None else min(limit, 9)))
    consumer.close()


def test_a_start_inside_the_first_batch_skips_its_earlier_messages() -> None:
    consumer, fetched = _consumer([3, 3], skip=2)
    got = [(int(m.value), m.index) for m in consumer.messages("t", 0, "earliest", limit=3)]
    assert got == [(2, 2), (3, 0), (4, 1)]
    assert fetched[0] == 0
    consumer.close()

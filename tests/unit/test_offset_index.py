"""The sans-IO core of message offsets: the index format and its arithmetic.

Segments here are byte strings of real batches; the index is built the two ways the
broker builds it (at append, a set at a time; and by walking the bytes, as recovery
does) and both must answer every lookup the same, right.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage.offset_index import (
    HEADER_BYTES,
    BatchWalkError,
    IndexFormatError,
    OffsetIndex,
    chain_bases,
    decode_header,
    index_batches,
    walk,
)
from broker.wire import records

NO_LIMIT = 1 << 62


def make_batch(count: int, size: int) -> bytes:
    return records.encode_batch([b"v" * size] * count, None, 1000)


def build(
    sets: list[list[tuple[int, int]]], base_byte: int = 0, base_message: int = 0, interval: int = 64
) -> tuple[bytes, OffsetIndex, list[tuple[int, int, int]]]:
    """Segment bytes from message sets of (count, value size) batches, the index built
    at append, and every batch as (position, first relative message, count)."""
    data = bytearray()
    index = OffsetIndex(base_byte, base_message, interval)
    batches = []
    message = 0
    for message_set in sets:
        start = len(data)
        n = 0
        for count, size in message_set:
            batches.append((len(data), message, count))
            data += make_batch(count, size)
            message += count
            n += count
        index.note_append(len(data) - start, n)
    return bytes(data), index, batches


def rebuilt(data: bytes, base_byte: int = 0, base_message: int = 0, interval: int = 64) -> OffsetIndex:
    index = OffsetIndex(base_byte, base_message, interval)
    assert index_batches(data, index, len(data)) is None
    return index


def find(data: bytes, index: OffsetIndex, message: int) -> tuple[int, int]:
    pos, first = index.floor_by_message(message)
    pos, first, done = walk(data, 0, pos, first, len(data), message)
    assert done
    return pos, message - first


def message_at(data: bytes, index: OffsetIndex, pos: int) -> int:
    start, first = index.floor_by_position(pos)
    found, message, done = walk(data, 0, start, first, pos, NO_LIMIT)
    assert done and found == pos
    return message


message_sets = st.lists(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 40)), min_size=1, max_size=4), min_size=0, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(message_sets, st.sampled_from([1, 64, 300, 8192]))
def test_every_message_and_batch_is_found_both_ways(sets: list[list[tuple[int, int]]], interval: int) -> None:
    data, appended, batches = build(sets, interval=interval)
    walked = rebuilt(data, interval=interval)
    total = sum(c for _, _, c in batches)
    for index in (appended, walked):
        assert (index.size, index.messages) == (len(data), total)
        for pos, first, count in batches:
            assert message_at(data, index, pos) == first
            for skip in range(count):
                assert find(data, index, first + skip) == (pos, skip)
        assert message_at(data, index, len(data)) == total
        assert find(data, index, total) == (len(data), 0)


@settings(max_examples=100, deadline=None)
@given(message_sets, st.data())
def test_truncating_at_a_batch_then_recounting_equals_the_prefix(
    sets: list[list[tuple[int, int]]], data_: st.DataObject
) -> None:
    data, index, batches = build(sets)
    cuts = [pos for pos, _, _ in batches] + [len(data)]
    cut = data_.draw(st.sampled_from(cuts))
    index.truncate(cut)
    assert index.size <= cut
    assert index_batches(data, index, cut) is None
    prefix = rebuilt(data[:cut])
    assert (index.size, index.messages) == (prefix.size, prefix.messages)
    for pos, first, count in batches:
        if pos < cut:
            assert message_at(data, index, pos) == first
            assert find(data, index, first + count - 1) == (pos, count - 1)


@settings(max_examples=100, deadline=None)
@given(message_sets, st.integers(0, 1 << 40), st.integers(0, 1 << 40))
def test_the_file_round_trips(sets: list[list[tuple[int, int]]], base_byte: int, base_message: int) -> None:
    _, index, _ = build(sets, base_byte, base_message)
    again = OffsetIndex.decode(index.encode(), base_byte)
    assert again.entries == index.entries
    assert (again.base_message, again.messages, again.size, again.interval) == (
        index.base_message,
        index.messages,
        index.size,
        index.interval,
    )
    assert again.saved_size == index.size


@settings(max_examples=200, deadline=None)
@given(message_sets, st.data())
def test_any_flipped_byte_is_refused(sets: list[list[tuple[int, int]]], data_: st.DataObject) -> None:
    _, index, _ = build(sets)
    encoded = bytearray(index.encode())
    at = data_.draw(st.integers(0, len(encoded) - 1))
    encoded[at] ^= data_.draw(st.integers(1, 255))
    with pytest.raises(IndexFormatError):
        OffsetIndex.decode(bytes(encoded), 0)


def test_a_damaged_entry_keeps_the_header_usable() -> None:
    _, index, _ = build([[(3, 10)]] * 20, base_message=500)
    encoded = bytearray(index.encode())
    encoded[-1] ^= 1
    with pytest.raises(IndexFormatError, match="entries"):
        OffsetIndex.decode(bytes(encoded), 0)
    header, entries = decode_header(bytes(encoded), 0)
    assert (header.base_message, header.messages, entries) == (500, 60, len(index.entries))


def test_an_index_of_another_segment_or_format_is_refused() -> None:
    encoded = OffsetIndex(100, 7).encode()
    assert len(encoded) == HEADER_BYTES
    with pytest.raises(IndexFormatError, match="belongs to the segment at byte 100"):
        OffsetIndex.decode(encoded, 0)
    with pytest.raises(IndexFormatError, match="shorter"):
        OffsetIndex.decode(encoded[:10], 100)
    with pytest.raises(IndexFormatError):
        OffsetIndex.decode(b"NOPE" + encoded[4:], 100)


def test_entries_are_sparse_and_taken_at_set_starts() -> None:
    # 10 sets of 5 one-message batches, ~30 bytes a batch: an entry every 256 bytes.
    data, index, batches = build([[(1, 5)] * 5] * 10, interval=256)
    set_starts = {pos for i, (pos, _, _) in enumerate(batches) if i % 5 == 0}
    assert {p for _, p in index.entries} <= set_starts
    assert 1 < len(index.entries) < 10
    gaps = [b - a for (_, a), (_, b) in zip(index.entries, index.entries[1:], strict=False)]
    assert all(g >= 256 for g in gaps)


def test_walk_stops_at_a_chunk_edge_and_resumes() -> None:
    data, index, batches = build([[(2, 30)]] * 6)
    pos, first, done = walk(data[:100], 0, 0, 0, len(data), NO_LIMIT)
    assert not done and 0 < pos <= 100
    pos, first, done = walk(data[pos:], pos, pos, first, len(data), NO_LIMIT)
    assert done and (pos, first) == (len(data), 12)


def test_walk_refuses_an_impossible_length() -> None:
    with pytest.raises(BatchWalkError):
        walk(bytes(64), 0, 0, 0, 64, NO_LIMIT)


def test_index_batches_stops_at_a_torn_tail() -> None:
    data, _, _ = build([[(3, 10)]] * 4)
    index = OffsetIndex(0, 0)
    problem = index_batches(data + b"junk-junk-junk-junk", index, len(data) + 19)
    assert problem is not None
    assert (index.size, index.messages) == (len(data), 12)


def test_chain_bases() -> None:
    # the first header anchors the rest, forward
    assert chain_bases([10, None, None], [5, 3, 0], 0) == ([10, 15, 18], None)
    # the first segment's header lost: a later one anchors, backward
    assert chain_bases([None, None, 40], [5, 3, 0], 999) == ([32, 37, 40], None)
    # no header at all (a log written before message offsets): from its first byte
    assert chain_bases([None, None], [5, 3], 0) == ([0, 5], None)
    assert chain_bases([None, None], [5, 3], 4096) == ([4096, 4101], None)
    # a header that contradicts the counts: the counts win, and it is named
    assert chain_bases([10, 99, None], [5, 3, 0], 0) == ([10, 15, 18], 1)
    # a backward chain never goes below zero
    assert chain_bases([None, 2], [5, 0], 0) == ([0, 5], 1)

"""Fuzzing every wire decoder with hypothesis.

Each decoder, fed any bytes or any msgpack value (whole, byte by byte, truncated,
with flipped bits, with trailing garbage), returns a value, says it needs more data,
or raises a :class:`LogferryError` subclass, never anything else: a broker that gets
garbage answers with an error code instead of error 1 and a traceback, and a client
that gets garbage from a broker fails that connection cleanly.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.common.errors import LogferryError
from broker.wire import apis, append_at, codecs, fetch, metadata, offsets, produce, protocol, records, topics

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Short, and the same examples on every run: unit tests stay fast and never flaky."""

# -- strategies ---------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
keys = st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=12)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=12,
)
"""Any value msgpack can carry."""

names = st.sampled_from(["t", "topic-1", "..", "a/b", ""]) | st.text(max_size=8)
small_ints = st.integers(-3, 2**20)


def anything_or(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a valid value, sometimes anything at all."""
    return valid | values


def fields(**spec: st.SearchStrategy) -> st.SearchStrategy:
    """A header whose fields are each valid, anything, or missing."""
    return st.fixed_dictionaries({}, optional={k: anything_or(v) for k, v in spec.items()})


produce_parts = st.lists(anything_or(st.tuples(names, small_ints, small_ints).map(list)), max_size=4)
fetch_parts = st.lists(
    anything_or(
        st.tuples(names, small_ints, small_ints, small_ints).map(list)
        | st.tuples(names, small_ints, small_ints, small_ints, small_ints).map(list)
    ),
    max_size=4,
)

REQUESTS: dict[int, st.SearchStrategy] = {
    protocol.PRODUCE: fields(acks=st.sampled_from([0, 1, -1]), parts=produce_parts),
    protocol.FETCH: fields(parts=fetch_parts, max_wait_ms=small_ints, min_bytes=small_ints, replica=small_ints),
    protocol.OFFSETS: fields(
        topic=names, partition=small_ints, at=st.sampled_from(["earliest", "latest"]) | small_ints
    ),
    protocol.METADATA: fields(topics=st.lists(names, max_size=3) | st.none(), create=st.booleans()),
    protocol.CREATE_TOPIC: fields(
        topic=names, partitions=small_ints, replication_factor=small_ints, min_insync_replicas=small_ints
    ),
    protocol.DELETE_TOPIC: fields(topic=names),
    protocol.ELECT_LEADERS: fields(),
    protocol.ALTER_TOPIC: fields(
        topic=names,
        set=st.dictionaries(
            st.sampled_from(["retention_ms", "segment_bytes", "compression", "bogus"]),
            small_ints | st.text(max_size=6),
            max_size=3,
        ),
        delete=st.lists(st.sampled_from(["retention_ms", "bogus"]), max_size=2),
    ),
    protocol.CREATE_PARTITIONS: fields(topic=names, partitions=small_ints),
    protocol.APPEND_AT: fields(
        acks=st.sampled_from([0, 1, -1]),
        parts=st.lists(
            anything_or(st.tuples(names, small_ints, small_ints, small_ints, st.booleans()).map(list)), max_size=4
        ),
    ),
}

answer_parts = st.lists(
    anything_or(
        st.tuples(
            names,
            small_ints,
            small_ints,
            st.none() | st.text(max_size=8),
            st.none() | small_ints,
            st.none() | small_ints,
            small_ints,
            st.none() | small_ints,
        ).map(list)
    ),
    max_size=4,
)
ANSWERS: dict[str, tuple[Callable[[Any], Any], st.SearchStrategy]] = {
    "produce": (produce.parse_produce_answer, fields(parts=answer_parts)),
    "append_at": (
        append_at.parse_append_at_answer,
        fields(
            parts=st.lists(
                anything_or(
                    st.tuples(
                        names,
                        small_ints,
                        small_ints,
                        small_ints,
                        small_ints,
                        small_ints,
                        small_ints,
                        small_ints,
                        st.none() | st.text(max_size=8),
                    ).map(list)
                ),
                max_size=4,
            )
        ),
    ),
    "fetch": (fetch.parse_fetch_answer, fields(parts=answer_parts)),
    "replica fetch": (lambda h: fetch.parse_fetch_answer(h, replica=True), fields(parts=answer_parts)),
    "offsets": (
        offsets.parse_offsets_answer,
        fields(offset=small_ints, start=small_ints, end=small_ints, avg_message_bytes=st.floats()),
    ),
    "metadata": (
        metadata.parse_metadata_answer,
        fields(
            brokers=st.dictionaries(small_ints, st.tuples(names, small_ints, names, names).map(list)),
            topics=st.dictionaries(
                names,
                fields(
                    err=small_ints,
                    msg=names,
                    partitions=st.dictionaries(small_ints, small_ints),
                    replicas=st.dictionaries(small_ints, st.lists(small_ints)),
                    isr=st.dictionaries(small_ints, st.lists(small_ints)),
                    epochs=st.dictionaries(small_ints, small_ints),
                    config=st.dictionaries(names, values),
                ),
                max_size=3,
            ),
            controller=small_ints,
        ),
    ),
    "create_topic": (
        topics.parse_create_topic_answer,
        fields(partitions=st.dictionaries(small_ints, st.lists(small_ints))),
    ),
    "elect_leaders": (topics.parse_elect_leaders_answer, fields(controller=small_ints)),
    "response head": (apis.parse_response_head, fields(id=small_ints, err=small_ints, msg=names)),
    "connection error": (apis.connection_error, fields(id=small_ints, err=small_ints, msg=names)),
}


def settles(fn: Callable[..., Any], *args: Any) -> bool:
    """Run a decoder: True when it returned, False when it raised a LogferryError.
    Anything else it raises fails the test."""
    try:
        fn(*args)
    except LogferryError:
        return False
    return True


# -- typed requests and answers, from any header ------------------------------------


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_every_request_parser_settles_on_any_fields(data):
    for api, strategy in REQUESTS.items():
        header = data.draw(strategy, label=protocol.API_NAMES[api])
        payload = memoryview(data.draw(st.binary(max_size=64), label="payload"))
        settles(apis.REQUEST_PARSERS[api], header, payload)
        settles(apis.REQUEST_PARSERS[api], data.draw(values, label="not a map"), payload)


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_every_answer_parser_settles_on_any_fields(data):
    for name, (parse, strategy) in ANSWERS.items():
        settles(parse, data.draw(strategy, label=name))
        settles(parse, data.draw(values, label=f"{name}, any value"))


@FUZZ
@given(fields(api=st.sampled_from(sorted(protocol.API_NAMES)) | small_ints, v=st.just(1) | small_ints, id=small_ints))
def test_request_heads_settle(header):
    settles(apis.parse_request_head, header)


@FUZZ
@given(fetch_parts.filter(bool), st.binary(max_size=40))
def test_payload_slices_settle(parts, payload):
    try:
        answer = fetch.parse_fetch_answer({"parts": [list(p) + [0] * 7 for p in parts if isinstance(p, list)]})
    except LogferryError:
        return
    settles(fetch.payload_slices, answer, memoryview(payload))


# -- frames, from any bytes ---------------------------------------------------------


def _drain(decoder: protocol.FrameDecoder) -> list[protocol.Frame] | None:
    """Every frame the decoder has whole; None once it raised (the stream is lost)."""
    out = []
    try:
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
    except LogferryError:
        return None
    return out


def _serve(frame: protocol.Frame) -> None:
    """What the broker does with a frame before any handler: read its head, parse it."""
    try:
        head = apis.parse_request_head(frame.header)
        apis.parse_request(head, frame)
    except LogferryError:
        pass


@st.composite
def streams(draw) -> bytes:
    """A stream of request frames, valid or not, then mangled."""
    frames = []
    for corr in range(draw(st.integers(1, 3))):
        api = draw(st.sampled_from(sorted(REQUESTS)))
        header = {"api": api, "v": 1, "id": corr, **draw(REQUESTS[api])}
        payload = draw(st.binary(max_size=48))
        try:
            frames.append(protocol.encode_request(api, corr, header, len(payload)) + payload)
        except (TypeError, ValueError, OverflowError):  # not packable: skip
            continue
    stream = bytearray(b"".join(frames))
    mangle = draw(st.sampled_from(["whole", "truncated", "flipped", "garbage"]))
    if mangle == "truncated" and stream:
        del stream[draw(st.integers(0, len(stream) - 1)) :]
    elif mangle == "flipped" and stream:
        for _ in range(draw(st.integers(1, 4))):
            bit = draw(st.integers(0, len(stream) * 8 - 1))
            stream[bit // 8] ^= 1 << (bit % 8)
    elif mangle == "garbage":
        stream += draw(st.binary(min_size=1, max_size=32))
    return bytes(stream)


@FUZZ
@given(streams(), st.integers(1 << 10, 1 << 20))
def test_frame_decoder_settles_fed_whole(stream, limit):
    decoder = protocol.FrameDecoder(limit)
    decoder.feed(stream)
    for frame in _drain(decoder) or ():
        _serve(frame)


@FUZZ
@given(streams())
def test_frame_decoder_settles_fed_byte_by_byte_and_agrees_with_whole(stream):
    whole = protocol.FrameDecoder()
    whole.feed(stream)
    at_once = _drain(whole)
    decoder = protocol.FrameDecoder()
    got: list[protocol.Frame] = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        frames = _drain(decoder)
        if frames is None:
            got = None  # type: ignore[assignment]
            break
        got.extend(frames)
    for frame in got or ():
        _serve(frame)
    if at_once is not None and got is not None:  # compared packed: NaN != NaN
        assert [(msgpack.packb(f.header), bytes(f.payload)) for f in got] == [
            (msgpack.packb(f.header), bytes(f.payload)) for f in at_once
        ]


@FUZZ
@given(st.binary(max_size=200))
def test_frame_decoder_settles_on_random_bytes(stream):
    decoder = protocol.FrameDecoder(1 << 16)
    decoder.feed(stream)
    for frame in _drain(decoder) or ():
        _serve(frame)


@FUZZ
@given(values)
def test_frames_with_any_header_settle(header):
    try:
        head = msgpack.packb(header, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return
    decoder = protocol.FrameDecoder()
    decoder.feed(struct.pack(">II", 4 + len(head), len(head)) + head)
    for frame in _drain(decoder) or ():
        _serve(frame)


# -- batches ------------------------------------------------------------------------

batch_lists = st.lists(
    st.tuples(
        st.lists(st.binary(max_size=20), min_size=1, max_size=5),
        st.booleans(),
        st.integers(0, 2**41),
        st.sampled_from(sorted(codecs.CODECS.values())),
    ),
    min_size=0,
    max_size=3,
)


def _with_crc(length: int, magic: int, attributes: int, count: int, base: int, payload: bytes) -> bytes:
    """A batch whose CRC matches whatever its header and payload say."""
    body = struct.pack(">BIq", attributes, count, base) + payload
    return struct.pack(">IBI", length, magic, zlib.crc32(body)) + body


def _compressed(payload: bytes) -> st.SearchStrategy[bytes]:
    """``payload`` compressed by a real codec, whole, cut short or with a byte changed
    (with a good CRC over it: the decompressor itself must turn it into an error)."""

    @st.composite
    def build(draw) -> bytes:
        data = bytearray(codecs.compress(draw(st.sampled_from([1, 3, 4])), payload))
        how = draw(st.sampled_from(["whole", "cut", "changed"]))
        if how == "cut":
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif how == "changed":
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return bytes(data)

    return build()


@st.composite
def message_sets(draw) -> bytes:
    """Valid batches, batches with a good CRC over a bad payload, then mangled."""
    out = bytearray()
    for vals, keyed, ts, codec in draw(batch_lists):
        out += records.encode_batch(vals, [b"k"] * len(vals) if keyed else None, ts, codec)
    for _ in range(draw(st.integers(0, 2))):
        payload_value = draw(values)
        try:
            payload = msgpack.packb(payload_value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):
            payload = b""
        payload = draw(st.just(payload) | st.binary(max_size=30) | _compressed(payload))
        # every codec id, the reserved 2, unknown ids 5-7 and a bit outside the codec's
        attributes = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 0x83]))
        count = draw(st.integers(0, 6))
        out += _with_crc(18 + len(payload), 1, attributes, count, 0, payload)
    mangle = draw(st.sampled_from(["whole", "truncated", "flipped", "garbage"]))
    if mangle == "truncated" and out:
        del out[draw(st.integers(0, len(out) - 1)) :]
    elif mangle == "flipped" and out:
        bit = draw(st.integers(0, len(out) * 8 - 1))
        out[bit // 8] ^= 1 << (bit % 8)
    elif mangle == "garbage":
        out += draw(st.binary(min_size=1, max_size=32))
    return bytes(out)


def _use(batches: list[records.Batch]) -> None:
    """What a consumer does with decoded batches: walk the columns. (The types of the
    items inside a CRC-valid batch are not checked: that would be per-message work.)"""
    for batch in batches:
        list(
            zip(
                batch.keys if batch.keys is not None else [None] * len(batch),
                batch.values,
                batch.deltas if batch.deltas is not None else [0] * len(batch),
                strict=True,
            )
        )


@FUZZ
@given(message_sets())
def test_batch_decoders_settle(data):
    view = memoryview(data)
    try:
        batches, used = records.decode_batches(view, 0, keep_raw=True)
        _use(batches)
        assert 0 <= used <= len(data)
    except LogferryError:
        pass
    result = records.scan(view)
    assert 0 <= result.valid_bytes <= len(data)
    settles(records.validate_message_set, view)
    settles(records.count_messages, view)
    for pos, raw in records.iter_raw_batches(view):
        assert bytes(raw) == data[pos : pos + len(raw)]


@FUZZ
@given(message_sets())
def test_batch_decoders_settle_on_every_prefix(data):
    for cut in range(0, len(data) + 1, max(len(data) // 16, 1)):
        view = memoryview(data)[:cut]
        settles(records.decode_batches, view, 0)
        records.scan(view)
        settles(records.count_messages, view)

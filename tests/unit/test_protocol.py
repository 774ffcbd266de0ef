"""The sans-IO frame decoder: whole frames, one byte at a time, trailing garbage."""

import random
import struct

import msgpack
import pytest

from broker.common.errors import FrameTooLargeError, InvalidRequestError, ProtocolError
from broker.wire import protocol


def _requests():
    frames = []
    for i in range(20):
        payload = bytes(random.Random(i).randrange(256) for _ in range(i * 7))
        head = protocol.encode_request(
            protocol.PRODUCE, i, {"acks": 1, "parts": [["t", 0, len(payload)]]}, payload_len=len(payload)
        )
        frames.append((head + payload, i, payload))
    return frames


def _drain(decoder):
    out = []
    while True:
        frame = decoder.next_frame()
        if frame is None:
            return out
        out.append(frame)


def test_whole_stream_at_once():
    frames = _requests()
    decoder = protocol.FrameDecoder()
    decoder.feed(b"".join(f for f, _, _ in frames))
    got = _drain(decoder)
    assert [f.header["id"] for f in got] == [i for _, i, _ in frames]
    assert [bytes(f.payload) for f in got] == [p for _, _, p in frames]
    assert decoder.buffered == 0


def test_one_byte_at_a_time():
    frames = _requests()
    stream = b"".join(f for f, _, _ in frames)
    decoder = protocol.FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got.extend(_drain(decoder))
    assert [f.header["id"] for f in got] == list(range(20))
    assert [bytes(f.payload) for f in got] == [p for _, _, p in frames]


def test_random_chunking_is_equivalent():
    frames = _requests()
    stream = b"".join(f for f, _, _ in frames)
    rng = random.Random(7)
    decoder = protocol.FrameDecoder()
    got = []
    pos = 0
    while pos < len(stream):
        step = rng.randrange(1, 50)
        decoder.feed(stream[pos : pos + step])
        pos += step
        got.extend(_drain(decoder))
    assert len(got) == 20


def test_trailing_garbage_after_valid_frames_is_an_error_not_a_frame():
    frames = _requests()[:3]
    decoder = protocol.FrameDecoder(max_frame_bytes=1 << 20)
    decoder.feed(b"".join(f for f, _, _ in frames) + b"\xff\xff\xff\xffgarbage")
    got = []
    with pytest.raises(FrameTooLargeError):
        while True:
            frame = decoder.next_frame()
            if frame is None:
                break
            got.append(frame)
    assert len(got) == 3


def test_trailing_partial_frame_waits_for_more_bytes():
    frame, _, _ = _requests()[5]
    decoder = protocol.FrameDecoder()
    decoder.feed(frame + frame[:6])
    assert len(_drain(decoder)) == 1
    assert decoder.buffered == 6


def test_oversized_frame_is_rejected_before_it_is_buffered():
    decoder = protocol.FrameDecoder(max_frame_bytes=1000)
    decoder.feed(struct.pack(">II", 5000, 10))
    with pytest.raises(FrameTooLargeError, match="max.request.bytes"):
        decoder.next_frame()


def test_header_length_larger_than_frame_is_a_protocol_error():
    decoder = protocol.FrameDecoder()
    decoder.feed(struct.pack(">II", 8, 100) + b"abcd")
    with pytest.raises(ProtocolError):
        decoder.next_frame()


@pytest.mark.parametrize("header", [b"\xc1", msgpack.packb([1, 2, 3]), msgpack.packb("text")])
def test_bad_msgpack_header_is_a_protocol_error(header):
    decoder = protocol.FrameDecoder()
    decoder.feed(struct.pack(">II", 4 + len(header), len(header)) + header)
    with pytest.raises(ProtocolError):
        decoder.next_frame()


def test_check_request_requires_id_api_and_version():
    ok = protocol.Frame({"api": 1, "v": 1, "id": 9}, memoryview(b""))
    assert protocol.check_request(ok) == (1, 9)
    with pytest.raises(InvalidRequestError) as info:
        protocol.check_request(protocol.Frame({"api": "x", "v": 1, "id": 3}, memoryview(b"")))
    assert info.value.correlation_id == 3
    with pytest.raises(InvalidRequestError):
        protocol.check_request(protocol.Frame({"api": 1, "v": 1}, memoryview(b"")))


def test_response_round_trip():
    decoder = protocol.FrameDecoder()
    decoder.feed(protocol.encode_response(4, {"parts": [["t", 0, 0, 128, None]]}))
    decoder.feed(protocol.encode_error(5, 6, "unknown topic 'x'"))
    first, second = _drain(decoder)
    assert first.header == {"id": 4, "err": 0, "parts": [["t", 0, 0, 128, None]]}
    assert second.header["err"] == 6 and "unknown" in second.header["msg"]


def test_int_keys_survive_in_metadata_maps():
    decoder = protocol.FrameDecoder()
    decoder.feed(protocol.encode_response(1, {"partitions": {0: 1, 1: 2}}))
    (frame,) = _drain(decoder)
    assert frame.header["partitions"] == {0: 1, 1: 2}

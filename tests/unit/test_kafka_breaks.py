"""What Kafka clients broke on (issue 35, "the other breaks"), at the byte level: the
exact frames go into a :class:`KafkaConnection` over an in-memory transport and the
answer frames come out, with the broker's real services behind it (no process).

- librdkafka's Metadata request for every topic, whose empty topic array it writes in
  4 bytes instead of 1 (3 bytes left after the body), is answered as Kafka answers it:
  with every topic, and the connection stays open.
- A record batch over ``max_message_bytes`` gets MESSAGE_TOO_LARGE for its partition,
  the rest of the request is appended and the connection stays open; only a frame over
  ``max_request_bytes`` closes it, and those closes are logged at a bounded rate.
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import ProduceRequest
from kio.schema.produce.v9.request import PartitionProduceData, TopicProduceData
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_writer

from broker.common.errors import ConfigError
from broker.common.ratelimit import RateLimitedLog
from broker.server.config import broker_config_from_dict
from broker.server.kafka import connection as kafka_connection
from broker.server.kafka import protocol
from broker.server.kafka.configs import broker_entries, topic_entries
from broker.server.kafka.connection import KafkaConnection
from broker.server.kafka.protocol import Api
from broker.server.kafka.record_batch import encode_record_batch
from broker.server.kafka.service import KafkaService
from tests.unit.test_authorizer import Setup
from tests.unit.test_kafka_sasl import decode

# librdkafka 2.16's Metadata v12 request for every topic (list_topics(), a regex
# subscription), byte for byte: rd_kafka_MetadataRequest0 reserves 4 bytes for the topic
# array's count and, for "every topic" on a flexible version, leaves them as they are
# (00 00 00 00) instead of finalizing them into the 1-byte compact count.
LIBRDKAFKA_ALL_TOPICS_V12 = bytes.fromhex(
    "0003"  # api key 3, Metadata
    "000c"  # version 12
    "00000007"  # correlation id 7
    "0007" + b"rdkafka".hex() + "00"  # client id (int16 length), header tagged fields
    "00000000"  # topics: the reserved int32, never rewritten as a varint
    "01"  # allow_auto_topic_creation
    "00"  # include_topic_authorized_operations
    "00"  # tagged fields
)
WELL_FORMED_ALL_TOPICS_V12 = bytes.fromhex("0003000c000000070007" + b"rdkafka".hex() + "00" + "00" + "010000")


class MemoryTransport:
    """What :class:`KafkaConnection` uses of an asyncio transport, in memory."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("10.0.0.5", 40000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.out += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def frames(self) -> Iterator[bytes]:
        """The answer frames written so far (size prefix kept), taken off the buffer."""
        while len(self.out) >= 4:
            (size,) = struct.unpack_from(">i", self.out)
            if len(self.out) < 4 + size:
                return
            frame = bytes(self.out[: 4 + size])
            del self.out[: 4 + size]
            yield frame


@pytest.fixture
def broker(tmp_path):
    """The broker's services over a temporary log dir (topics web-a and secret)."""
    setup = Setup(tmp_path, [], super_users=["User:ANONYMOUS"])
    yield setup
    setup.close()


def _service(setup: Setup, max_message_bytes: int = 1024 * 1024 + 12) -> KafkaService:
    config = SimpleNamespace(**{**vars(setup.admin.config), "max_message_bytes": max_message_bytes})
    return KafkaService(
        config,  # type: ignore[arg-type]
        setup.produce.router,
        setup.produce,
        setup.fetch,
        setup.admin,  # type: ignore[arg-type]
        setup.admin.view,
        lambda *a: None,
    )


async def _exchange(
    service: KafkaService, chunks: list[bytes], answers: int, max_request_bytes: int = 100 * 1024 * 1024
) -> tuple[list[bytes], MemoryTransport]:
    """Feed ``chunks`` to a fresh connection; the first ``answers`` answer frames (fewer
    if the connection closes or 5 s pass) and the transport."""
    transport = MemoryTransport()
    conn = KafkaConnection(service, max_request_bytes, set())
    conn.connection_made(transport)  # type: ignore[arg-type]
    got: list[bytes] = []
    for chunk in chunks:
        conn.data_received(chunk)
    for _ in range(500):
        got += transport.frames()
        if len(got) >= answers or transport.closed:
            break
        await asyncio.sleep(0.01)
    return got, transport


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _produce(correlation_id: int, parts: dict[str, bytes], acks: int = 1) -> bytes:
    """A Produce v9 request frame (without its size) with one batch per topic, partition 0."""
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out, RequestHeader(request_api_key=0, request_api_version=9, correlation_id=correlation_id, client_id="t")
    )
    body = ProduceRequest(
        acks=acks,
        timeout=timedelta(seconds=5),
        topic_data=tuple(
            TopicProduceData(name=name, partition_data=(PartitionProduceData(index=0, records=batch),))
            for name, batch in parts.items()
        ),
    )
    entity_writer(ProduceRequest)(out, body)
    return out.getvalue()


def _batch(value_bytes: int) -> bytes:
    return bytes(encode_record_batch(0, 0, 1_700_000_000_000, None, None, [b"v" * value_bytes]))


def _produce_errors(frame: bytes) -> dict[str, tuple[ErrorCode, str | None]]:
    answer = decode(Api.PRODUCE, 9, frame)
    return {t.name: (p.error_code, p.error_message) for t in answer.responses for p in t.partition_responses}


# -- Metadata: librdkafka's 4-byte empty topic array ---------------------------------------


def test_librdkafkas_all_topics_metadata_parses_as_kafka_reads_it() -> None:
    request = protocol.parse_request(LIBRDKAFKA_ALL_TOPICS_V12)
    assert isinstance(request, protocol.Request)
    assert (request.api_key, request.version, request.correlation_id) == (3, 12, 7)
    # Kafka reads: compact array length 0 = null = every topic; then the two booleans
    # and the tagged fields from the spare zero bytes; 3 bytes are left and ignored
    assert request.body.topics is None
    assert request.body.allow_auto_topic_creation is False
    assert request.body.include_topic_authorized_operations is False
    well_formed = protocol.parse_request(WELL_FORMED_ALL_TOPICS_V12)
    assert isinstance(well_formed, protocol.Request) and well_formed.body.topics is None


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "byte-by-byte"])
def test_librdkafkas_all_topics_metadata_is_answered_with_every_topic(broker, whole: bool) -> None:
    data = _framed(LIBRDKAFKA_ALL_TOPICS_V12)
    chunks = [data] if whole else [data[i : i + 1] for i in range(len(data))]
    (frame,), transport = asyncio.run(_exchange(_service(broker), chunks, 1))
    assert struct.unpack_from(">i", frame, 4) == (7,)  # the correlation id
    answer = decode(Api.METADATA, 12, frame)
    assert sorted((t.name, t.error_code) for t in answer.topics) == [
        ("secret", ErrorCode.none),
        ("web-a", ErrorCode.none),
    ]
    assert not transport.closed


def test_trailing_bytes_after_any_body_are_ignored_and_the_connection_stays(broker) -> None:
    frames = [_framed(LIBRDKAFKA_ALL_TOPICS_V12 + b"junk"), _framed(WELL_FORMED_ALL_TOPICS_V12)]
    got, transport = asyncio.run(_exchange(_service(broker), frames, 2))
    assert len(got) == 2 and not transport.closed


# -- a record batch over max_message_bytes ---------------------------------------------------


def test_a_batch_over_max_message_bytes_gets_message_too_large_and_the_connection_stays(broker) -> None:
    big, small = _batch(5000), _batch(10)
    requests = [_framed(_produce(1, {"web-a": big, "secret": small})), _framed(_produce(2, {"web-a": small}))]
    (first, second), transport = asyncio.run(_exchange(_service(broker, max_message_bytes=4096), requests, 2))
    errors = _produce_errors(first)
    code, message = errors["web-a"]
    assert code == ErrorCode.message_too_large == 10
    assert message is not None and f"{len(big)} bytes" in message and "max_message_bytes (4096)" in message
    assert errors["secret"] == (ErrorCode.none, None)  # the request's other partition is appended
    assert _produce_errors(second) == {"web-a": (ErrorCode.none, None)}  # same connection, next request
    assert not transport.closed
    # each log holds one small batch: nothing of the refused one was appended
    assert broker.logs.get("web-a", 0).end_offset == broker.logs.get("secret", 0).end_offset > 0


def test_max_message_bytes_counts_the_whole_batch_as_kafka_does(broker) -> None:
    batch = _batch(300)  # its size includes the 12-byte base offset and length
    for limit, expected in ((len(batch), ErrorCode.none), (len(batch) - 1, ErrorCode.message_too_large)):
        (frame,), _ = asyncio.run(_exchange(_service(broker, limit), [_framed(_produce(1, {"web-a": batch}))], 1))
        assert _produce_errors(frame)["web-a"][0] == expected, limit


def test_only_a_frame_over_max_request_bytes_closes_the_connection(broker) -> None:
    request = _framed(_produce(1, {"web-a": _batch(5000)}))
    got, transport = asyncio.run(_exchange(_service(broker), [request], 1, max_request_bytes=len(request) - 5))
    assert got == [] and transport.closed
    got, transport = asyncio.run(_exchange(_service(broker), [request], 1, max_request_bytes=len(request) - 4))
    assert len(got) == 1 and not transport.closed


def test_closes_for_oversized_frames_are_logged_at_a_bounded_rate(
    broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue counted 317 warnings in a minute from one retrying client; the same
    317 closes spread over a minute now write 6 lines, each counting the muted ones."""
    now = [0.0]
    limiter = RateLimitedLog(
        logging.getLogger("logferry.kafka"), 10.0, "more connections closed so since the last line", lambda: now[0]
    )
    monkeypatch.setattr(kafka_connection, "_closes", limiter)
    oversized = struct.pack(">i", 2000) + b"\0" * 8
    service = _service(broker)

    async def attempts() -> None:
        for i in range(317):
            now[0] = i * 60.0 / 317
            transport = MemoryTransport()
            conn = KafkaConnection(service, 1000, set())
            conn.connection_made(transport)  # type: ignore[arg-type]
            conn.data_received(oversized)
            assert transport.closed and not transport.out

    with caplog.at_level(logging.WARNING, logger="logferry.kafka"):
        asyncio.run(attempts())
    lines = [r.getMessage() for r in caplog.records if "closing Kafka connection" in r.getMessage()]
    assert len(lines) == 6
    assert "Kafka frame of 2000 bytes" in lines[0] and "max_request_bytes" in lines[0]
    muted = sum(int(line.rsplit("(", 1)[1].split()[0]) for line in lines[1:])
    assert muted == 317 - 6 - limiter._suppressed.get("frame size", 0)


def test_the_two_limits_are_configured_and_described_under_kafkas_names() -> None:
    base = {"broker": {"id": 1, "log_dirs": ["/tmp/x"], "zk_connect": "127.0.0.1:2181"}}
    defaults = broker_config_from_dict(base)
    assert (defaults.max_request_bytes, defaults.max_message_bytes) == (100 * 1024 * 1024, 1048588)  # Kafka's
    config = broker_config_from_dict({"broker": {**base["broker"], "max_message_bytes": 4096}})
    described = {e.name: e.value for e in broker_entries(config)}
    assert described["message.max.bytes"] == "4096"
    assert described["socket.request.max.bytes"] == str(100 * 1024 * 1024)
    assert {e.name: e.value for e in topic_entries(config, {})}["max.message.bytes"] == "4096"
    with pytest.raises(ConfigError, match="max_message_bytes"):
        broker_config_from_dict({"broker": {**base["broker"], "max_message_bytes": 0}})


def test_an_acks_0_batch_over_the_limit_closes_the_connection_as_kafka_does(broker) -> None:
    """acks=0 gets no answer to carry MESSAGE_TOO_LARGE: Kafka appends what passed and
    closes the connection, the only signal such a producer gets."""
    request = _framed(_produce(1, {"web-a": _batch(5000), "secret": _batch(10)}, acks=0))
    got, transport = asyncio.run(_exchange(_service(broker, max_message_bytes=4096), [request], 1))
    assert got == [] and transport.closed
    assert broker.logs.get("web-a", 0).end_offset == 0 and broker.logs.get("secret", 0).end_offset > 0

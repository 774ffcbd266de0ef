"""Kafka frames, request and response headers, and the api versions served, sans IO.

A frame is ``size i32`` then ``size`` bytes: the request header (v1, or v2 with tagged
fields for flexible versions) and the request body. Schemas and their (flexible,
tagged-field) encodings come from ``kio``, generated from Kafka's own message
definitions, so no schema is written by hand here. Responses carry header v0, or v1
for flexible versions (ApiVersions always v0, as Kafka requires).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import sys
import uuid
from datetime import timedelta
from enum import IntEnum
from typing import Any, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from broker.common.errors import FrameTooLargeError, InvalidRequestError
from broker.server.kafka.chunks import Buffer, ChunkWriter, total


class Api(IntEnum):
    """The api keys this broker serves (Kafka's numbers)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


SUPPORTED: dict[int, tuple[int, int]] = {
    Api.PRODUCE: (3, 9),
    Api.FETCH: (4, 12),
    Api.LIST_OFFSETS: (1, 7),
    Api.METADATA: (1, 12),
    Api.OFFSET_COMMIT: (2, 9),
    Api.OFFSET_FETCH: (1, 7),
    Api.FIND_COORDINATOR: (0, 3),
    Api.JOIN_GROUP: (0, 7),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 4),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 5),
    Api.LIST_GROUPS: (0, 5),
    Api.API_VERSIONS: (0, 3),
    Api.CREATE_TOPICS: (2, 5),
    Api.DELETE_TOPICS: (1, 5),
    Api.DELETE_RECORDS: (0, 2),
    Api.INIT_PRODUCER_ID: (0, 4),
    Api.ADD_PARTITIONS_TO_TXN: (0, 3),
    Api.ADD_OFFSETS_TO_TXN: (0, 3),
    Api.END_TXN: (0, 4),
    Api.TXN_OFFSET_COMMIT: (0, 3),
    Api.SASL_HANDSHAKE: (0, 1),
    Api.SASL_AUTHENTICATE: (0, 2),
    Api.DESCRIBE_CONFIGS: (1, 4),
    Api.CREATE_PARTITIONS: (0, 3),
    Api.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    Api.DELETE_GROUPS: (0, 2),
    Api.OFFSET_DELETE: (0, 0),
    Api.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    Api.CONSUMER_GROUP_DESCRIBE: (0, 1),
}
"""``api key: (min version, max version)`` answered by ApiVersions. Produce from v3
(record batches v2); Fetch up to v12 (v13 addresses topics by id); FindCoordinator up
to v3 (v4 batches keys); OffsetFetch up to v7 (v8 batches groups); OffsetCommit up to
v9 (v9, the same fields as v8, is the version a KIP-848 consumer's commits must use:
its generation is the member epoch); ListGroups up to v5 (v5: the group type);
ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) v0-v1; DeleteTopics up to v5 (v6 by topic id).
The transaction apis up to the versions before Kafka's transaction protocol v2
(KIP-890: an epoch bump per transaction; AddPartitionsToTxn v4+ is broker to broker),
which clients use only when the broker advertises it. SaslHandshake 0-1 as Kafka 3
lists it (librdkafka before 2.x looks for v0 in the range before it uses SASL at all),
but a v0 handshake itself, after which the SASL tokens would travel without Kafka
framing, is refused (:mod:`broker.server.kafka.sasl`)."""

UNSUPPORTED_VERSION = ErrorCode.unsupported_version
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")


class Request(NamedTuple):
    """One parsed request."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    """The kio request entity."""


class Unsupported(NamedTuple):
    """A well-framed request for an api or version this broker does not serve."""

    api_key: int
    version: int
    correlation_id: int


class FrameDecoder:
    """Cuts a byte stream into request frames; FrameTooLargeError for a size over
    ``max_bytes`` or below the smallest header (the stream cannot go on then)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        """Add received bytes."""
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next whole frame's bytes (without the size), or None until more arrive."""
        buf = self._buf
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, 0)
        if size < _HEAD.size + 2 or size > self.max_bytes:
            raise FrameTooLargeError(
                f"Kafka frame of {size} bytes: allowed are {_HEAD.size + 2} to {self.max_bytes} (max_request_bytes)"
            )
        if len(buf) < 4 + size:
            return None
        if len(buf) == 4 + size:  # the common case: the buffer holds this frame only
            frame = bytes(memoryview(buf)[4:])
            buf.clear()
            return frame
        frame = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        return frame

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)


def peek_head(frame: bytes) -> tuple[int, int, int]:
    """``(api_key, version, correlation_id)`` of a frame (at least 8 bytes long)."""
    key, version, corr = _HEAD.unpack_from(frame, 0)
    return key, version, corr


def parse_request(frame: bytes) -> Request | Unsupported:
    """Parse a frame into a :class:`Request`, or :class:`Unsupported` when its api or
    version is not served. InvalidRequestError when the bytes do not match the schema
    (the connection must then be closed: the stream's framing is intact but the client
    speaks something else). Bytes after the body are ignored, as Kafka does."""
    key, version, corr = peek_head(frame)
    bounds = SUPPORTED.get(key)
    if bounds is None or not bounds[0] <= version <= bounds[1]:
        return Unsupported(key, version, corr)
    try:
        schema = _request_schema(key, version)
    except (UnknownAPIKey, UnknownEntity):  # a version Kafka itself no longer defines
        return Unsupported(key, version, corr)
    try:
        header, used = entity_reader(schema.__header_schema__)(frame, 0)
        body, _ = entity_reader(schema)(frame, used)
    except Exception as exc:  # kio raises several types for malformed input
        raise InvalidRequestError(
            f"malformed Kafka request (api {key} v{version}, correlation id {corr}): {exc}"
        ) from None
    # Bytes past the body are ignored, as Kafka's broker ignores them (it reads the
    # body from the frame's buffer and never checks what remains). librdkafka relies
    # on that: for "every topic" it writes Metadata v9+'s compact topic array as the
    # 4 bytes it reserved (00 00 00 00), not as the 1-byte varint 00, so the request
    # reads as topics = null (every topic), the next fields from the 3 spare zero
    # bytes, and ends 3 bytes early (tests/unit/test_kafka_breaks.py holds those bytes).
    return Request(key, version, corr, header.client_id, body)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """The whole response frame (size, header, body) for a kio response entity."""
    schema = type(body)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_schema)(out, header_schema(correlation_id=correlation_id))
    entity_writer(schema)(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    result = bytes(data)
    del data
    return result


def encode_response_parts(api_key: int, version: int, correlation_id: int, body: Any) -> list[Buffer]:
    """The whole response frame as a list of buffers: like :func:`encode_response`, but
    a large field value (a fetch's records, a :class:`~broker.server.kafka.chunks.Chunks`) is
    kept by reference, not copied into the frame (:mod:`broker.server.kafka.chunks`)."""
    schema = type(body)
    header_schema = schema.__header_schema__
    out = ChunkWriter()
    out.write(b"\0\0\0\0")
    stream: Any = out  # kio's writers only call write()
    entity_writer(header_schema)(stream, header_schema(correlation_id=correlation_id))
    entity_writer(schema)(stream, body)
    parts = out.getparts()
    head = parts[0]
    assert isinstance(head, bytearray) and len(head) >= 4
    _SIZE.pack_into(head, 0, total(parts) - 4)
    return parts


@functools.cache
def _request_schema(api_key: int, version: int) -> Any:
    """kio's request class of an api version, found once: kio resolves it by its dotted
    name on every call (``pkgutil.resolve_name``, about a tenth of a small produce
    request's CPU before this cache)."""
    return load_request_schema(api_key, version)


@functools.cache
def response_schema(api_key: int, version: int, name: str | None = None) -> Any:
    """The kio response class of an api version, or one of its nested classes by name
    (found once per api, version and name, as :func:`_request_schema`)."""
    schema = load_response_schema(api_key, version)
    if name is None:
        return schema
    return getattr(sys.modules[schema.__module__], name)


@functools.cache
def _field_names(schema: Any) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(schema))


def make(schema: Any, **values: Any) -> Any:
    """Build a kio entity from ``values``, ignoring those its version lacks: one call
    builds the answer for every version of an api."""
    names = _field_names(schema)
    return schema(**{k: v for k, v in values.items() if k in names})


def unsupported_response(api_key: int, version: int, correlation_id: int) -> bytes | None:
    """Kafka's UNSUPPORTED_VERSION answer to a request this broker does not serve.

    ApiVersions at a version above the ones served is answered in v0 with the versions
    served, as Kafka does (the client then retries with one of them). Another api is
    answered at the version asked for, with every error code set to
    UNSUPPORTED_VERSION and everything else empty, when kio knows that version; None
    when it does not (an api key or version no Kafka release defines): then the
    connection closes.
    """
    if api_key == Api.API_VERSIONS:
        return encode_response(api_key, 0, correlation_id, api_versions_response(0, UNSUPPORTED_VERSION))
    try:
        schema = load_response_schema(api_key, version)
        body = _empty(schema)
    except (UnknownAPIKey, UnknownEntity, TypeError, ValueError, LookupError):
        return None
    try:
        return encode_response(api_key, version, correlation_id, body)
    except Exception:  # a schema this generic filler cannot satisfy: close instead
        return None


def _empty(schema: Any) -> Any:
    """An instance of ``schema`` with every required field empty and error codes set
    to UNSUPPORTED_VERSION."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kind = f.metadata.get("kafka_type")
        if kind == "error_code":
            values[f.name] = UNSUPPORTED_VERSION
        elif kind is None:  # an array of nested entities
            values[f.name] = ()
        elif kind in ("timedelta_i32", "timedelta_i64"):
            values[f.name] = timedelta(0)
        elif kind == "string":
            values[f.name] = ""
        elif kind in ("bytes", "records"):
            values[f.name] = b""
        elif kind == "bool":
            values[f.name] = False
        elif kind == "uuid":
            values[f.name] = uuid.UUID(int=0)
        else:
            values[f.name] = 0
    return schema(**values)


def topic_uuid(topic_id: int) -> uuid.UUID:
    """A topic's Kafka id (Metadata v10+, ConsumerGroupHeartbeat's assignments) from its
    identity in the cluster view (the creation zxid of its znode); zero when unknown."""
    return uuid.UUID(int=topic_id & ((1 << 128) - 1)) if topic_id else uuid.UUID(int=0)


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions answer: every api served with its version range."""
    schema = response_schema(Api.API_VERSIONS, version)
    entry = response_schema(Api.API_VERSIONS, version, "ApiVersion")
    keys = tuple(make(entry, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED.items()))
    return make(schema, error_code=error, api_keys=keys, throttle_time=timedelta(0))


__all__ = [
    "Api",
    "FrameDecoder",
    "Request",
    "SUPPORTED",
    "UNSUPPORTED_VERSION",
    "Unsupported",
    "api_versions_response",
    "encode_response",
    "encode_response_parts",
    "make",
    "parse_request",
    "peek_head",
    "response_schema",
    "topic_uuid",
    "unsupported_response",
]

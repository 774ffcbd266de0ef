"""The wire protocol, sans IO: bytes in, frames out, and frames back into bytes.

Nothing here touches a socket, so every byte sequence can be tested and fuzzed. The
broker's asyncio server and the client's blocking connections are thin layers that
feed received bytes to a :class:`FrameDecoder` and write what the ``encode_*``
functions return.

Frame layout (big-endian), declared once in :data:`FRAME_PREFIX`::

    size         u32  bytes after this field: 4 + header_len + len(payload)
    header_len   u32  length of the msgpack header that follows
    header       msgpack map
    payload      raw bytes (message sets in produce requests, log bytes in fetch
                 responses); its layout is described by the header

Request headers carry ``api`` (int), ``v`` (version, int) and ``id`` (correlation id,
int) plus the api's fields; response headers carry the same ``id`` and ``err`` (an
error code from :mod:`broker.common.errors`, 0 for success) plus ``msg`` on errors. Several
requests may be in flight on one connection; responses are matched by ``id``. The
fields of each api are documented in ``docs/protocol.md``; their typed forms, with
the functions that parse and encode them, live in one module per api beside this
one (:mod:`.produce`, :mod:`.fetch`, :mod:`.offsets`, :mod:`.metadata`,
:mod:`.topics`, :mod:`.append_at`), and :mod:`.apis` reads request and response heads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from broker.common.errors import FrameTooLargeError, InvalidRequestError, ProtocolError

FRAME_PREFIX = struct.Struct(">II")
"""size (bytes after this field), header_len."""
PREFIX_SIZE = FRAME_PREFIX.size
SIZE_FIELD = 4

# api keys
PRODUCE = 0
FETCH = 1
OFFSETS = 2
METADATA = 3
CREATE_TOPIC = 4
DELETE_TOPIC = 5
ELECT_LEADERS = 6
ALTER_TOPIC = 7
CREATE_PARTITIONS = 8
SASL_HANDSHAKE = 10
SASL_AUTHENTICATE = 11
INIT_PRODUCER_ID = 12
APPEND_AT = 13
"""Append batches at a stated offset (the offset-preserving mirror, :mod:`.append_at`)."""

API_NAMES = {
    PRODUCE: "produce",
    FETCH: "fetch",
    OFFSETS: "offsets",
    METADATA: "metadata",
    CREATE_TOPIC: "create_topic",
    DELETE_TOPIC: "delete_topic",
    ELECT_LEADERS: "elect_leaders",
    ALTER_TOPIC: "alter_topic",
    CREATE_PARTITIONS: "create_partitions",
    SASL_HANDSHAKE: "sasl_handshake",
    SASL_AUTHENTICATE: "sasl_authenticate",
    INIT_PRODUCER_ID: "init_producer_id",
    APPEND_AT: "append_at",
}
SUPPORTED_VERSIONS = {api: frozenset({1}) for api in API_NAMES}
CURRENT_VERSION = 1

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_prefix_pack = FRAME_PREFIX.pack
_prefix_unpack_from = FRAME_PREFIX.unpack_from


@dataclass(slots=True)
class Frame:
    """One decoded frame: its msgpack header and the raw payload after it."""

    header: dict[str, Any]
    payload: memoryview


def encode_frame(header: dict[str, Any], payload_len: int = 0) -> bytes:
    """Encode a frame's prefix and header; the caller sends ``payload_len`` bytes after.

    Splitting the payload off lets the broker send fetch payloads with sendfile and
    lets producers send message sets without copying them into one buffer.
    """
    head: bytes = _packb(header)
    return _prefix_pack(4 + len(head) + payload_len, len(head)) + head


def encode_request(api: int, correlation_id: int, fields: dict[str, Any], payload_len: int = 0) -> bytes:
    """Encode a request header for ``api`` (prefix included); payload follows."""
    header = {"api": api, "v": CURRENT_VERSION, "id": correlation_id}
    header.update(fields)
    return encode_frame(header, payload_len)


def encode_response(correlation_id: int | None, fields: dict[str, Any] | None = None, payload_len: int = 0) -> bytes:
    """Encode a successful response header (``err`` 0) plus ``fields``."""
    header: dict[str, Any] = {"id": correlation_id, "err": 0}
    if fields:
        header.update(fields)
    return encode_frame(header, payload_len)


def encode_error(correlation_id: int | None, code: int, message: str) -> bytes:
    """Encode an error response: the request failed as a whole."""
    return encode_frame({"id": correlation_id, "err": code, "msg": message})


class FrameDecoder:
    """Turns a byte stream into :class:`Frame` objects.

    ``feed`` bytes as they arrive, then call ``next_frame`` until it returns None
    (more bytes needed). It raises :class:`FrameTooLargeError` for a frame over
    ``max_frame_bytes`` and :class:`ProtocolError` for bytes that cannot be a frame;
    after either the stream cannot be resynchronised and the connection must close.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def pending_frame_size(self) -> int | None:
        """Size of the frame being received (prefix included), once its prefix is in."""
        if self.buffered < PREFIX_SIZE:
            return None
        size: int = _prefix_unpack_from(self._buf, self._pos)[0]
        return SIZE_FIELD + size

    def next_frame(self) -> Frame | None:
        """Return the next whole frame, or None until more bytes are fed."""
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available < PREFIX_SIZE:
            return None
        size, header_len = _prefix_unpack_from(buf, pos)
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(f"frame of {size} bytes exceeds max.request.bytes ({self.max_frame_bytes})")
        if header_len + 4 > size:
            raise ProtocolError(f"frame header length {header_len} does not fit in a frame of {size} bytes")
        if available < SIZE_FIELD + size:
            return None
        start = pos + PREFIX_SIZE
        stop = pos + SIZE_FIELD + size
        view: memoryview
        if pos == 0 and stop == len(buf):
            # The buffer holds exactly this frame (the usual case, and always for a frame
            # larger than one read): the frame keeps the buffer, nothing is copied.
            self._buf = bytearray()
            self._pos = 0
            view = memoryview(buf)[start:]
        else:
            # Copy the frame out (once) so the buffer can be reused while it is in use.
            with memoryview(buf) as whole:
                view = memoryview(bytes(whole[start:stop]))
            self._pos = stop
            if self._pos > 1 << 20 and self._pos * 2 > len(buf):
                del buf[: self._pos]
                self._pos = 0
        try:
            header = msgpack.unpackb(view[:header_len], raw=False, strict_map_key=False)
        except Exception as exc:
            raise ProtocolError(f"frame header is not valid msgpack: {exc}") from None
        if not isinstance(header, dict):
            raise ProtocolError(f"frame header is a {type(header).__name__}, not a map")
        return Frame(header, view[header_len:])


def check_request(frame: Frame) -> tuple[int, int]:
    """Validate a request frame's common fields; return ``(api, correlation_id)``.

    Raises :class:`InvalidRequestError` (whose ``correlation_id`` attribute is set when
    the id could be read) so the server can answer with an error response.
    """
    header = frame.header
    corr = header.get("id")
    api = header.get("api")
    version = header.get("v")
    if type(corr) is not int:
        raise _invalid("request header has no integer 'id' (correlation id)", None)
    if type(api) is not int or type(version) is not int:
        raise _invalid("request header needs integer 'api' and 'v' fields", corr)
    return api, corr


def _invalid(message: str, corr: int | None) -> InvalidRequestError:
    err = InvalidRequestError(message)
    err.correlation_id = corr  # type: ignore[attr-defined]
    return err

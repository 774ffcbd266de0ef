"""Request and response heads, and the parser of each api's typed request (sans IO).

A request frame's header carries ``api``, ``v`` and ``id`` beside the api's fields;
:func:`parse_request_head` checks those three, :data:`REQUEST_PARSERS` turns the rest
into the api's typed request. A response header carries ``id``, ``err`` and, on error,
``msg``; :func:`parse_response_head` reads them and :func:`response_error` builds the
exception they stand for.

Wire code 4 is shared by two errors: :class:`InvalidRequestError` (one request's
fields are wrong; the connection stays open) and :class:`ProtocolError` (the bytes
did not form a frame; the broker closes the connection). The code is not split, so
the wire format does not change; the client tells them apart by the correlation id:
a code-4 answer to a request of its own is an InvalidRequestError, one with a nil id
(the broker could not read which request it was) is a ProtocolError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from broker.common.errors import (
    LogferryError,
    ProtocolError,
    UnsupportedApiError,
    error_for_code,
)
from broker.wire import append_at, fetch, metadata, offsets, produce, producer_id, protocol, sasl, topics
from broker.wire.fields import ANSWER, shown


class RequestHead(NamedTuple):
    """The fields every request header carries."""

    api: int
    """The api key (:data:`broker.wire.protocol.API_NAMES`)."""
    version: int
    """The api version (every api is at version 1)."""
    correlation_id: int
    """Echoed in the answer so a client can match answers to requests."""

    @property
    def name(self) -> str:
        """The api's name, for logs and metrics."""
        return protocol.API_NAMES[self.api]


class ResponseHead(NamedTuple):
    """The fields every response header carries."""

    correlation_id: int | None
    """The request's id; None when the broker could not read it (a bad frame)."""
    error: int
    """0, or the error code of the request as a whole."""
    message: str
    """What went wrong ("" on success)."""


def parse_request_head(header: dict[str, Any]) -> RequestHead:
    """Check a request's ``id``, ``api`` and ``v``.

    Raises :class:`InvalidRequestError` when they are missing or not integers (the
    connection must close: its requests cannot be told apart), and
    :class:`UnsupportedApiError` for an api or version this broker does not serve
    (answered; the connection stays open). Both carry ``correlation_id`` (None when
    it could not be read).
    """
    api, corr = protocol.check_request(protocol.Frame(header, memoryview(b"")))
    version = header["v"]
    if api not in protocol.SUPPORTED_VERSIONS or version not in protocol.SUPPORTED_VERSIONS[api]:
        served = {protocol.API_NAMES[a]: sorted(v) for a, v in protocol.SUPPORTED_VERSIONS.items()}
        err = UnsupportedApiError(f"unsupported api {api} version {version}; this broker serves {served}")
        err.correlation_id = corr  # type: ignore[attr-defined]
        raise err
    return RequestHead(api, version, corr)


REQUEST_PARSERS: dict[int, Callable[[dict[str, Any], memoryview], Any]] = {
    protocol.PRODUCE: produce.parse_produce_request,
    protocol.FETCH: lambda header, _: fetch.parse_fetch_request(header),
    protocol.OFFSETS: lambda header, _: offsets.parse_offsets_request(header),
    protocol.METADATA: lambda header, _: metadata.parse_metadata_request(header),
    protocol.CREATE_TOPIC: lambda header, _: topics.parse_create_topic_request(header),
    protocol.DELETE_TOPIC: lambda header, _: topics.parse_delete_topic_request(header),
    protocol.ELECT_LEADERS: lambda header, _: topics.parse_elect_leaders_request(header),
    protocol.SASL_HANDSHAKE: lambda header, _: sasl.parse_handshake_request(header),
    protocol.SASL_AUTHENTICATE: lambda header, _: sasl.parse_authenticate_request(header),
    protocol.ALTER_TOPIC: lambda header, _: topics.parse_alter_topic_request(header),
    protocol.CREATE_PARTITIONS: lambda header, _: topics.parse_create_partitions_request(header),
    protocol.INIT_PRODUCER_ID: lambda header, _: producer_id.parse_init_producer_id_request(header),
    protocol.APPEND_AT: append_at.parse_append_at_request,
}
"""api key -> ``parse(header, payload)`` returning that api's typed request."""


def parse_request(head: RequestHead, frame: protocol.Frame) -> Any:
    """The typed request of a frame whose head passed :func:`parse_request_head`."""
    return REQUEST_PARSERS[head.api](frame.header, frame.payload)


def parse_response_head(header: Any) -> ResponseHead:
    """Read a response's ``id``, ``err`` and ``msg`` (ProtocolError if malformed)."""
    if type(header) is not dict:
        raise ProtocolError(f"a response header must be a map, got {shown(header)}")
    corr = header.get("id")
    err = header.get("err", 0)
    message = header.get("msg") or ""
    if corr is not None and type(corr) is not int:
        raise ANSWER(f"response 'id' must be an integer or nil, got {shown(corr)}")
    if type(err) is not int:
        raise ANSWER(f"response 'err' must be an integer, got {shown(err)}")
    if type(message) is not str:
        raise ANSWER(f"response 'msg' must be a string, got {shown(message)}")
    return ResponseHead(corr, err, message)


def response_error(head: ResponseHead) -> LogferryError | None:
    """The exception a response's ``err`` stands for; None on success.

    Code 4 without a correlation id is a :class:`ProtocolError` (the broker read no
    request and closes the connection); with one it is an :class:`InvalidRequestError`.
    """
    if not head.error:
        return None
    if head.error == ProtocolError.code and head.correlation_id is None:
        return ProtocolError(head.message or "the broker could not read a frame on this connection and closed it")
    return error_for_code(head.error, head.message)


def connection_error(header: Any) -> LogferryError:
    """The exception for an error answer that matches no request of the client's: the
    broker answered a frame it could not read and closes the connection."""
    try:
        head = parse_response_head(header)
    except ProtocolError as exc:
        return exc
    return response_error(head) or ProtocolError("the broker answered a request this connection did not send")


__all__ = [
    "REQUEST_PARSERS",
    "connection_error",
    "RequestHead",
    "ResponseHead",
    "parse_request",
    "parse_request_head",
    "parse_response_head",
    "response_error",
]

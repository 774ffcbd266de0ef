"""Appends at a stated offset (the append-at api): the offset-preserving mirror's writer.

A :class:`Appender` sends each partition's batches to its leader with the offset they
must land at; the leader appends only if its log ends exactly there (see
:mod:`broker.wire.append_at`). Nothing is retried here: a failed or timed-out part is
reported to the caller, who asks the leader where its log ends (:meth:`Appender.query`)
and carries on from there, so a lost answer never copies a batch twice.

Answers arrive on the connections' reader threads; ``on_done`` runs there. Requests to
one broker share one connection and are applied in order, so a partition's parts sent
one after another land one after another (or the later ones mismatch).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Sequence

from broker.client.cluster import Cluster
from broker.client.connection import ResponseFuture
from broker.common.errors import (
    LogferryError,
    OffsetMismatchError,
    ProtocolError,
    RequestTimedOutError,
    error_for_code,
)
from broker.common.retry import Retry
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.wire import protocol
from broker.wire.append_at import (
    QUERY,
    AppendAtAnswerPart,
    AppendAtPart,
    encode_append_at_request,
    parse_append_at_answer,
)

OnDone = Callable[[AppendAtPart, "LogferryError | None", "AppendAtAnswerPart | None"], None]
"""``on_done(part, error, answer)``: error None means appended; ``answer`` has the ends."""

ACKS = {1: 1, "all": -1, -1: -1}


def part_error(answer: AppendAtAnswerPart) -> LogferryError | None:
    """The exception an answer part stands for (None: appended or answered)."""
    if not answer.error:
        return None
    error = error_for_code(answer.error, answer.message or "")
    if isinstance(error, OffsetMismatchError):
        error.start, error.end = answer.start, answer.end
    return error


class Appender:
    """Conditional appends to a cluster's partition leaders; see the module docstring."""

    def __init__(
        self,
        zk: str,
        *,
        acks: int | str = 1,
        request_timeout: float = 30.0,
        max_request_bytes: int = 1024 * 1024,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
    ):
        """``tls``/``sasl``: how to reach and authenticate with the brokers (as every client)."""
        if acks not in ACKS:
            raise ValueError(f"acks must be 1 or 'all', not {acks!r}")
        self.acks = ACKS[acks]
        self.request_timeout = request_timeout
        self.max_request_bytes = max_request_bytes
        self.cluster = Cluster(zk, None, request_timeout, tls, sasl, listener)
        self._lock = threading.Lock()
        self._inflight: dict[int, tuple[float, ResponseFuture, list[AppendAtPart], OnDone, object]] = {}
        self._ids = 0

    # -- where a log ends --------------------------------------------------------------

    def query(self, topic: str, partition: int, deadline_s: float = 60.0) -> AppendAtAnswerPart:
        """The leader's answer for ``topic-partition``: its start, end and last batch.

        Retries (with backoff, up to ``deadline_s``) while the leader is unknown, moving
        or unreachable; raises the last error after that.
        """
        retry = Retry(initial=0.1, maximum=2.0, deadline=deadline_s)
        while True:
            try:
                conn = self.cluster.connection(self.cluster.leader_address(topic, partition))
                frame = conn.call(
                    protocol.APPEND_AT,
                    encode_append_at_request(1, [AppendAtPart(topic, partition, QUERY, b"")]),
                    self.request_timeout,
                )
                answers = parse_append_at_answer(frame.header)
                if len(answers) != 1:
                    raise ProtocolError(f"broker answered {len(answers)} parts to one query")
                error = part_error(answers[0])
                if error is not None:
                    raise error
                return answers[0]
            except LogferryError as exc:
                if not exc.retriable or retry.expired:
                    raise
                self.cluster.forget(topic)
                retry.sleep()

    # -- appending ---------------------------------------------------------------------

    def send(self, parts: Sequence[AppendAtPart], on_done: OnDone) -> None:
        """Send ``parts`` (grouped by leader, in order); ``on_done`` once per part."""
        by_leader: dict[tuple[str, int], list[AppendAtPart]] = {}
        for part in parts:
            try:
                address = self.cluster.leader_address(part.topic, part.partition)
            except LogferryError as exc:
                self.cluster.forget(part.topic)
                on_done(part, exc, None)
                continue
            by_leader.setdefault(address, []).append(part)
        for address, leader_parts in by_leader.items():
            request: list[AppendAtPart] = []
            size = 0
            for part in leader_parts:
                if request and size + len(part.data) > self.max_request_bytes:
                    self._send(address, request, on_done)
                    request, size = [], 0
                request.append(part)
                size += len(part.data)
            if request:
                self._send(address, request, on_done)

    def _send(self, address: tuple[str, int], parts: list[AppendAtPart], on_done: OnDone) -> None:
        with self._lock:
            self._ids += 1
            rid = self._ids
        try:
            conn = self.cluster.connection(address)
            future = conn.request(
                protocol.APPEND_AT,
                encode_append_at_request(self.acks, parts),
                [p.data for p in parts],
                callback=lambda f: self._answered(rid, f),
            )
        except LogferryError as exc:
            self._fail(parts, on_done, exc)
            return
        assert future is not None
        with self._lock:
            if not future.done():
                self._inflight[rid] = (time.monotonic() + self.request_timeout, future, parts, on_done, conn)
                return
        self._answered(rid, future, (parts, on_done))

    def _answered(
        self, rid: int, future: ResponseFuture, entry: tuple[list[AppendAtPart], OnDone] | None = None
    ) -> None:
        with self._lock:
            held = self._inflight.pop(rid, None)
        if held is not None:
            parts, on_done = held[2], held[3]
        elif entry is not None:
            parts, on_done = entry
        else:
            return  # expired already, or answered before it was registered (handled there)
        try:
            frame = future.result(0)
            answers = parse_append_at_answer(frame.header)
        except LogferryError as exc:
            self._fail(parts, on_done, exc)
            return
        for index, part in enumerate(parts):  # one answer per part, in order
            if index >= len(answers):
                on_done(part, ProtocolError("the broker did not answer this part"), None)
                continue
            answer = answers[index]
            error = part_error(answer)
            if error is not None and error.retriable:
                self.cluster.forget(part.topic)
            on_done(part, error, answer)

    def _fail(self, parts: list[AppendAtPart], on_done: OnDone, error: LogferryError) -> None:
        for part in parts:
            self.cluster.forget(part.topic)
            on_done(part, error, None)

    def expire(self, now: float | None = None) -> int:
        """Fail requests unanswered for ``request_timeout`` (a stalled broker: TCP stays
        up) and close their connections; returns how many expired."""
        now = time.monotonic() if now is None else now
        with self._lock:
            late = [rid for rid, held in self._inflight.items() if held[0] <= now]
            entries = [self._inflight.pop(rid) for rid in late]
        for _, _, parts, on_done, conn in entries:
            with contextlib.suppress(Exception):
                conn.close()  # type: ignore[attr-defined]
            self._fail(
                parts, on_done, RequestTimedOutError(f"no answer to an append_at within {self.request_timeout:.0f}s")
            )
        return len(entries)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        with self._lock:
            return len(self._inflight)

    def close(self) -> None:
        """Close every connection (unanswered parts are reported as failed by them)."""
        self.cluster.close()


__all__ = ["AppendAtAnswerPart", "AppendAtPart", "Appender", "OnDone", "part_error"]

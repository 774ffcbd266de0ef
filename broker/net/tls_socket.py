"""TLS over a blocking socket that one thread reads while other threads write.

The client's :class:`~broker.client.connection.Connection` is full duplex: a reader
thread sits in ``recv`` while producer threads send. An ``ssl.SSLSocket`` must not be
used like that: OpenSSL forbids concurrent calls on one ``SSL`` object, and CPython
3.11 does not serialize them (a TLS 1.3 session ticket or key update arriving while
another thread writes corrupts the connection). So the TLS state lives in an
``ssl.SSLObject`` over memory BIOs, touched only under a lock, and the plain socket
does the blocking IO outside that lock: reads and writes never wait on each other's
network IO, and records reach the wire in the order OpenSSL produced them.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any, Sequence, cast

RECV_CHUNK = 256 * 1024
WRITE_CHUNK = 4 * 1024 * 1024
"""Plaintext bytes encrypted per ``SSLObject.write`` (and sent per ``sendall``).

Each of those calls releases the GIL, and a thread that gives the GIL up while another
thread runs Python (a producer's application thread calling ``send()``) gets it back
only after the switch interval (5 ms). With 256 KiB pieces a producer's sender thread
waited twice per 256 KiB and fell behind its application thread (a whole-run backlog
left for ``flush()``: default batching at 70% of plaintext); with 4 MiB it waits twice
per 4 MiB, as plaintext waits once per request. OpenSSL still cuts 16 KiB records; the
price is a memory BIO that keeps up to this much (plus record overhead) per connection
that once sent this much at a time."""


STAGE_BYTES = 1024 * 1024
"""Plaintext bytes :meth:`TlsSocket.sendall_parts` gathers in its staging buffer before
one ``SSLObject.write`` and one socket write.

The size of one core's L2 cache here: the staged plaintext, the ciphertext in the
outgoing BIO and the bytes ``read`` makes of it stay in cache between the passes over
them. With 4 MiB every pass went to main memory: 60-70 ns more client CPU per 200 B
message in the batch-50 benchmark (perf: memmove and page faults, not AES)."""

SPARE_STAGES = 2
"""Staging buffers kept for reuse between sends (a producer's one sender thread keeps
reusing the same one)."""

_spare_stages: list[memoryview] = []  # list.pop and list.append are atomic under the GIL


def _take_stage() -> memoryview:
    try:
        return _spare_stages.pop()
    except IndexError:
        return memoryview(bytearray(STAGE_BYTES))


def _give_back(stage: memoryview) -> None:
    if len(_spare_stages) < SPARE_STAGES:
        _spare_stages.append(stage)


class TlsSocket:
    """A TLS connection with the part of the socket interface the client uses:
    ``sendall``, ``recv_into``, ``shutdown``, ``close``, ``getpeercert``, ``version``.

    Build it with :func:`wrap_client`, which runs the handshake.
    """

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None):
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False,
                                     server_hostname=server_hostname)
        self._tls_lock = threading.Lock()  # guards the SSLObject and both BIOs
        self._recv_buffer = bytearray(RECV_CHUNK)  # only the reading thread uses it
        self._recv_view = memoryview(self._recv_buffer)
        self._send_lock = threading.Lock()  # drain-and-send is one step: records in order

    # -- handshake --------------------------------------------------------------------

    def handshake(self) -> None:
        """Run the client handshake on the calling thread (before others use it)."""
        while True:
            try:
                with self._tls_lock:
                    self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self._feed():
                    raise ConnectionResetError("the peer closed the connection during "
                                               "the TLS handshake") from None
            except ssl.SSLError:
                try:
                    self._flush()  # tell the peer why (a TLS alert) before giving up
                except OSError:
                    pass
                raise

    # -- IO ---------------------------------------------------------------------------

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and write it all to the socket, :data:`WRITE_CHUNK` bytes
        per encryption and per socket write (few GIL hand-offs for a large request)."""
        view = memoryview(data).cast("B")
        with self._send_lock:
            for start in range(0, len(view), WRITE_CHUNK):
                chunk = view[start:start + WRITE_CHUNK]
                with self._tls_lock:  # inline: one-message requests come this way
                    while chunk:
                        chunk = chunk[self._tls.write(chunk):]
                    out = self._outgoing.read()
                if out:
                    self._sock.sendall(out)

    def sendall_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Encrypt and write ``parts`` (a request's header and its batches) as one stream.

        OpenSSL encrypts from contiguous memory, and each ``SSLObject.write`` gives the
        GIL up: one call per batch (up to 256 KiB) would leave the sender waiting for
        the GIL behind a busy application thread (see :data:`WRITE_CHUNK`). So the parts are
        copied into a staging buffer of :data:`STAGE_BYTES` that is reused from one
        request to the next, and each full stage is encrypted and sent at once. Joining
        them into a fresh buffer per request instead (up to 16 MiB, then read back out
        of the BIO as another) cost page faults and passes through main memory: perf
        put that above AES-GCM itself. A part that fills a whole stage by itself is
        encrypted where it is."""
        with self._send_lock:
            stage = _take_stage()
            try:
                filled = 0
                for part in parts:
                    view = memoryview(part).cast("B")
                    while view:
                        if not filled and len(view) >= len(stage):
                            self._encrypt_and_send(view[:len(stage)])
                            view = view[len(stage):]
                            continue
                        take = min(len(view), len(stage) - filled)
                        stage[filled:filled + take] = view[:take]
                        filled += take
                        view = view[take:]
                        if filled == len(stage):
                            self._encrypt_and_send(stage)
                            filled = 0
                if filled:
                    self._encrypt_and_send(stage[:filled])
            finally:
                _give_back(stage)

    def _encrypt_and_send(self, chunk: memoryview) -> None:
        """One ``SSLObject.write`` of ``chunk`` and one socket write of its records (the
        caller holds the send lock)."""
        with self._tls_lock:
            while chunk:
                chunk = chunk[self._tls.write(chunk):]
            out = self._outgoing.read()
        if out:
            self._sock.sendall(out)

    def recv_into(self, buffer: bytearray | memoryview) -> int:
        """Decrypt into ``buffer``; 0 once the peer has closed the connection.

        Decrypts every whole record already received (OpenSSL returns one record, at
        most 16 KiB, per read), so a large answer costs one call per socket read, not
        one per record."""
        view = memoryview(buffer).cast("B")
        size = len(view)
        while True:
            n, closed = 0, False
            with self._tls_lock:
                try:
                    while n < size:
                        # With a buffer, read() returns the byte count (typeshed: bytes).
                        got = cast(int, self._tls.read(size - n, view[n:]))
                        if not got:
                            closed = n == 0
                            break
                        n += got
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:  # the peer's close_notify
                    closed = n == 0
                reply = self._outgoing.pending  # e.g. an answer to a key update
            if reply:
                self._flush()
            if n or closed:
                return n
            if not self._feed():
                return 0  # closed without close_notify: the caller sees end of stream

    def _feed(self) -> bool:
        """Read ciphertext from the socket into the TLS object; False at end of stream.

        Reads into one reused buffer (no fresh bytes object per read) that the memory
        BIO copies from."""
        n = self._sock.recv_into(self._recv_buffer)
        with self._tls_lock:
            if n:
                self._incoming.write(self._recv_view[:n])
            else:
                self._incoming.write_eof()
        return bool(n)

    def _flush(self) -> None:
        """Send what the TLS object has produced (handshake records, replies)."""
        with self._send_lock:
            with self._tls_lock:
                out = self._outgoing.read()
            if out:
                self._sock.sendall(out)

    # -- socket passthrough -----------------------------------------------------------

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self._sock.setsockopt(level, option, value)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    def getpeercert(self) -> dict[str, Any] | None:
        """The peer's verified certificate (see ``ssl.SSLSocket.getpeercert``)."""
        return self._tls.getpeercert()

    def version(self) -> str | None:
        """The negotiated protocol, e.g. ``"TLSv1.3"``."""
        return self._tls.version()


def wrap_client(sock: socket.socket, context: ssl.SSLContext,
                server_hostname: str | None) -> TlsSocket:
    """Run a client handshake over the connected ``sock`` and return the TLS socket.

    Raises ``ssl.SSLError`` (verification, protocol) or ``OSError`` (the socket broke or
    its timeout expired) for :mod:`broker.net.socket_errors` to map.
    """
    tls = TlsSocket(sock, context, server_hostname)
    tls.handshake()
    return tls


__all__ = ["TlsSocket", "wrap_client"]

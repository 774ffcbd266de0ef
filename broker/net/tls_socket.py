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

import contextlib
import socket
import ssl
import threading
from collections.abc import Sequence
from typing import Any, cast

RECV_CHUNK = 256 * 1024

WRITE_BYTES = 4 * 1024 * 1024
"""Most plaintext bytes encrypted per ``SSLObject.write`` and sent per ``sendall``: a
request up to this size costs one encryption and one socket write, however many
batches it carries.

Each of those calls gives the GIL up, and a thread that does so while another thread
runs Python (a producer's application thread calling ``send()``) gets it back only after
the switch interval (5 ms). So while the application is busy, a sender thread moves
about one write's bytes per two such waits. A plaintext sender keeps up because one
``sendmsg`` carries its whole request, and its requests grow with its backlog; a TLS
sender that encrypted and sent per 1 MiB moved at most about 100 MB/s, fell behind a
Python loop calling ``send()`` (about 250 MB/s of 200 B messages here) and left the
backlog for ``flush()``: default batching at 60-78% of plaintext.

Larger is not better past this: at 16 MiB the staged plaintext, the ciphertext in the
outgoing BIO and the bytes read out of it no longer stay in the CPU's cache, and the
BIO's buffer (kept per connection) grows in many reallocations on a new connection.
``benchmarks/tls_write_size.py --sizes-mib 1,4,16 --runs 5`` (broker_throughput.py's
producer cases on one TLS broker, median of 5, client CPU per message):

====== ====================== ======================
write  1 message per send     50 per send
====== ====================== ======================
1 MiB  777k msgs/s, 679 ns    953k msgs/s, 341 ns
4 MiB  910k msgs/s, 682 ns    967k msgs/s, 349 ns
16 MiB 834k msgs/s, 817 ns    904k msgs/s, 480 ns
====== ====================== ======================

With a broker twice as fast (its writes in pieces, ``broker.storage.segment``), 1, 2 and
4 MiB came out within the runs' spread of each other and 16 MiB still behind.
"""

MIN_STAGE_BYTES = 1024 * 1024
"""The smallest staging buffer made; a request larger than the buffer at hand gets one
of its own size (rounded up to a MiB), which is then kept for the next."""

SPARE_STAGES = 2
"""Staging buffers kept for reuse between sends (a producer's one sender thread keeps
reusing the same one)."""

_spare_stages: list[memoryview] = []  # list.pop and list.append are atomic under the GIL


def _take_stage(size: int) -> memoryview:
    """A staging buffer of at least ``size`` bytes: a kept one when it is large enough
    (a fresh one costs a page fault per 4 KiB page)."""
    try:
        stage = _spare_stages.pop()
    except IndexError:
        stage = None
    if stage is None or len(stage) < size:
        rounded = -(-max(size, MIN_STAGE_BYTES) // MIN_STAGE_BYTES) * MIN_STAGE_BYTES
        stage = memoryview(bytearray(rounded))
    return stage


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
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname)
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
                    raise ConnectionResetError("the peer closed the connection during the TLS handshake") from None
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    self._flush()  # tell the peer why (a TLS alert) before giving up
                raise

    # -- IO ---------------------------------------------------------------------------

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and write it all to the socket: one encryption and one
        socket write per :data:`WRITE_BYTES` (few GIL hand-offs for a large request)."""
        view = memoryview(data).cast("B")
        with self._send_lock:  # inline: one-message requests come this way
            for start in range(0, len(view), WRITE_BYTES):
                self._encrypt_and_send(view[start : start + WRITE_BYTES])

    def sendall_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Encrypt and write ``parts`` (a request's header and its batches) as one stream.

        OpenSSL encrypts from contiguous memory, and each ``SSLObject.write`` gives the
        GIL up: one call per batch would leave the sender waiting for the GIL behind a
        busy application thread (see :data:`WRITE_BYTES`). So the parts are copied into
        a staging buffer as large as the request (up to :data:`WRITE_BYTES`), reused
        from one request to the next, and encrypted and sent at once. A fresh buffer per
        request instead (then read back out of the BIO as another) cost a page fault
        per 4 KiB: perf put that above AES-GCM itself. A part that fills a whole stage
        by itself (a request above :data:`WRITE_BYTES`) is encrypted where it is."""
        total = sum(map(len, parts))
        with self._send_lock:
            stage = _take_stage(min(total, WRITE_BYTES))
            room = min(len(stage), WRITE_BYTES)
            try:
                filled = 0
                for part in parts:
                    view = memoryview(part).cast("B")
                    while view:
                        if not filled and len(view) >= room:
                            self._encrypt_and_send(view[:room])
                            view = view[room:]
                            continue
                        take = min(len(view), room - filled)
                        stage[filled : filled + take] = view[:take]
                        filled += take
                        view = view[take:]
                        if filled == room:
                            self._encrypt_and_send(stage[:room])
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
                chunk = chunk[self._tls.write(chunk) :]
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


def wrap_client(sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None) -> TlsSocket:
    """Run a client handshake over the connected ``sock`` and return the TLS socket.

    Raises ``ssl.SSLError`` (verification, protocol) or ``OSError`` (the socket broke or
    its timeout expired) for :mod:`broker.net.socket_errors` to map.
    """
    tls = TlsSocket(sock, context, server_hostname)
    tls.handshake()
    return tls


__all__ = ["TlsSocket", "wrap_client"]

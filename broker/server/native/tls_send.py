"""Sending segment bytes on a TLS connection, where ``sendfile`` cannot go.

The kernel's ``sendfile`` moves file pages to a plain socket; TLS must encrypt them in
user space first. asyncio's ``loop.sendfile(..., fallback=True)`` does that, but it is
slow here (a thread hop and a wait for the socket per 256 KiB) and it seeks the file
object it is given, while a segment's reader is shared by every fetch of that segment
(a consumer and a follower at once would send each other's bytes). So a TLS send reads
the range with ``pread`` through a duplicate of the segment's descriptor (``pread``
leaves the shared position alone, and the duplicate stays valid if retention closes
the segment meanwhile) and writes it to the TLS transport, which encrypts it.

It goes in pieces of :data:`CHUNK_BYTES`, read on the event loop's thread (as
``sendfile`` reads the pages of a plaintext fetch there: no thread hop, which cost more
than the read). Each piece is encrypted and handed to the socket before the next is
read, so the client decrypts the first piece while the broker encrypts the second (the
two overlap on two cores), and OpenSSL's output buffer never holds more than one piece:
one 1 MiB write made it grow, zero and copy itself several times.

Memory stays bounded per connection: before each piece, wait until the transport is
writable, i.e. asyncio has not paused the connection's writing because more than
``max_unsent_bytes_per_connection`` bytes are queued on it (the connection's
``pause_writing``/``resume_writing`` drive ``writable``), so a client that pipelines
fetches and does not read cannot make the broker buffer without end; the connection
also stops reading requests then (broker/server/native/connection.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import BinaryIO

CHUNK_BYTES = 256 * 1024
"""Bytes read and encrypted per step: 16 TLS records of 16 KiB. Large enough that the
per-step cost (a ``pread``, a ``send``, a few Python calls) is small next to the
encryption, small enough that the client starts decrypting early."""


async def send_file_range(
    transport: asyncio.WriteTransport,
    file: BinaryIO,
    position: int,
    count: int,
    writable: Callable[[], Awaitable[None]],
    prefix: bytes = b"",
    chunk_bytes: int = CHUNK_BYTES,
) -> None:
    """Write ``prefix`` (a response's head, sent with the first piece so both leave in
    one ``send``) and then ``count`` bytes of ``file`` from ``position`` to a TLS
    ``transport``, each piece once ``writable()`` returns (writing is not paused)."""
    fd = os.dup(file.fileno())
    try:
        done = 0
        while done < count:
            await writable()
            if transport.is_closing():
                raise ConnectionResetError("the connection closed while an answer was queued")
            size = min(chunk_bytes, count - done)
            data = os.pread(fd, size, position + done)
            if len(data) != size:
                raise OSError(f"segment shorter than expected: read {done + len(data)} of {count} bytes")
            if prefix:
                transport.writelines((prefix, data))
                prefix = b""
            else:
                transport.write(data)
            done += size
    finally:
        os.close(fd)
    if prefix:  # nothing to read: the head alone
        transport.write(prefix)


__all__ = ["CHUNK_BYTES", "send_file_range"]

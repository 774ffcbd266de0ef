"""Sending segment bytes on a TLS connection, where ``sendfile`` cannot go.

The kernel's ``sendfile`` moves file pages to a plain socket; TLS must encrypt them in
user space first. asyncio's ``loop.sendfile(..., fallback=True)`` does that, but it is
slow here (a thread hop and a wait for the socket per 256 KiB: a 1 MiB fetch took about
8 ms) and it seeks the file object it is given, while a segment's reader is shared by
every fetch of that segment (a consumer and a follower at once would send each other's
bytes). So a TLS send reads the whole range with one ``pread`` in a worker thread,
through a duplicate of the segment's descriptor (``pread`` leaves the shared position
alone, and the duplicate stays valid if retention closes the segment meanwhile), and
writes it to the TLS transport at once, which encrypts it.

Memory stays bounded per connection: before reading, wait until the transport is
writable, i.e. asyncio has not paused the connection's writing because more than
``max_unsent_bytes_per_connection`` bytes are queued on it (the connection's
``pause_writing``/``resume_writing`` drive ``writable``), so a client that pipelines
fetches and does not read cannot make the broker buffer without end; the connection
also stops reading requests then (broker/server/connection.py).
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, BinaryIO, Callable

async def send_file_range(loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport,
                          file: BinaryIO, position: int, count: int,
                          writable: Callable[[], Awaitable[None]]) -> None:
    """Write ``count`` bytes of ``file`` from ``position`` to a TLS ``transport``, once
    ``writable()`` returns (the transport's writing is not paused)."""
    await writable()
    if transport.is_closing():
        raise ConnectionResetError("the connection closed while an answer was queued")
    fd = os.dup(file.fileno())
    try:
        data = await loop.run_in_executor(None, os.pread, fd, count, position)
    finally:
        os.close(fd)
    if len(data) != count:
        raise OSError(f"segment shorter than expected: read {len(data)} of {count} bytes")
    if transport.is_closing():
        raise ConnectionResetError("the connection closed while an answer was read")
    transport.write(data)


__all__ = ["send_file_range"]

"""Sending segment bytes on a TLS connection, where ``sendfile`` cannot go.

The kernel's ``sendfile`` moves file pages to a plain socket; TLS must encrypt them in
user space first, so asyncio's ``loop.sendfile(..., fallback=True)`` reads the file and
writes the bytes. That fallback seeks the file object it is given and reads from its
current position, but a segment's reader is shared by every fetch of that segment (a
consumer and a follower at once): two fallbacks interleaving would send each other's
bytes. So each TLS send reads through its own open file description of the segment
(``/proc/self/fd/N``: valid even if retention has unlinked the file meanwhile), whose
position no one else moves.
"""

from __future__ import annotations

import asyncio
from typing import BinaryIO


async def send_file_range(loop: asyncio.AbstractEventLoop, transport: asyncio.BaseTransport,
                          file: BinaryIO, position: int, count: int) -> None:
    """Write ``count`` bytes of ``file`` from ``position`` to a TLS ``transport``."""
    with open(f"/proc/self/fd/{file.fileno()}", "rb", buffering=0) as private:
        await loop.sendfile(transport, private, position, count,  # type: ignore[arg-type]
                            fallback=True)


__all__ = ["send_file_range"]

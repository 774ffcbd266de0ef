"""Segment.append: large appends go to the page cache in pieces, all or nothing."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.storage import segment as segment_module
from broker.storage.segment import WRITE_PIECE_BYTES, Segment


def spy_on_writes(monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None) -> list[int]:
    """Record the size of every ``os.write``; the call numbered ``fail_at`` (from 0)
    fails with ENOSPC instead."""
    sizes: list[int] = []
    real_write: Callable[[int, bytes | memoryview], int] = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        if fail_at is not None and len(sizes) == fail_at:
            sizes.append(-1)
            raise OSError(errno.ENOSPC, "No space left on device")
        sizes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(segment_module.os, "write", write)
    return sizes


def test_a_large_append_is_written_in_pieces_and_lands_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large writes fill large page-cache folios, which cost up to ten times as much
    per byte on a VM that reports free memory to its host (WRITE_PIECE_BYTES)."""
    seg = Segment.create(tmp_path, 0)
    data = os.urandom(3 * WRITE_PIECE_BYTES + 12345)
    small = b"s" * 100
    sizes = spy_on_writes(monkeypatch)
    seg.append(small)
    seg.append(bytearray(data))
    seg.append(memoryview(small))
    assert sizes == [100, WRITE_PIECE_BYTES, WRITE_PIECE_BYTES, WRITE_PIECE_BYTES, 12345, 100]
    assert seg.size == len(data) + 200
    assert (tmp_path / seg.path.name).read_bytes() == small + data + small


def test_an_append_that_fails_midway_leaves_none_of_its_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg = Segment.create(tmp_path, 0)
    seg.append(b"kept" * 25)
    spy_on_writes(monkeypatch, fail_at=2)  # two pieces written, the third fails
    with pytest.raises(OSError) as failure:
        seg.append(b"x" * (3 * WRITE_PIECE_BYTES))
    assert failure.value.errno == errno.ENOSPC
    assert seg.size == 100 and not seg.damaged
    assert seg.path.read_bytes() == b"kept" * 25

"""Fetch answers with few log bytes are read and written at once; large ones keep
sendfile. Driven without sockets: a stand-in transport records what is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.server.native.connection import SMALL_FILE_REPLY, BrokerConnection
from broker.server.services.responder import FileReply
from broker.storage.partition_log import FileSlice
from tests.unit.test_connection_limits import Transport, _broker


def _connect() -> tuple[BrokerConnection, Transport]:
    conn = BrokerConnection(_broker(max_unsent=1 << 30))  # type: ignore[arg-type]
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _segment(tmp_path: Path, data: bytes):
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    return open(path, "rb")


def test_a_small_file_reply_is_one_write_of_head_and_log_bytes(tmp_path: Path) -> None:
    async def scenario() -> None:
        conn, transport = _connect()
        data = bytes(range(256)) * 40
        with _segment(tmp_path, data) as f:
            conn.send(
                FileReply(b"HEAD", [FileSlice(f, 100, 300, 100), FileSlice(f, 0, 0, 0), FileSlice(f, 2000, 50, 2000)])
            )
            # written during send: no task, no sendfile, nothing queued
            assert transport.written == [b"HEAD" + data[100:400] + data[2000:2050]]
            assert not conn.tasks and not conn._queue and not conn._sending

    asyncio.run(scenario())


def test_a_large_file_reply_is_left_to_sendfile(tmp_path: Path) -> None:
    async def scenario() -> None:
        conn, transport = _connect()
        with _segment(tmp_path, bytes(SMALL_FILE_REPLY + 1)) as f:
            conn.send(FileReply(b"HEAD", [FileSlice(f, 0, SMALL_FILE_REPLY + 1, 0)]))
            assert transport.written == [] and conn._sending  # the sending task has it
            for task in list(conn.tasks):
                task.cancel()
            await asyncio.gather(*conn.tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_a_file_reply_that_cannot_be_read_whole_closes_instead_of_a_short_frame(tmp_path: Path) -> None:
    async def scenario() -> None:
        conn, transport = _connect()
        with _segment(tmp_path, bytes(100)) as f:  # shorter than the slice (truncated)
            conn.send(FileReply(b"HEAD", [FileSlice(f, 0, 200, 0)]))
        assert transport.written == [] and transport.aborted

    asyncio.run(scenario())


def test_a_small_reply_after_a_queued_one_keeps_its_place(tmp_path: Path) -> None:
    async def scenario() -> None:
        conn, transport = _connect()
        conn._sending = True  # a sendfile is under way: later answers queue behind it
        with _segment(tmp_path, b"abcdef") as f:
            conn.send(FileReply(b"H1", [FileSlice(f, 0, 3, 0)]))
            conn.send(b"second")
            assert transport.written == []
            conn._sending = False
            await conn._drain()
        assert transport.written == [b"H1abc", b"second"]
        assert conn._queued_bytes == 0

    asyncio.run(scenario())

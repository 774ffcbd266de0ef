"""A follower whose leader stops answering drops the connection and connects again
(the fetch loop's answer timeout is a timer handle, not asyncio.timeout)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from broker.common.background import BackgroundTasks
from broker.replication import fetcher as fetcher_module
from broker.replication.fetcher import ReplicaFetcher
from tests.unit.test_replica_fetcher_stop import _manager


async def _silent_leader_scenario() -> tuple[int, int]:
    connections = [0]
    requests = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        try:
            while await reader.read(1 << 16):  # reads every fetch, answers none
                requests[0] += 1
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fetcher = ReplicaFetcher(_manager(port), leader=1)  # type: ignore[arg-type]
    fetcher.add(
        SimpleNamespace(
            key=("t", 0),
            epoch=0,
            retry_at=0.0,  # type: ignore[arg-type]
            reconcile_at=None,
            throttle=0,
            leader_end=0,
        )
    )
    fetcher.start(BackgroundTasks())
    try:
        async with asyncio.timeout(10):
            while connections[0] < 2:  # timed out on the first, connected again
                await asyncio.sleep(0.01)
    finally:
        await fetcher.stop()
        server.close()
        await server.wait_closed()
    return connections[0], requests[0]


def test_a_leader_that_never_answers_is_dropped_and_reconnected(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fetcher_module, "RESPONSE_GRACE_S", 0.1)
    with caplog.at_level(logging.INFO, logger="logferry.replication"):
        connections, requests = asyncio.run(_silent_leader_scenario())
    assert connections >= 2 and requests >= 1
    assert any("did not answer a fetch" in r.getMessage() for r in caplog.records)

"""A follower's fetcher stops when asked, whatever its fetch is doing at that moment.

Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives while the awaited
call is completing; a fetcher built on it could miss its stop and keep a stopping
broker alive for ever (seen in the chaos test). Here a fake leader on loopback answers
every fetch at once, so stops land at every point of the fetch loop, many times.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.common.background import BackgroundTasks
from broker.coordination.registry import BrokerInfo
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.throttle import Throttle
from broker.wire import protocol
from broker.wire.fetch import ReplicaFetchAnswerPart, encode_fetch_answer, parse_fetch_request

STOPS = 300


async def _instant_leader() -> tuple[asyncio.AbstractServer, int, list[int], set[asyncio.StreamWriter]]:
    """A leader that answers each replica fetch with an empty part at once."""
    answered = [0]
    connections: set[asyncio.StreamWriter] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = protocol.FrameDecoder(1 << 20)
        connections.add(writer)
        try:
            while chunk := await reader.read(1 << 16):
                decoder.feed(chunk)
                while (frame := decoder.next_frame()) is not None:
                    request = parse_fetch_request(frame.header)
                    parts = [ReplicaFetchAnswerPart(p.topic, p.partition, 0, None, 0, 0, 0, 0) for p in request.parts]
                    writer.write(protocol.encode_response(frame.header["id"], encode_fetch_answer(parts)))
                    answered[0] += 1
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            connections.discard(writer)
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], answered, connections


def _manager(port: int) -> SimpleNamespace:
    config = SimpleNamespace(replica_fetch_wait_max_ms=0, replica_fetch_max_bytes=1 << 20)
    view = SimpleNamespace(brokers={1: BrokerInfo("127.0.0.1", port)})
    services = SimpleNamespace(
        leader_ssl_context=None, leader_server_hostname=None, leader_sasl=None, leader_listener="default"
    )
    return SimpleNamespace(
        config=config,
        me=2,
        view=view,
        services=services,
        throttle=Throttle(),
        fetch_position=lambda replica: 0,
        on_fetched=lambda *args: None,
    )


async def _start_and_stop_many_times() -> tuple[int, int]:
    server, port, answered, connections = await _instant_leader()
    manager = _manager(port)
    replica = SimpleNamespace(key=("t", 0), epoch=0, retry_at=0.0, reconcile_at=None, throttle=0, leader_end=0)
    missed = 0
    lost: asyncio.Future | None = None
    try:
        for i in range(STOPS):
            fetcher = ReplicaFetcher(manager, leader=1)  # type: ignore[arg-type]
            fetcher.add(replica)  # type: ignore[arg-type]
            fetcher.start(BackgroundTasks())
            before = answered[0]
            async with asyncio.timeout(5.0):  # wait until this fetcher is fetching
                while answered[0] == before:
                    await asyncio.sleep(0.001)
            for _ in range(i % 7):  # then stop after a varying number of loop turns
                await asyncio.sleep(0)
            # asyncio.wait, not a timeout around the stop: cancelling stop() would
            # cancel into the same fetcher task and could be lost just the same.
            stopping = asyncio.ensure_future(fetcher.stop())
            await asyncio.wait([stopping], timeout=2.0)
            if not stopping.done():
                missed += 1  # one lost stop proves the fault; a leaked fetcher
                lost = stopping  # busy-looping here would slow every later round
                break
    finally:
        server.close()
        for writer in list(connections):  # a leaked fetcher now fails and backs off,
            writer.close()  # where a cancellation cannot be lost
        await server.wait_closed()
        if lost is not None:  # its stop() completes once the fetcher can be cancelled
            fetcher._task.cancel()  # type: ignore[union-attr]
            await asyncio.wait([lost], timeout=5.0)
    return missed, answered[0]


def test_a_fetcher_always_stops_even_mid_answer():
    missed, answered = asyncio.run(_start_and_stop_many_times())
    assert missed == 0, f"a stop was lost after {answered} fetches"
    assert answered >= STOPS  # every fetcher really was fetching when stopped

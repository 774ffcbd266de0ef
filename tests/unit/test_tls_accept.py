"""broker.net.tls_accept: a TLS listener admits (or refuses) a connection before its
handshake, and the application's protocol sees the client's first bytes only after
``connection_made`` (real handshakes on 127.0.0.1 with a throwaway CA)."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from broker.common.tls import TlsConfig, client_context, server_context
from broker.net import transport
from tests.support.pki import make_pki


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    server = server_context(TlsConfig(cert_file=pki.broker_cert, key_file=pki.broker_key))
    return server, client_context(TlsConfig(ca_file=pki.ca))


class Recorder(asyncio.Protocol):
    """Records the order of protocol events and echoes what it receives."""

    def __init__(self, events: list[str]):
        self.events = events
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.events.append(f"data:{data.decode()}")
        assert self.transport is not None
        self.transport.write(data)


def test_the_protocol_is_made_before_the_first_request_and_echoes(contexts) -> None:
    server_ctx, client_ctx = contexts
    events: list[str] = []

    async def main() -> None:
        server = await transport.start_server(
            lambda: Recorder(events), "127.0.0.1", 0, ssl_context=server_ctx, ssl_handshake_timeout=5
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1")
        writer.write(b"hello")  # right after the handshake, as a SASL client does
        assert await reader.readexactly(5) == b"hello"
        writer.close()
        server.close()

    asyncio.run(main())
    assert events[:2] == ["made", "data:hello"]


def test_a_refused_connection_is_closed_before_any_handshake(contexts) -> None:
    server_ctx, _ = contexts
    asked: list[int] = []
    made: list[str] = []

    def admit(handshaking: int) -> bool:
        asked.append(handshaking)
        return len(asked) == 1  # the first is taken, the rest refused

    async def main() -> tuple[bytes, bytes]:
        server = await transport.start_server(
            lambda: Recorder(made), "127.0.0.1", 0, ssl_context=server_ctx, ssl_handshake_timeout=5, admit=admit
        )
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        first = socket.create_connection(("127.0.0.1", port))  # never speaks: in its handshake
        second = socket.create_connection(("127.0.0.1", port))
        first.setblocking(False)
        second.setblocking(False)
        await asyncio.sleep(0.3)
        refused = await asyncio.wait_for(loop.sock_recv(second, 1), 5)
        try:
            waiting = await asyncio.wait_for(loop.sock_recv(first, 1), 0.3)
        except TimeoutError:
            waiting = b"still open"
        first.close()
        second.close()
        server.close()
        return refused, waiting

    refused, waiting = asyncio.run(main())
    assert refused == b"" and waiting == b"still open"
    assert asked == [0, 1]  # the second was asked while the first was in its handshake
    assert made == []


class Collector(asyncio.Protocol):
    """Keeps a copy of what it receives, and the types it was given."""

    data_received_copies = True

    def __init__(self, done: asyncio.Future[bytes], size: int):
        self.done = done
        self.size = size
        self.received = bytearray()
        self.types: set[type] = set()

    def data_received(self, data: bytes) -> None:
        self.types.add(type(data))
        self.received += data
        if len(self.received) >= self.size:
            self.done.set_result(bytes(self.received))


@pytest.mark.parametrize("copies", [True, False])
def test_a_protocol_that_copies_is_given_views_of_a_reused_buffer(contexts, copies: bool) -> None:
    """Several MiB (many TLS records, more than one buffer) arrive intact either way; a
    protocol with ``data_received_copies`` gets memoryviews, any other bytes."""
    server_ctx, client_ctx = contexts
    payload = bytes(range(256)) * 12_289  # 3,145,984 bytes
    seen: list[Collector] = []

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()

        def factory() -> Collector:
            collector = Collector(done, len(payload))
            collector.data_received_copies = copies
            seen.append(collector)
            return collector

        server = await transport.start_server(factory, "127.0.0.1", 0, ssl_context=server_ctx, ssl_handshake_timeout=5)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1")
        for start in range(0, len(payload), 100_000):
            writer.write(payload[start : start + 100_000])
        await writer.drain()
        received = await asyncio.wait_for(done, 10)
        writer.close()
        server.close()
        return received

    assert asyncio.run(main()) == payload
    assert seen[0].types == ({memoryview} if copies else {bytes})

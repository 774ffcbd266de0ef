"""broker.server.native.tls_send: segment bytes sent over a real TLS connection in pieces, the
response head first, the shared file position untouched (a throwaway CA on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from broker.common.tls import TlsConfig, client_context, server_context
from broker.server.native.tls_send import send_file_range
from tests.support.pki import make_pki


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    server = server_context(TlsConfig(cert_file=pki.broker_cert, key_file=pki.broker_key))
    return server, client_context(TlsConfig(ca_file=pki.ca))


def serve_range(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    segment: Path,
    position: int,
    count: int,
    prefix: bytes,
    chunk_bytes: int,
) -> tuple[bytes, int, int]:
    """Send the range to a TLS client over 127.0.0.1; what the client read, how often
    the sender waited for ``writable``, and the shared file's position afterwards."""
    server_ctx, client_ctx = contexts
    waits: list[int] = []

    async def main() -> tuple[bytes, int]:
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[int] = loop.create_future()
        with open(segment, "rb") as shared:
            shared.seek(7)

            async def writable() -> None:
                waits.append(1)

            class Sender(asyncio.Protocol):
                def connection_made(self, transport: asyncio.BaseTransport) -> None:
                    loop.create_task(self.send(transport))  # type: ignore[arg-type]

                async def send(self, transport: asyncio.WriteTransport) -> None:
                    await send_file_range(
                        transport,
                        shared,
                        position,
                        count,  # type: ignore[arg-type]
                        writable,
                        prefix,
                        chunk_bytes,
                    )
                    transport.close()
                    sent.set_result(shared.tell())

            server = await loop.create_server(Sender, "127.0.0.1", 0, ssl=server_ctx)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1"
            )
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            server.close()
            return data, await sent

    data, tell = asyncio.run(main())
    return data, len(waits), tell


def test_a_range_of_several_pieces_arrives_whole_after_the_head(
    tmp_path: Path, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(bytes(range(251)) * 4000)  # 1,004,000 bytes, no record multiple
    count = 1_004_000 - 333
    data, waits, tell = serve_range(contexts, segment, 111, count, b"HEAD", 65_536)
    assert data == b"HEAD" + segment.read_bytes()[111 : 111 + count]
    assert waits == -(-count // 65_536)  # checked before every piece
    assert tell == 7  # the segment's shared reader was not moved


def test_an_empty_range_sends_the_head_alone(tmp_path: Path, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"x" * 100)
    data, waits, _ = serve_range(contexts, segment, 100, 0, b"HEAD", 65_536)
    assert data == b"HEAD" and waits == 0


def test_a_segment_shorter_than_the_range_is_an_error(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"x" * 100)

    class Sink(asyncio.WriteTransport):
        def __init__(self) -> None:
            super().__init__()
            self.data = bytearray()

        def write(self, data: bytes | bytearray | memoryview) -> None:
            self.data += data

        def writelines(self, parts) -> None:  # type: ignore[no-untyped-def, override]
            for part in parts:
                self.write(part)

        def is_closing(self) -> bool:
            return False

    async def writable() -> None:
        pass

    sink = Sink()
    with open(segment, "rb") as file, pytest.raises(OSError, match="read 100 of 150 bytes"):
        asyncio.run(send_file_range(sink, file, 0, 150, writable, b"", 64))
    assert len(sink.data) <= 64  # the pieces before the short one; the caller closes

"""broker.net.transport opens every socket, plaintext by default and TLS when given an
``ssl.SSLContext``, and maps socket failures to actionable errors.

The TLS tests run a real handshake on 127.0.0.1 with a throwaway self-signed
certificate (made with the ``openssl`` command) for each IO style the code uses: the
asyncio listener (the broker), the blocking client (the client library, one reader
thread and many writer threads) and the asyncio client stream (a follower's fetcher).
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.client.connection import Connection
from broker.common.errors import BrokerNotAvailableError, ListenError, TlsHandshakeError
from broker.net import socket_errors, tls_socket, transport
from broker.wire import protocol

# -- certificates ---------------------------------------------------------------------


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, valid for a day."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate (Debian: apt-get install openssl)")
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(directory, "broker")
    other, _ = _self_signed(directory, "stranger")
    return {"cert": cert, "key": key, "other": other}


@pytest.fixture(scope="module")
def server_context(certs: dict[str, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs["cert"], certs["key"])
    return context


@pytest.fixture(scope="module")
def client_context(certs: dict[str, Path]) -> ssl.SSLContext:
    """Trusts the broker's certificate (it is its own CA)."""
    return ssl.create_default_context(cafile=str(certs["cert"]))


@pytest.fixture(scope="module")
def untrusting_context(certs: dict[str, Path]) -> ssl.SSLContext:
    """Trusts only another certificate: the broker's must fail verification."""
    return ssl.create_default_context(cafile=str(certs["other"]))


# -- servers on a loop in a thread, opened through transport.start_server --------------


class Echo(asyncio.Protocol):
    """Writes back what it receives; records whether the connection is TLS."""

    seen_tls: list[bool] = []

    def connection_made(self, transport_: asyncio.BaseTransport) -> None:
        self.transport = transport_
        Echo.seen_tls.append(transport_.get_extra_info("ssl_object") is not None)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


class FrameEcho(asyncio.Protocol):
    """Answers each request frame with a response carrying the request's fields."""

    def connection_made(self, transport_: asyncio.BaseTransport) -> None:
        self.transport = transport_
        self.decoder = protocol.FrameDecoder(1 << 24)

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        while (frame := self.decoder.next_frame()) is not None:
            self.transport.write(
                protocol.encode_response(  # type: ignore[attr-defined]
                    frame.header["id"], {"echo": frame.header.get("echo")}
                )
            )


class ThreadServer:
    """A transport.start_server listener on 127.0.0.1, served by a loop in a thread."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], ssl_context: ssl.SSLContext | None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            transport.start_server(factory, "127.0.0.1", 0, ssl_context=ssl_context), self.loop
        ).result(10)
        self.port: int = self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def tls_echo(server_context: ssl.SSLContext):
    server = ThreadServer(Echo, server_context)
    yield server
    server.close()


@pytest.fixture
def plain_echo():
    server = ThreadServer(Echo, None)
    yield server
    server.close()


def _recv_exactly(stream: transport.BlockingStream, size: int) -> bytes:
    buf = bytearray(1 << 16)
    out = bytearray()
    while len(out) < size:
        n = stream.recv_into(buf)
        assert n, "connection closed early"
        out += buf[:n]
    return bytes(out)


# -- plaintext: the default, what every caller used before ------------------------------


def test_plaintext_is_the_default_for_every_style(plain_echo: ThreadServer) -> None:
    Echo.seen_tls.clear()
    stream = transport.connect("127.0.0.1", plain_echo.port, timeout=5)
    try:
        assert isinstance(stream, socket.socket)
        assert stream.gettimeout() is None
        assert stream.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        stream.sendall(b"plain bytes")
        assert _recv_exactly(stream, 11) == b"plain bytes"
    finally:
        stream.close()

    async def through_stream() -> bytes:
        reader, writer = await transport.open_stream("127.0.0.1", plain_echo.port, timeout=5)
        assert writer.get_extra_info("ssl_object") is None
        writer.write(b"stream bytes")
        data = await reader.readexactly(12)
        writer.close()
        return data

    assert asyncio.run(through_stream()) == b"stream bytes"
    assert Echo.seen_tls == [False, False]


# -- TLS, each IO style ----------------------------------------------------------------


def test_tls_blocking_client_handshakes_and_carries_bytes(
    tls_echo: ThreadServer, client_context: ssl.SSLContext
) -> None:
    Echo.seen_tls.clear()
    stream = transport.connect("127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context)
    try:
        assert stream.version() in ("TLSv1.2", "TLSv1.3")  # type: ignore[attr-defined]
        subject = dict(x[0] for x in stream.getpeercert()["subject"])  # type: ignore[attr-defined]
        assert subject["commonName"] == "broker"
        payload = bytes(range(256)) * 4096  # 1 MiB: several records and write chunks
        stream.sendall(payload)
        assert _recv_exactly(stream, len(payload)) == payload
    finally:
        stream.close()
    assert Echo.seen_tls == [True]  # the asyncio listener saw TLS too


def test_tls_blocking_client_is_safe_with_one_reader_and_many_writers(
    tls_echo: ThreadServer, client_context: ssl.SSLContext
) -> None:
    """The client connection's pattern: a reader thread in recv while writers send."""
    stream = transport.connect("127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context)
    writers, messages, message = 4, 300, b"0123456789abcdef" * 64
    total = writers * messages * len(message)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(_recv_exactly(stream, total)))
    reader.start()

    def write() -> None:
        for _ in range(messages):
            stream.sendall(message)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    reader.join(30)
    stream.close()
    assert received and received[0] == message * (writers * messages)


class CountingSocket(socket.socket):
    """A real TCP socket that counts its ``sendall`` calls."""

    sendalls = 0

    def sendall(self, data, flags: int = 0) -> None:  # type: ignore[no-untyped-def, override]
        self.sendalls += 1
        super().sendall(data, flags)


def counted_tls_stream(port: int, context: ssl.SSLContext) -> tuple[CountingSocket, tls_socket.TlsSocket]:
    """A TLS client on 127.0.0.1:``port`` over a socket that counts its ``sendall``s."""
    sock = CountingSocket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock, tls_socket.wrap_client(sock, context, "127.0.0.1")


def test_a_large_tls_write_is_encrypted_and_sent_in_few_large_pieces(
    tls_echo: ThreadServer, client_context: ssl.SSLContext
) -> None:
    """A request goes out in one encryption and one socket write per WRITE_BYTES: each
    gives the GIL up, and a sender thread that does so per small piece falls behind a
    busy application thread (broker/net/tls_socket.py)."""
    sock, stream = counted_tls_stream(tls_echo.port, client_context)
    piece = tls_socket.WRITE_BYTES
    try:
        for size, writes in ((piece, 1), (2 * piece + 4096, 3)):
            payload = bytes(range(256)) * (size // 256)
            sock.sendalls = 0
            stream.sendall(payload)
            assert sock.sendalls == writes
            assert _recv_exactly(stream, len(payload)) == payload
    finally:
        stream.close()


def test_tls_sendall_parts_stages_a_request_whole_and_reuses_the_stage(
    tls_echo: ThreadServer, client_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's header and batches go out as one stream without a fresh joined
    buffer: copied into a kept staging buffer as large as the request, encrypted and
    written at once; the next request of that size reuses the buffer; the bytes arrive
    in order."""
    sock, stream = counted_tls_stream(tls_echo.port, client_context)
    monkeypatch.setattr(tls_socket, "_spare_stages", [])
    mib = 1 << 20
    try:
        head = b"h" * 37
        small = [bytes([i]) * (mib // 8 + i) for i in range(12)]  # 1.5 MiB, uneven
        big = bytes(range(256)) * (mib * 2 // 256 + 3)  # 2 MiB and a tail
        parts: list[bytes | memoryview] = [head, *small, memoryview(big), b"t" * 5]
        expected = b"".join(parts)
        for _ in range(2):
            sock.sendalls = 0
            stream.sendall_parts(parts)
            assert sock.sendalls == 1
            assert _recv_exactly(stream, len(expected)) == expected
            assert len(tls_socket._spare_stages) == 1
            kept = tls_socket._spare_stages[0]
            assert len(expected) <= len(kept) < len(expected) + mib
        stream.sendall_parts(parts)
        assert tls_socket._spare_stages == [kept]  # the same buffer again
        assert _recv_exactly(stream, len(expected)) == expected
    finally:
        stream.close()


def test_tls_sendall_parts_above_write_bytes_goes_in_full_pieces(
    tls_echo: ThreadServer, client_context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request above WRITE_BYTES: every socket write but the last carries exactly
    WRITE_BYTES of plaintext, small parts gathered, a part of a whole piece or more
    encrypted where it is; the stage kept is one piece, not the request's size."""
    sock, stream = counted_tls_stream(tls_echo.port, client_context)
    piece = 1 << 20
    monkeypatch.setattr(tls_socket, "WRITE_BYTES", piece)
    monkeypatch.setattr(tls_socket, "_spare_stages", [])
    try:
        sock.sendalls = 0
        head = b"h" * 37
        small = [bytes([i]) * (piece // 8 + i) for i in range(12)]  # 1.5 pieces, uneven
        big = bytes(range(256)) * (piece * 2 // 256 + 3)  # two pieces and a tail
        parts: list[bytes | memoryview] = [head, *small, memoryview(big), b"t" * 5]
        expected = b"".join(parts)
        stream.sendall_parts(parts)
        assert sock.sendalls == -(-len(expected) // piece) == 4
        assert _recv_exactly(stream, len(expected)) == expected
        assert [len(stage) for stage in tls_socket._spare_stages] == [piece]
    finally:
        stream.close()


def test_tls_sendall_parts_from_several_threads_keeps_each_request_whole(
    tls_echo: ThreadServer, client_context: ssl.SSLContext
) -> None:
    """Writers on one connection never interleave inside a request (the send lock
    covers staging, encryption and the socket write), and each reuses a stage."""
    stream = transport.connect("127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context)
    assert isinstance(stream, tls_socket.TlsSocket)
    writers, requests = 4, 20
    size = tls_socket.MIN_STAGE_BYTES + 4096  # every request grows a stage

    def request(writer: int) -> list[bytes]:
        fill = bytes([65 + writer])
        return [fill * 10, fill * (size // 2), fill * (size - size // 2 - 10)]

    total = writers * requests * size
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(_recv_exactly(stream, total)))
    reader.start()
    threads = [
        threading.Thread(target=lambda w=w: [stream.sendall_parts(request(w)) for _ in range(requests)])
        for w in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    reader.join(60)
    stream.close()
    assert received and len(received[0]) == total
    data = received[0]
    for start in range(0, total, size):  # each request is one writer's bytes only
        assert data[start : start + size] == data[start : start + 1] * size


def test_tls_asyncio_stream_handshakes_and_carries_bytes(
    tls_echo: ThreadServer, client_context: ssl.SSLContext
) -> None:
    async def exchange() -> tuple[str, bytes]:
        reader, writer = await transport.open_stream("127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context)
        version = writer.get_extra_info("ssl_object").version()
        writer.write(b"replica fetch" * 1000)
        data = await reader.readexactly(13 * 1000)
        writer.close()
        await writer.wait_closed()
        return version, data

    version, data = asyncio.run(exchange())
    assert version in ("TLSv1.2", "TLSv1.3")
    assert data == b"replica fetch" * 1000


def test_tls_client_connection_talks_frames_over_tls(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    """The client library's Connection, routed through the transport, over TLS."""
    server = ThreadServer(FrameEcho, server_context)
    try:
        conn = Connection("127.0.0.1", server.port, connect_timeout=5, ssl_context=client_context)
        try:
            futures = [conn.request(protocol.METADATA, {"echo": i}) for i in range(200)]
            answers = [f.result(10).header["echo"] for f in futures]  # type: ignore[union-attr]
            assert answers == list(range(200))
        finally:
            conn.close()
    finally:
        server.close()


def test_tls_listener_sends_log_bytes_with_sendfile(
    tmp_path: Path, server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    """A fetch answer is a loop.sendfile of segment bytes; over TLS it must fall back to
    reading and encrypting them (the broker passes fallback=True)."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(bytes(range(251)) * 8000)  # about 2 MB, not a record multiple

    class SendSegment(asyncio.Protocol):
        def connection_made(self, transport_: asyncio.BaseTransport) -> None:
            asyncio.get_running_loop().create_task(self.send(transport_))

        async def send(self, transport_: asyncio.BaseTransport) -> None:
            with open(segment, "rb") as file:
                await asyncio.get_running_loop().sendfile(
                    transport_,
                    file,
                    100,
                    segment.stat().st_size - 200,  # type: ignore[arg-type]
                    fallback=True,
                )
            transport_.close()

    server = ThreadServer(SendSegment, server_context)
    try:
        stream = transport.connect("127.0.0.1", server.port, timeout=5, ssl_context=client_context)
        data = _recv_exactly(stream, segment.stat().st_size - 200)
        stream.close()
    finally:
        server.close()
    assert data == segment.read_bytes()[100:-100]


# -- TLS failures: clear errors, and the listener keeps serving --------------------------


def test_failed_verification_is_a_clear_error_in_the_blocking_client(
    tls_echo: ThreadServer, untrusting_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    with pytest.raises(TlsHandshakeError) as caught:
        transport.connect("127.0.0.1", tls_echo.port, timeout=5, ssl_context=untrusting_context)
    message = str(caught.value)
    assert f"127.0.0.1:{tls_echo.port}" in message
    assert "certificate did not verify" in message and "CA file" in message
    assert isinstance(caught.value, BrokerNotAvailableError)  # clients fail over
    assert not caught.value.retriable  # but do not retry the same handshake

    # The listener survives a client that gave up during the handshake.
    stream = transport.connect("127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context)
    stream.sendall(b"still serving")
    assert _recv_exactly(stream, 13) == b"still serving"
    stream.close()


def test_a_name_mismatch_is_a_clear_error(tls_echo: ThreadServer, client_context: ssl.SSLContext) -> None:
    with pytest.raises(TlsHandshakeError) as caught:
        transport.connect(
            "127.0.0.1", tls_echo.port, timeout=5, ssl_context=client_context, server_hostname="broker.example.org"
        )
    assert "broker.example.org" in str(caught.value)
    assert "mismatch" in str(caught.value).lower()


def test_failed_verification_is_a_clear_error_in_the_asyncio_stream(
    tls_echo: ThreadServer, untrusting_context: ssl.SSLContext
) -> None:
    async def attempt() -> None:
        await transport.open_stream(
            "127.0.0.1", tls_echo.port, timeout=5, ssl_context=untrusting_context, peer="leader broker 1"
        )

    with pytest.raises(TlsHandshakeError) as caught:
        asyncio.run(attempt())
    message = str(caught.value)
    assert f"leader broker 1 127.0.0.1:{tls_echo.port}" in message
    assert "certificate did not verify" in message


def test_failed_verification_in_the_client_connection(
    tls_echo: ThreadServer, untrusting_context: ssl.SSLContext
) -> None:
    with pytest.raises(TlsHandshakeError, match=f"127.0.0.1:{tls_echo.port}"):
        Connection("127.0.0.1", tls_echo.port, connect_timeout=5, ssl_context=untrusting_context)


def test_server_hostname_needs_tls() -> None:
    with pytest.raises(ValueError):
        transport.connect("127.0.0.1", 1, server_hostname="localhost")


# -- socket failures, mapped once ------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_refused_names_the_address_in_both_client_styles() -> None:
    port = _closed_port()
    with pytest.raises(BrokerNotAvailableError, match=f"127.0.0.1:{port}: connection refused; is the broker running"):
        transport.connect("127.0.0.1", port, timeout=5)

    async def attempt() -> None:
        await transport.open_stream("127.0.0.1", port, timeout=5)

    with pytest.raises(BrokerNotAvailableError, match=f"127.0.0.1:{port}: connection refused"):
        asyncio.run(attempt())


def test_a_taken_port_is_a_listen_error(plain_echo: ThreadServer) -> None:
    async def attempt() -> None:
        await transport.start_server(Echo, "127.0.0.1", plain_echo.port)

    with pytest.raises(ListenError, match=f"127.0.0.1:{plain_echo.port}.*already in use"):
        asyncio.run(attempt())


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "cannot connect to broker nohost:9092: host 'nohost' not found (Name or service not known)",
        ),
        (TimeoutError("timed out"), "cannot connect to broker nohost:9092: no answer within 2s"),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            "connection refused; is the broker running and listening on port 9092?",
        ),
        (
            ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
            "the connection was reset while opening it",
        ),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "No route to host; check the network route to nohost"),
    ],
)
def test_connect_errors_are_mapped_with_what_to_check(exc: OSError, expected: str) -> None:
    error = socket_errors.connect_error(exc, "nohost", 9092, timeout=2.0)
    assert isinstance(error, BrokerNotAvailableError)
    assert expected in str(error)


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (errno.EADDRINUSE, "already in use"),
        (errno.EADDRNOTAVAIL, "not an address of this machine"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_listen_errors_say_what_to_change(err: int, expected: str) -> None:
    error = socket_errors.listen_error(OSError(err, "x"), "10.1.2.3", 80)
    assert str(error).startswith("cannot listen on 10.1.2.3:80: ")
    assert expected in str(error)


def test_a_broken_connection_keeps_its_message() -> None:
    error = socket_errors.lost_error(ConnectionResetError(errno.ECONNRESET, "Connection reset"), "h:1", during="failed")
    assert str(error) == "connection to broker h:1 failed: Connection reset"

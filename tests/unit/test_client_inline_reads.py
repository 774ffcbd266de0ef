"""A client connection without a reader thread: the waiting thread reads its answers
(broker/client/connection.py), against a scripted socket server (no broker)."""

from __future__ import annotations

import socket
import threading

import pytest

from broker.client.connection import Connection
from broker.common.errors import BrokerNotAvailableError, RequestTimedOutError
from broker.wire import protocol


class Scripted:
    """Accepts one connection; answers requests in the order ``plan`` says: each entry
    is the list of request ids to answer after the next request arrives."""

    def __init__(self, plan: list[list[int]]):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.plan = plan
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.server.accept()
        decoder = protocol.FrameDecoder()
        for answers in self.plan:
            frame = decoder.next_frame()  # two requests may arrive in one read
            while frame is None:
                data = conn.recv(65536)
                if not data:
                    return
                decoder.feed(data)
                frame = decoder.next_frame()
            for corr in answers:
                conn.sendall(protocol.encode_response(corr, {"n": corr}))
        conn.recv(1)  # hold until the client closes
        conn.close()


def test_without_a_reader_thread_the_waiting_thread_reads_and_completes_others() -> None:
    server = Scripted([[], [2, 1]])  # answer 2 then 1, after the second request
    conn = Connection("127.0.0.1", server.port, reader_thread=False)
    try:
        readers = [
            t
            for t in threading.enumerate()
            if t.name.startswith("logferry-reader") and server.port and f":{server.port}" in t.name
        ]
        assert readers == []
        first = conn.request(protocol.METADATA, {})
        second = conn.request(protocol.METADATA, {})
        assert first is not None and second is not None
        assert first.result(5).header["n"] == 1  # read answer 2 on the way
        assert second.done() and second.result(0).header["n"] == 2
    finally:
        conn.close()


def test_a_reader_less_wait_times_out_and_a_closed_connection_fails_every_request() -> None:
    server = Scripted([[]])  # never answers
    conn = Connection("127.0.0.1", server.port, reader_thread=False)
    future = conn.request(protocol.METADATA, {})
    assert future is not None
    with pytest.raises(RequestTimedOutError):
        future.result(0.1)
    conn.close()
    with pytest.raises(BrokerNotAvailableError):
        future.result(1)

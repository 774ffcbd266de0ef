"""broker.client.connection: each response says when its first bytes were read and
whether the connection was idle before them (the fetch window's latency sample).

A real local socket plays the broker: it answers after a pause (first bytes after an
idle wait) and then twice in one write (the second answer right behind the first).
"""

from __future__ import annotations

import socket
import threading
import time

from broker.client.connection import Connection
from broker.wire import protocol


def test_answers_carry_their_first_byte_time_and_whether_they_followed_idle_time() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    requests_seen = threading.Event()

    def broker() -> None:
        conn, _ = server.accept()
        with conn:
            decoder = protocol.FrameDecoder()
            ids: list[int] = []
            while len(ids) < 3:
                decoder.feed(conn.recv(65536))
                while (frame := decoder.next_frame()) is not None:
                    ids.append(frame.header["id"])
            requests_seen.set()
            time.sleep(0.05)  # the "round trip": the client waits on an idle connection
            conn.sendall(protocol.encode_response(ids[0], {"n": 0}))
            time.sleep(0.05)
            # two answers in one write: the second's first bytes come right behind the first
            conn.sendall(protocol.encode_response(ids[1], {"n": 1}) + protocol.encode_response(ids[2], {"n": 2}))
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    conn = Connection("127.0.0.1", server.getsockname()[1], connect_timeout=5)
    try:
        sent = time.monotonic()
        futures = [conn.request(protocol.METADATA, {"q": i}) for i in range(3)]
        frames = [f.result(10) for f in futures]  # type: ignore[union-attr]
        assert [f.header["n"] for f in frames] == [0, 1, 2]
        first, second, third = futures
        assert first is not None and second is not None and third is not None
        assert first.after_idle and first.first_byte_at - sent >= 0.045
        assert second.after_idle and second.first_byte_at - first.first_byte_at >= 0.045
        assert not third.after_idle  # queued behind the second: no latency sample
        assert third.first_byte_at >= second.first_byte_at
    finally:
        conn.close()
        server.close()
        thread.join(5)

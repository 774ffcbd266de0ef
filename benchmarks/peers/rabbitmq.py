"""RabbitMQ as the paper ran it: durable queues, persistent messages, AMQP via pika.

The node is private to the benchmark (own node name, ports, epmd, cookie, data), bound
to 127.0.0.1, started without root from Debian's ``rabbitmq-server`` scripts.

Case semantics (see docs/benchmarks.md):
- batch 1, no ack: plain ``basic_publish`` per message; the channel switches to
  publisher confirms for the last message only, and its confirm (which RabbitMQ sends
  once the message is persisted, after every earlier message of the channel was
  enqueued) stops the clock;
- 50 per ack: one AMQP transaction per 50 messages; ``tx.commit`` is the ack (pika's
  blocking channel cannot wait for one confirm per 50 publishes);
- consume: ``basic_consume`` with automatic ack (prefetch only applies to manual acks);
- end-to-end latency: a persistent ``basic_publish`` per message without confirms (a
  confirm waits for RabbitMQ's timed fsync, ~8 ms here, and pika's blocking channel
  cannot wait for confirms asynchronously); the consumer process ``basic_consume``s
  with automatic ack, so RabbitMQ pushes each message as soon as it is enqueued.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers.base import (
    LOOPBACK,
    CaseFailed,
    Deadline,
    PeerUnavailable,
    Server,
    Stopwatch,
    System,
    disk_bytes,
    free_port,
    port_open,
    wait_until,
)
from peers.install import ensure_apt_package, ensure_python_module

HERE = Path(__file__).resolve().parent
SCRIPTS = Path("/usr/lib/rabbitmq/bin")
EPMD = Path("/usr/bin/epmd")
START_TIMEOUT = 90.0
CHECK_EVERY = 1024  # messages between deadline checks in the publish loops


class RabbitMQ(System):
    """A private RabbitMQ node driven through pika's blocking API."""

    name = "RabbitMQ"

    def __init__(self) -> None:
        self.epmd: Server | None = None
        self.server: Server | None = None
        self.conn: Any = None
        self.env: dict[str, str] = {}
        self.node = ""
        self.port = 0
        self.data: Path | None = None

    def ensure_installed(self) -> None:
        """Debian's rabbitmq-server (brings Erlang and epmd) and pika."""
        ensure_apt_package("rabbitmq-server", SCRIPTS / "rabbitmq-server")
        ensure_python_module("pika")

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        """Write the configs, start epmd and the node, wait for startup, connect."""
        import pika

        conf, self.data, home = workdir / "conf", workdir / "data", workdir / "home"
        for folder in (conf, self.data, home):
            folder.mkdir(parents=True, exist_ok=True)
        self.port, epmd_port, dist_port = free_port(), free_port(), free_port()
        self.node = f"logferry-bench-{os.getpid()}@localhost"
        fields = {
            "NODENAME": self.node,
            "AMQP_PORT": str(self.port),
            "DIST_PORT": str(dist_port),
            "EPMD_PORT": str(epmd_port),
            "DATA": str(self.data),
            "CONF": str(conf),
        }
        for name in ("rabbitmq-env.conf", "rabbitmq.conf"):
            text = (HERE / name).read_text()
            for key, value in fields.items():
                text = text.replace(f"@{key}@", value)
            (conf / name).write_text(text)
        (conf / "enabled_plugins").write_text("[].\n")  # no management plugin: less CPU
        # HOME holds the Erlang cookie shared by the node and rabbitmqctl.
        self.env = dict(os.environ, HOME=str(home), RABBITMQ_CONF_ENV_FILE=str(conf / "rabbitmq-env.conf"))
        # Our own epmd, in the foreground, so that we stop exactly the one we started.
        self.epmd = Server(
            "epmd", [str(EPMD), "-address", LOOPBACK, "-port", str(epmd_port)], workdir / "epmd.log", env=self.env
        )
        wait_until(lambda: port_open(epmd_port), 10, "epmd", self.epmd)
        self.server = Server(
            "rabbitmq", [str(SCRIPTS / "rabbitmq-server")], workdir / "server.log", env=self.env, cwd=workdir
        )
        wait_until(
            lambda: self._ctl("await_startup", timeout=30).returncode == 0,
            START_TIMEOUT,
            "RabbitMQ",
            self.server,
            interval=1.0,
        )
        wait_until(lambda: port_open(self.port), 30, "RabbitMQ AMQP listener", self.server)
        params = pika.ConnectionParameters(host=LOOPBACK, port=self.port, heartbeat=600, blocked_connection_timeout=300)
        self.conn = pika.BlockingConnection(params)

    def _ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SCRIPTS / "rabbitmqctl"), "-n", self.node, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        """Close the connection, ``rabbitmqctl stop``, then make sure the node's process
        group and our epmd are gone."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
        if self.server is not None:
            if self.server.alive():
                with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                    self._ctl("stop", timeout=60)
            self.server.stop()
            self.server = None
        if self.epmd is not None:
            self.epmd.stop(grace=5)
            self.epmd = None

    # --- cases -------------------------------------------------------------------------

    def _channel(self, dest: str) -> Any:
        channel = self.conn.channel()
        channel.queue_declare(queue=dest, durable=True)
        return channel

    @staticmethod
    def _persistent() -> Any:
        import pika

        return pika.BasicProperties(delivery_mode=2)

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """``count - 1`` unconfirmed publishes, then one confirmed publish."""
        channel = self._channel(dest)
        props, publish = self._persistent(), channel.basic_publish
        clock.start()
        for i in range(count - 1):
            publish("", dest, payload, props)
            if i % CHECK_EVERY == 0:
                deadline.check()
        channel.confirm_delivery()
        publish("", dest, payload, props)  # blocks until confirmed; raises on a nack
        clock.stop()
        channel.close()

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """One transaction per ``per_ack`` publishes; each commit waits for the broker."""
        channel = self._channel(dest)
        channel.tx_select()
        props, publish, commit = self._persistent(), channel.basic_publish, channel.tx_commit
        sent = 0
        clock.start()
        while sent < count:
            group = min(per_ack, count - sent)
            for _ in range(group):
                publish("", dest, payload, props)
            commit()
            sent += group
            deadline.check()
        clock.stop()
        channel.close()

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """``basic_consume`` with auto ack; the callback counts each message."""
        channel = self._channel(dest)
        got = 0

        def on_message(_ch: Any, _method: Any, _props: Any, _body: bytes) -> None:
            nonlocal got
            got += 1

        clock.start()
        tag = channel.basic_consume(dest, on_message, auto_ack=True)
        while got < count:
            if not deadline.remaining():
                raise CaseFailed(f"RabbitMQ consumer got {got} of {count} messages within {deadline.seconds:.0f} s")
            self.conn.process_data_events(time_limit=min(0.5, deadline.remaining()))
        clock.stop()
        channel.basic_cancel(tag)
        channel.close()
        return got

    def storage_bytes(self, dest: str) -> int:
        """Bytes allocated by the node's whole data directory (queue indexes, message
        store; RabbitMQ does not keep one file per queue)."""
        if self.data is None:
            raise PeerUnavailable("RabbitMQ is not started")
        return disk_bytes(self.data / "mnesia")

    def drop(self, dest: str) -> None:
        """Delete the queue and its messages."""
        channel = self.conn.channel()
        channel.queue_delete(queue=dest)
        channel.close()

    def latency_client(self) -> RabbitMQLatency:
        """The node's AMQP port; see the module docstring for the settings."""
        return RabbitMQLatency(self.port)


@dataclass(frozen=True)
class RabbitMQLatency:
    """Both sides of the end-to-end latency case (see ``benchmarks.e2e``)."""

    port: int

    def _connect(self) -> Any:
        import pika

        return pika.BlockingConnection(
            pika.ConnectionParameters(host=LOOPBACK, port=self.port, heartbeat=600, blocked_connection_timeout=300)
        )

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        conn = self._connect()
        try:
            channel = conn.channel()
            channel.queue_declare(queue=dest, durable=True)
            got = 0

            def on_message(_ch: Any, _method: Any, _props: Any, body: bytes) -> None:
                nonlocal got
                on_value(body)
                got += 1

            channel.basic_consume(dest, on_message, auto_ack=True)
            ready()
            end = time.monotonic() + timeout
            while got < count and time.monotonic() < end:
                conn.process_data_events(time_limit=0.5)
        finally:
            conn.close()

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        import pika

        conn = self._connect()
        try:
            channel = conn.channel()
            channel.queue_declare(queue=dest, durable=True)
            props = pika.BasicProperties(delivery_mode=2)
            for message in messages:
                channel.basic_publish("", dest, message.value, props)
            conn.process_data_events(time_limit=0)
        finally:
            conn.close()

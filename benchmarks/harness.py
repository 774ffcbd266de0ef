"""A throwaway logferry cluster for benchmarks: one ZooKeeper and N broker processes.

Everything binds 127.0.0.1 on free ports and lives under one directory; leaving the
``with`` block stops every process, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker.testing.localrun import BrokerProcess, free_port
from broker.testing.zkserver import LocalZooKeeper


class LocalCluster:
    """ZooKeeper plus ``brokers`` broker subprocesses for a benchmark run."""

    def __init__(
        self,
        workdir: Path,
        brokers: int = 1,
        chroot: str = "/bench",
        broker: dict[str, Any] | None = None,
        log: dict[str, Any] | None = None,
        tls: dict[str, Any] | None = None,
        client_tls: Any = None,
        kafka: dict[str, Any] | None = None,
    ):
        """``tls``: each broker's ``[tls]`` table; ``client_tls``: what benchmark clients
        pass as ``tls=`` (a ``broker.common.tls.TlsConfig``), kept here for them."""
        self.workdir = workdir
        self.client_tls = client_tls
        self.zk_port = free_port()
        self.zookeeper = LocalZooKeeper(workdir / "zookeeper", self.zk_port)
        self.zk_connect = f"127.0.0.1:{self.zk_port}{chroot}"
        self.brokers = [
            BrokerProcess(
                i + 1,
                self.zk_connect,
                workdir,
                broker={"num_partitions": 1, **(broker or {})},
                log=log,
                tls=tls,
                kafka=kafka,
            )
            for i in range(brokers)
        ]

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers]

    def data_dirs(self) -> list[Path]:
        return [b.log_dir for b in self.brokers]

    def broker_pids(self) -> list[int]:
        return [b.proc.pid for b in self.brokers if b.proc is not None]

    def __enter__(self) -> LocalCluster:
        try:
            self.zookeeper.start()
            self.zookeeper.wait_ready(30)
            for broker in self.brokers:
                broker.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for broker in self.brokers:
            with contextlib.suppress(RuntimeError):  # it was killed after ignoring SIGTERM; keep stopping the rest
                broker.stop()
        self.zookeeper.stop()


def wait_for_last_flush(
    consumer: Any, topic: str, partition: int = 0, quiet_s: float = 0.5, limit_s: float = 120.0
) -> int:
    """Wait (untimed, before a timed read) until the partition's visible end has not
    moved for ``quiet_s``: consumers see flushed data only. Returns that end."""
    end, stable_since = -1, time.monotonic()
    give_up = stable_since + limit_s
    while time.monotonic() - stable_since < quiet_s:
        if time.monotonic() > give_up:
            raise SystemExit(f"{topic}-{partition}: the visible end kept moving for {limit_s:.0f}s")
        now_end = consumer.offsets(topic, partition).end
        if now_end != end:
            end, stable_since = now_end, time.monotonic()
        time.sleep(0.05)
    return end


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_main(
    body: Callable[[], None], failures: Mapping[type[Exception], str], stopped: str, say: Callable[[str], None] = print
) -> int:
    """Run a benchmark script's ``body`` and turn how it ended into its exit code: 0 when
    it returned; 1 after ``<prefix>: <the exception>`` for an exception of a type in
    ``failures`` (type -> prefix, e.g. ``{PeerUnavailable: "FAILED to start", CaseFailed:
    "FAILED"}``: a system did not start, a case miscounted); 130 after ``interrupted:
    <stopped>`` on Ctrl-C or SIGTERM (turned into KeyboardInterrupt here, so the
    ``with`` blocks of ``body`` stop what they started). The exception types are the
    caller's: the scripts import the peers as ``peers``, not ``benchmarks.peers``, and
    the two are different classes."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        body()
    except KeyboardInterrupt:
        say(f"interrupted: {stopped}")
        return 130
    except tuple(failures) as exc:
        prefix = next(text for kind, text in failures.items() if isinstance(exc, kind))
        say(f"{prefix}: {exc}")
        return 1
    return 0

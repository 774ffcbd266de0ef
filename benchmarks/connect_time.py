"""How long a client takes to connect: plaintext, TLS, TLS + SCRAM-SHA-256, TLS + SCRAM-SHA-512.

One ZooKeeper and three brokers on 127.0.0.1: plaintext, TLS, and TLS with
``[auth] required = true`` (both SCRAM mechanisms, a user made with the same code as
``logferry user create``). Each case opens ``--tries`` connections one after another
(``broker.client``'s connection: TCP connect, the TLS handshake, the SCRAM exchange) and
closes each; the median (and p90) of ``--runs`` medians is printed in milliseconds.

SCRAM's cost is mostly the client's: PBKDF2 over the password with the user's iteration
count (``--iterations``, 8192 by default as for ``logferry user create``), SHA-512 being
slower per iteration than SHA-256; the broker only checks a proof (two HMACs). Clients
connect once per broker and keep the connection, so this is paid at start and after a
broker restart, not per request.

    .venv/bin/python benchmarks/connect_time.py --tries 50 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.broker_throughput import make_tls  # noqa: E402
from broker.client.connection import Connection  # noqa: E402
from broker.common.config import dumps  # noqa: E402
from broker.common.sasl import SaslCredentials  # noqa: E402
from broker.common.tls import client_tls  # noqa: E402
from broker.coordination import zk  # noqa: E402
from broker.coordination.credentials import (  # noqa: E402
    DEFAULT_ITERATIONS,
    CredentialStore,
    make_credentials,
)
from broker.testing.localrun import BrokerProcess, free_port  # noqa: E402
from broker.testing.zkserver import LocalZooKeeper  # noqa: E402

PASSWORD = "benchmark password, not a secret"


def timed(connect: Callable[[], Connection], tries: int) -> list[float]:
    """Seconds to open each of ``tries`` connections (each closed before the next)."""
    times = []
    for _ in range(tries):
        t0 = time.perf_counter()
        connection = connect()
        times.append(time.perf_counter() - t0)
        connection.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=50, help="connections per run (default 50)")
    parser.add_argument("--runs", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"the user's PBKDF2 iterations (default {DEFAULT_ITERATIONS})",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="logferry-connect-") as tmp:
        work = Path(tmp)
        broker_tls, tls = make_tls(work / "certs")
        zk_port = free_port()
        zookeeper = LocalZooKeeper(work / "zookeeper", zk_port)
        connect = f"127.0.0.1:{zk_port}/bench"
        brokers = {
            "plaintext": BrokerProcess(1, connect, work, name="plain"),
            "TLS": BrokerProcess(2, connect, work, name="tls", tls=broker_tls),
            "TLS+SCRAM": BrokerProcess(3, connect, work, name="scram", tls=broker_tls),
        }
        secured = brokers["TLS+SCRAM"]
        doc = tomllib.loads(secured.config_file.read_text())
        doc["auth"] = {"required": True, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
        secured.config_file.write_text(dumps(doc))
        zookeeper.start()
        try:
            zookeeper.wait_ready(30)
            client = zk.connect(connect, create=True)
            CredentialStore(client).put("bench", make_credentials(PASSWORD, iterations=args.iterations), replace=True)
            zk.close(client)
            for broker in brokers.values():
                broker.start()
            context, hostname = client_tls(tls)

            def opener(name: str, mechanism: str | None = None) -> Callable[[], Connection]:
                port = brokers[name].port
                sasl = SaslCredentials("bench", PASSWORD, mechanism) if mechanism else None
                ctx = None if name == "plaintext" else context
                return lambda: Connection(
                    "127.0.0.1", port, ssl_context=ctx, server_hostname=hostname if ctx else None, sasl=sasl
                )

            cases = {
                "plaintext": opener("plaintext"),
                "TLS": opener("TLS"),
                "TLS + SCRAM-SHA-256": opener("TLS+SCRAM", "SCRAM-SHA-256"),
                "TLS + SCRAM-SHA-512": opener("TLS+SCRAM", "SCRAM-SHA-512"),
            }
            for connect_once in cases.values():  # warm up: imports, first handshakes
                timed(connect_once, 3)
            results: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.runs):  # interleaved, so every case sees the same machine
                for name, connect_once in cases.items():
                    results[name].extend(timed(connect_once, args.tries))
        finally:
            for broker in brokers.values():
                if broker.proc is not None:
                    broker.stop()
            zookeeper.stop()
    print(
        f"time to connect to a broker on 127.0.0.1 ({args.runs} runs x {args.tries} "
        f"connections, PBKDF2 iterations {args.iterations}):"
    )
    print(f"  {'case':<22} {'median ms':>10} {'p90 ms':>8}")
    for name, times in results.items():
        ordered = sorted(times)
        p90 = ordered[int(len(ordered) * 0.9)]
        print(f"  {name:<22} {statistics.median(times) * 1000:>10.2f} {p90 * 1000:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How much plaintext the TLS client encrypts and sends per call, against throughput.

``broker.net.tls_socket.WRITE_BYTES`` bounds the bytes of one ``SSLObject.write`` and
one socket write. Each call gives the GIL up, and a producer's sender thread waits for
it behind a busy application thread; larger writes wait less often but leave the
CPU's cache. This runs broker_throughput.py's producer cases with one message per
``send()`` (default batching) and with 50, on one TLS broker, for each size given,
alternating the order of the sizes from run to run, and prints the median msgs/s and
the client's CPU per message per size:

    .venv/bin/python benchmarks/tls_write_size.py --sizes-mib 1,4,16 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.broker_throughput import make_tls, produce_batched  # noqa: E402
from benchmarks.harness import LocalCluster  # noqa: E402
from broker.net import tls_socket  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mib", default="1,4,16", help="WRITE_BYTES values to compare, in MiB (comma separated)")
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    try:
        sizes = [int(float(s) * (1 << 20)) for s in args.sizes_mib.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes-mib: not a list of numbers: {args.sizes_mib!r}")
    if not sizes or min(sizes) < 16 * 1024:
        parser.error("--sizes-mib: give sizes of 16 KiB (0.015625) or more")
    n = args.messages
    results: dict[tuple[int, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="logferry-bench-") as tmp:
        broker_tls, clients = make_tls(Path(tmp) / "pki")
        with LocalCluster(
            Path(tmp) / "tls", log={"flush_messages": 50000, "flush_ms": 200}, tls=broker_tls, client_tls=clients
        ) as cluster:
            print(f"TLS broker on {cluster.bootstrap[0]}, {n:,} messages of 200 bytes, {args.runs} runs", flush=True)
            produce_batched(cluster, "warmup", min(n, 200_000), 50)
            for run in range(args.runs):
                for per_send in (1, 50):
                    for size in sizes[:: -1 if run % 2 else 1]:
                        tls_socket.WRITE_BYTES = size
                        cpu0 = time.process_time()
                        seconds = produce_batched(cluster, f"w{run}-{per_send}-{size}", n, per_send)
                        client_ns = (time.process_time() - cpu0) / n * 1e9
                        results.setdefault((per_send, size), []).append((n / seconds, client_ns))
                        print(
                            f"  run {run + 1}: {per_send:>2} per send, writes of "
                            f"{size / (1 << 20):g} MiB {n / seconds:>12,.0f} msgs/s   "
                            f"client CPU {client_ns:>5,.0f} ns/msg",
                            flush=True,
                        )
    print()
    print(f"{'messages per send':<18} {'write MiB':>9} {'msgs/s':>12} {'client ns/msg':>14}   (median of {args.runs})")
    for (per_send, size), figures in sorted(results.items()):
        print(
            f"{per_send:<18} {size / (1 << 20):>9g} "
            f"{statistics.median(f[0] for f in figures):>12,.0f} "
            f"{statistics.median(f[1] for f in figures):>14,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

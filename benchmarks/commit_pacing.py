"""Append-to-visible latency of the broker's group commit alone, without a disk, a
network or clients: the pacing of the commit rounds (issue 18).

The real :class:`broker.server.durability.flusher.Flusher` and partition log, in this process, with
an fsync replaced by a sleep of ``--fsync-ms`` (this machine's ext4 fsync takes about
0.3 ms at p50 when quiet). A thread wakes the event loop every ``--request-ms`` (as a
producer with one request in flight wakes the broker: its acknowledgement takes about
0.4 ms at 10,000 msgs/s) with the 200-byte messages due since the last wake-up, one
append each (``--request-ms 0``: one wake-up per message); a message's latency is the
time from its append to the first wake-up of consumers that covers it. The first second is not counted. Prints
p50, p90, p99, p99.9 and max in ms; ``--checkout`` measures another checkout's flusher
(alternate them on a shared machine).

    .venv/bin/python benchmarks/commit_pacing.py --rate 10000 --fsync-ms 0.35
    .venv/bin/python benchmarks/commit_pacing.py --checkout ../old
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def measure(rate: int, seconds: float, fsync_s: float, request_s: float) -> list[float]:
    """Latencies (ms) of every append after the first second."""
    from broker.server.durability.flusher import Flusher
    from broker.storage.config import LogConfig
    from broker.storage.log_manager import LogManager
    from broker.wire import records

    def fake_sync(pendings: Sequence[Any], fs_fd: int | None = None) -> list[Any]:
        time.sleep(fsync_s)
        return [pending.settle(None) for pending in pendings]

    logs = LogManager([Path(tempfile.mkdtemp(prefix="logferry-pacing-"))], LogConfig())
    logs.load()
    plog = logs.create("pacing", 0)
    sent: list[float] = []
    ends: list[int] = []
    woken: list[tuple[float, int]] = []
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(
        logs,
        200,
        pool,
        lambda key: woken.append((time.perf_counter(), plog.visible_end)),
        lambda key: None,
        sync=fake_sync,
    )
    loop = asyncio.get_running_loop()
    batch = records.encode_batch([b"x" * 200], None, 1)
    done = asyncio.Event()

    def append(count: int) -> None:
        for _ in range(count):
            sent.append(time.perf_counter())
            plog.append(batch, 1)
            ends.append(plog.end_offset)
            flusher.appended(("pacing", 0), plog)

    def feed() -> None:
        start, total, given = time.perf_counter(), int(rate * seconds), 0
        step = max(request_s, 1 / rate)
        while given < total:
            due = min(total, int((time.perf_counter() - start) * rate) + 1)
            if due > given:
                loop.call_soon_threadsafe(append, due - given)
                given = due
            time.sleep(step)
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=feed, daemon=True).start()
    await done.wait()
    while not woken or woken[-1][1] < ends[-1]:
        await asyncio.sleep(0.01)
    flusher.close()
    pool.shutdown()
    logs.close()
    latencies, j = [], 0
    for at, end in zip(sent, ends, strict=True):
        while woken[j][1] < end:
            j += 1
        latencies.append((woken[j][0] - at) * 1e3)
    return latencies[rate:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="appends per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--fsync-ms", type=float, default=0.35, help="the fake fsync's time")
    parser.add_argument(
        "--request-ms", type=float, default=0.4, help="how often the loop is woken with the messages due (0: each)"
    )
    parser.add_argument("--checkout", type=Path, default=ROOT, help="measure the flusher of another checkout")
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))
    values = sorted(asyncio.run(measure(args.rate, args.seconds, args.fsync_ms / 1000, args.request_ms / 1000)))
    n = len(values)
    shown = " ".join(
        f"{name} {values[min(n - 1, int(n * q))]:.3f}"
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))
    )
    print(
        f"{args.checkout.resolve()}: {args.rate:,} appends/s, fsync {args.fsync_ms:g} ms, "
        f"a wake-up per {args.request_ms:g} ms: "
        f"append to visible, ms: {shown} max {values[-1]:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

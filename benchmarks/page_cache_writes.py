"""What one byte written into the page cache costs, by the size of each ``os.write``.

A broker appends each produce request to its segment file with ``os.write`` (in pieces
of at most ``broker.storage.segment.WRITE_PIECE_BYTES``). This writes ``--mib`` MiB to
a new file per case, the file kept (as a log keeps its segments, so the page cache
grows and takes fresh memory), in writes of each size given, the sizes alternating
from run to run, and prints the CPU per byte (median of ``--runs``). On this VM large
writes cost up to ten times what 256 KiB writes cost once the memory the guest used
recently is spent (docs/benchmarks.md, "Large writes, and TLS one write per request"):

    .venv/bin/python benchmarks/page_cache_writes.py --sizes-kib 256,1024,2048 --runs 12
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def write_file(path: str, total: int, size: int) -> float:
    """CPU seconds to write ``total`` bytes to a new file at ``path``, ``size`` per call."""
    buffer = memoryview(b"x" * size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        cpu0 = time.process_time()
        done = 0
        while done < total:
            done += os.write(fd, buffer[: min(size, total - done)])
        return time.process_time() - cpu0
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes-kib", default="256,1024,2048,4096", help="bytes per os.write to compare, in KiB (comma separated)"
    )
    parser.add_argument(
        "--mib", type=int, default=84, help="MiB written per case and run (84: 400,000 messages of 200 B)"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--dir", default=tempfile.gettempdir(), help="where the files go (a directory on the filesystem to measure)"
    )
    args = parser.parse_args()
    try:
        sizes = [int(s) * 1024 for s in args.sizes_kib.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes-kib: not a list of whole numbers: {args.sizes_kib!r}")
    if not sizes or min(sizes) < 1 or args.mib < 1 or args.runs < 1:
        parser.error("--sizes-kib, --mib and --runs must be positive")
    total = args.mib << 20
    workdir = tempfile.mkdtemp(prefix="logferry-page-cache-", dir=args.dir)
    results: dict[int, list[float]] = {}
    try:
        print(f"{args.mib} MiB per case into new files under {workdir}, {args.runs} runs", flush=True)
        for run in range(args.runs):
            for size in sizes[:: -1 if run % 2 else 1]:
                seconds = write_file(os.path.join(workdir, f"{run}-{size}"), total, size)
                results.setdefault(size, []).append(seconds / total * 1e9)
                print(
                    f"  run {run + 1}: writes of {size >> 10:>6} KiB {seconds / total * 1e9:6.2f} ns/byte", flush=True
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"{'KiB per write':>13} {'CPU ns/byte':>12} {'ns per 200 B':>13}   (median of {args.runs})")
    for size in sizes:
        median = statistics.median(results[size])
        print(f"{size >> 10:>13} {median:>12.2f} {median * 200:>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

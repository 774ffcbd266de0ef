"""Batch codecs on real logs: compression ratio, producer MB/s and consumer MB/s per codec.

The messages are the loghub samples (``shared/data/loghub``: Apache, HDFS, Hadoop,
OpenSSH, Spark, ZooKeeper, 2,000 lines each) as the agent sends them: one msgpack map
per line (``agent.encode``; ``--values lines``: the bare lines), file after file,
repeated up to ``--messages``. For each
codec (none, gzip, lz4, zstd):

- ratio: uncompressed batch bytes / compressed batch bytes, for batches cut as the
  producer cuts them at ``--batch-bytes`` (the agent's 1 MiB by default) and at 64 KiB;
  computed offline, so exact and independent of the machine's load;
- encode / decode MB/s: one thread building and reading those batches (msgpack and
  the codec), no I/O;
- mirror MB/s: one thread compressing uncompressed batches with ``compress_batch``,
  what ``mirror.compression`` costs the mirror (for none: a check of the CRC only);
- producer MB/s: one ``Producer`` (the agent's settings: acks=1, linger 20 ms, batch
  bytes as above) sending lists of 500 values to one broker on 127.0.0.1, until the
  last ack; MB are message bytes before compression;
- consumer MB/s: one ``SimpleConsumer`` reading them all back, decompression included.

Broker throughputs are medians and bests of ``--runs`` runs, the CPU-only figures
bests (the steadier figure on a shared machine). ZooKeeper and the broker are separate
processes, as in broker_throughput.py.

    .venv/bin/python benchmarks/compression.py --messages 300000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.encode import chunk_prefix, encode_values, valid_utf8  # noqa: E402
from benchmarks.harness import LocalCluster, wait_for_last_flush  # noqa: E402
from broker.client import (  # noqa: E402
    CODECS,
    Producer,
    SimpleConsumer,
    compress_batch,
    decode_batch,
    encode_batch,
)

LOGHUB = Path(__file__).resolve().parents[2] / "shared" / "data" / "loghub"
CODEC_ORDER = ("none", "gzip", "lz4", "zstd")
PER_SEND = 500


def load_values(directory: Path, agent: bool = True) -> list[bytes]:
    """Every line of every ``*.log`` sample as the agent's message value (or as it is)."""
    files = sorted(directory.glob("*.log"))
    if not files:
        raise SystemExit(f"no *.log files in {directory} (the loghub samples; see --data)")
    values: list[bytes] = []
    for path in files:
        data = path.read_bytes()
        lines = valid_utf8(data.splitlines(), data)
        if not agent:
            values.extend(lines)
            continue
        offsets, pos = [], 0
        for line in lines:
            offsets.append(pos)
            pos += len(line) + 1
        prefix = chunk_prefix(
            1_700_000_000_000,
            "web-01.example.com",
            f"/var/log/{path.name}",
            file_id=0x1D2C_3B4A_5968_7F00 + len(values),
        )
        values.extend(encode_values(prefix, lines, offsets))
    return values


def repeat(values: list[bytes], n: int) -> list[bytes]:
    """The first ``n`` values of ``values`` repeated end to end."""
    return (values * (n // len(values) + 1))[:n]


def cut_batches(values: list[bytes], batch_bytes: int) -> list[list[bytes]]:
    """Split as the producer does: a batch closes when the next value would pass batch_bytes."""
    batches: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for value in values:
        if current and size + len(value) > batch_bytes:
            batches.append(current)
            current, size = [], 0
        current.append(value)
        size += len(value)
    if current:
        batches.append(current)
    return batches


def offline(values: list[bytes], batch_bytes: int, codec: str) -> tuple[int, float, float, float]:
    """``(encoded bytes, encode s, decode s, mirror s)`` for ``values`` cut into batches;
    mirror: compress_batch() of the uncompressed batches, what ``mirror.compression`` costs."""
    batches = cut_batches(values, batch_bytes)
    ts = 1_700_000_000_000
    t0 = time.perf_counter()
    encoded = [encode_batch(b, None, ts, CODECS[codec]) for b in batches]
    t1 = time.perf_counter()
    for raw in encoded:
        decode_batch(raw)
    t2 = time.perf_counter()
    plain = [encode_batch(b, None, ts) for b in batches]
    t3 = time.perf_counter()
    for raw in plain:
        compress_batch(raw, CODECS[codec])
    t4 = time.perf_counter()
    return sum(map(len, encoded)), t1 - t0, t2 - t1, t4 - t3


def produce(cluster: LocalCluster, topic: str, values: list[bytes], codec: str, batch_bytes: int) -> float:
    chunks = [values[i : i + PER_SEND] for i in range(0, len(values), PER_SEND)]
    with Producer(
        brokers=cluster.bootstrap,
        acks=1,
        linger_ms=20,
        batch_bytes=batch_bytes,
        compression=codec,
        buffer_bytes=256 << 20,
    ) as producer:
        producer.send(topic, b"warm", partition=0).wait(60)  # metadata, connection
        t0 = time.perf_counter()
        send = producer.send
        for chunk in chunks:
            send(topic, chunk, partition=0)
        producer.flush()
        return time.perf_counter() - t0


def consume(cluster: LocalCluster, topic: str, expected: int) -> tuple[float, int]:
    """Seconds to read ``expected`` messages (after the warm-up one), and the log's bytes."""
    with SimpleConsumer(brokers=cluster.bootstrap, max_bytes=4 << 20) as consumer:
        end = wait_for_last_flush(consumer, topic)
        t0 = time.perf_counter()
        count = 0
        for _ in consumer.messages(topic, 0, "earliest"):
            count += 1
            if count > expected:
                break
        elapsed = time.perf_counter() - t0
    if count <= expected:
        raise SystemExit(f"consumer read {count} messages of {topic}, expected {expected + 1}")
    return elapsed, end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--batch-bytes", type=int, default=1 << 20, help="producer batch_bytes (default 1 MiB, the agent's)"
    )
    parser.add_argument("--codecs", default=",".join(CODEC_ORDER))
    parser.add_argument("--data", type=Path, default=LOGHUB, help="directory of *.log samples")
    parser.add_argument(
        "--values",
        choices=["agent", "lines"],
        default="agent",
        help="agent: each line as the agent's msgpack record (default); lines: bare lines",
    )
    args = parser.parse_args()
    codecs = [c for c in args.codecs.split(",") if c]
    for c in codecs:
        if c not in CODECS:
            raise SystemExit(f"unknown codec {c!r}; known: {', '.join(CODECS)}")
    sample = load_values(args.data, agent=args.values == "agent")
    values = repeat(sample, args.messages)
    n = len(values)
    mb = sum(map(len, values)) / 1e6
    print(
        f"{len(sample):,} distinct messages from {args.data} (mean {mb * 1e6 / n:.0f} B), "
        f"{n:,} messages = {mb:.1f} MB per run, batch_bytes {args.batch_bytes:,}, "
        f"{args.runs} runs",
        flush=True,
    )

    sizes: dict[tuple[str, int], int] = {}
    cpu: dict[str, tuple[list[float], list[float], list[float]]] = {c: ([], [], []) for c in codecs}
    for _run in range(args.runs):
        for codec in codecs:
            for bb in (64 << 10, args.batch_bytes):
                size, comp, decomp, mirror = offline(sample, bb, codec)
                sizes[(codec, bb)] = size
                if bb == args.batch_bytes:
                    cpu[codec][0].append(comp)
                    cpu[codec][1].append(decomp)
                    cpu[codec][2].append(mirror)
    sample_mb = sum(map(len, sample)) / 1e6

    prod: dict[str, list[float]] = {c: [] for c in codecs}
    cons: dict[str, list[float]] = {c: [] for c in codecs}
    stored: dict[str, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="logferry-bench-") as tmp,
        LocalCluster(Path(tmp), log={"flush_messages": 50000, "flush_ms": 200}) as cluster,
    ):
        print(f"broker on {cluster.bootstrap[0]}", flush=True)
        produce(cluster, "warmup", values[:50_000], "none", args.batch_bytes)
        for run in range(args.runs):
            for codec in codecs:
                topic = f"bench-{codec}-{run}"
                seconds = produce(cluster, topic, values, codec, args.batch_bytes)
                prod[codec].append(seconds)
                seconds_c, stored[codec] = consume(cluster, topic, n)
                cons[codec].append(seconds_c)
                print(
                    f"  run {run + 1}: {codec:<5} produce {mb / seconds:7.1f} MB/s   "
                    f"consume {mb / seconds_c:7.1f} MB/s   stored {stored[codec] / 1e6:6.1f} MB",
                    flush=True,
                )

    none_at = {bb: sizes.get(("none", bb)) or 0 for bb in (64 << 10, args.batch_bytes)}
    print()
    print(
        f"{'codec':<6} {'ratio':>7} {'ratio':>7} {'encode':>7} {'decode':>7} {'mirror':>7} "
        f"{'producer':>9} {'consumer':>9} {'producer':>9} {'consumer':>9} {'stored':>7}"
    )
    print(
        f"{'':<6} {'64 KiB':>7} {args.batch_bytes >> 10:>4} KiB {'MB/s':>7} {'MB/s':>7} {'MB/s':>7} "
        f"{'median':>9} {'median':>9} {'best':>9} {'best':>9} {'MB':>7}"
    )
    for codec in codecs:
        ratios = [
            none_at[bb] / sizes[(codec, bb)] if none_at[bb] else float("nan") for bb in (64 << 10, args.batch_bytes)
        ]
        print(
            f"{codec:<6} {ratios[0]:>7.2f} {ratios[1]:>7.2f} "
            f"{sample_mb / min(cpu[codec][0]):>7.0f} "
            f"{sample_mb / min(cpu[codec][1]):>7.0f} "
            f"{sample_mb / min(cpu[codec][2]):>7.0f} "
            f"{mb / statistics.median(prod[codec]):>9.1f} {mb / statistics.median(cons[codec]):>9.1f} "
            f"{mb / min(prod[codec]):>9.1f} {mb / min(cons[codec]):>9.1f} "
            f"{stored[codec] / 1e6:>7.1f}"
        )
    print(
        f"\nratio: uncompressed / compressed batch bytes (exact, machine-independent).\n"
        f"encode/decode: one thread building and reading batches, no I/O; mirror: one thread\n"
        f"compressing uncompressed batches (compress_batch, mirror.compression), no I/O; all\n"
        f"three MB/s of message bytes, best of {args.runs} runs.\n"
        f"producer/consumer: MB/s of message bytes through the broker, median and best of\n"
        f"{args.runs} runs; on a shared machine the best is the steadier figure."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

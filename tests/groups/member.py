"""A group member in its own process, for the consumer-group integration tests.

Run as ``python tests/groups/member.py --zk ... --group ... --topics t --out DIR --name A``.
It consumes until SIGTERM (then closes cleanly: commit, release, deregister) and
records, with one ``write`` system call per line so a ``kill -9`` loses nothing it
processed:

``DIR/NAME.records``
    one line per message: ``topic partition offset index value time``, written before
    the member asks for the next message (which is what marks it processed);
``DIR/NAME.events``
    ``assign topic partition time`` / ``revoke topic partition time`` from the
    rebalance callbacks, ``ready time`` once started, and ``closed time {metrics}``.

SIGUSR1 expires the member's own ZooKeeper session (tests.support.zookeeper's helper).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from broker.client import GroupConsumer  # noqa: E402


class Recorder:
    """Appends lines to a file with one unbuffered write each."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, text: str) -> None:
        os.write(self.fd, text.encode() + b"\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zk", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True, help="comma-separated")
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--api", choices=["iter", "poll", "streams"], default="iter")
    parser.add_argument("--start", default="earliest")
    parser.add_argument("--session-timeout", type=float, default=4.0)
    parser.add_argument("--auto-commit-ms", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--max-bytes", type=int, default=256 * 1024)
    args = parser.parse_args()

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {args.name} %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    out = Path(args.out)
    records = Recorder(out / f"{args.name}.records")
    events = Recorder(out / f"{args.name}.events")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def on_assign(tps):
        now = time.time()
        for t, p in tps:
            events.line(f"assign {t} {p} {now:.6f}")

    def on_revoke(tps):
        now = time.time()
        for t, p in tps:
            events.line(f"revoke {t} {p} {now:.6f}")

    topics = args.topics.split(",")
    consumer = GroupConsumer(
        args.group,
        topics if args.api != "streams" else None,
        zk=args.zk,
        start=args.start,
        session_timeout=args.session_timeout,
        auto_commit_ms=args.auto_commit_ms,
        consumer_id=args.name,
        num_streams=args.streams,
        max_bytes=args.max_bytes,
        iter_timeout=0.2,
        on_assign=on_assign,
        on_revoke=on_revoke,
    )

    def expire(*_):
        from tests.support.zookeeper import expire_session

        threading.Thread(target=expire_session, args=(consumer._zk,), daemon=True).start()

    signal.signal(signal.SIGUSR1, expire)
    events.line(f"ready {time.time():.6f}")

    def record(m) -> None:
        records.line(f"{m.topic} {m.partition} {m.offset} {m.index} {m.value.decode()} {time.time():.6f}")

    if args.api == "iter":
        while not stop.is_set():
            for m in consumer:
                record(m)
                if stop.is_set():
                    break
    elif args.api == "poll":
        while not stop.is_set():
            for m in consumer.poll(0.2, max_messages=500):
                record(m)
    else:
        streams = consumer.create_message_streams({t: args.streams for t in topics})

        def drain(stream) -> None:
            while not stop.is_set():
                for m in stream:
                    record(m)
                    if stop.is_set():
                        break

        threads = [threading.Thread(target=drain, args=(s,)) for ss in streams.values() for s in ss]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    metrics = consumer.metrics()
    consumer.close()
    events.line(f"closed {time.time():.6f} {json.dumps(metrics, default=str)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

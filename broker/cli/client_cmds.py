"""The broker-side subcommands: ``broker``, ``topic``, ``produce`` and ``consume``."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from broker.cli import reassign_cmd
from broker.cli.tail import Last, tail_start
from broker.cli.tls_args import add_sasl_args, add_tls_args, sasl_from_args, tls_from_args
from broker.cli.zk_args import add_zk_args, zk_target
from broker.common import topic_config
from broker.common.errors import ConfigError, LogferryError, TopicExistsError
from broker.common.names import validate_topic_name
from broker.common.zk_connect import validate_zk_connect

if TYPE_CHECKING:
    from broker.client import BrokerInfo, GroupConsumer, Message, PartitionInfo

DEFAULT_ZK = "127.0.0.1:2181/logferry/live"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the broker, topic, produce and consume commands."""
    p = sub.add_parser(
        "broker",
        help="run a broker (or: broker decommission ID)",
        description="Run one broker until SIGTERM; `broker decommission ID` "
        "moves every replica off broker ID (docs/operations.md).",
    )
    p.add_argument("--config", help="broker TOML file (see etc/live/broker-1.toml)")
    reassign_cmd.add_decommission_args(p)
    p.set_defaults(func=run_broker_cmd)

    topic = sub.add_parser("topic", help="create, list, describe or delete topics")
    tsub = topic.add_subparsers(dest="topic_command", metavar="ACTION")
    tsub.required = True
    for name, helptext in (
        ("create", "create a topic"),
        ("list", "list topics"),
        ("describe", "show each partition's leader, replicas and ISR"),
        ("delete", "delete a topic and its data"),
        ("alter", "change a topic's settings or add partitions"),
        ("elect-leaders", "move leadership back to preferred replicas"),
    ):
        tp = tsub.add_parser(name, help=helptext)
        _cluster_args(tp)
        if name in ("create", "describe", "delete", "alter"):
            tp.add_argument("name", help="topic name")
        if name in ("create", "alter"):
            tp.add_argument(
                "--config",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help=f"a per-topic setting, repeatable: {', '.join(topic_config.KEYS)} (docs/operations.md)",
            )
        if name == "alter":
            tp.add_argument(
                "--delete-config",
                action="append",
                default=[],
                metavar="KEY",
                help="remove a per-topic setting (back to the brokers' own), repeatable",
            )
            tp.add_argument(
                "--partitions",
                type=int,
                default=None,
                metavar="N",
                help="grow the topic to N partitions (never fewer; keyed messages move to other partitions)",
            )
        if name == "create":
            tp.add_argument(
                "-p", "--partitions", type=int, default=0, help="partition count (default: the broker's num_partitions)"
            )
            tp.add_argument(
                "-r",
                "--replication-factor",
                type=int,
                default=0,
                help="replicas per partition (default: the broker's default_replication_factor)",
            )
            tp.add_argument(
                "--min-insync",
                type=int,
                default=0,
                help="in-sync replicas an acks=all produce needs (default: the broker's min_insync_replicas)",
            )
            tp.add_argument(
                "--if-not-exists", action="store_true", help="succeed without changing anything if the topic exists"
            )
        if name == "list":
            tp.add_argument(
                "--under-replicated",
                action="store_true",
                help="only partitions with a replica out of sync or no leader",
            )
        tp.set_defaults(func=topic_cmd, action=name)

    p = sub.add_parser(
        "produce", help="publish lines from stdin", description="Publish each line of stdin as one message."
    )
    _cluster_args(p)
    p.add_argument("topic")
    p.add_argument("-k", "--key", help="message key (same partition for every line)")
    p.add_argument("-p", "--partition", type=int, help="explicit partition")
    p.add_argument(
        "-H",
        "--header",
        action="append",
        metavar="KEY=VALUE",
        help="a record header on every message (repeatable, kept in order; Kafka consumers "
        "see it, `consume --output json` shows it)",
    )
    p.add_argument(
        "--compression",
        choices=["none", "gzip", "lz4", "zstd"],
        default="none",
        help="batch codec (default none; docs/protocol.md compares them)",
    )
    p.add_argument(
        "--acks",
        choices=["0", "1", "all"],
        default="1",
        help="0: no answer, 1: the leader appended (default), all: every in-sync replica has it",
    )
    p.add_argument(
        "--delivery-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up on a message not acknowledged after this long (default 120); "
        "any message not delivered makes the command exit 1",
    )
    p.set_defaults(func=produce_cmd)

    p = sub.add_parser("consume", help="print messages of a topic", description="Print message values, one per line.")
    _cluster_args(p)
    p.add_argument("topic")
    p.add_argument("-p", "--partition", type=int, help="only this partition (default: all)")
    p.add_argument(
        "--from",
        dest="start",
        default="earliest",
        help="earliest, latest, a byte OFFSET, -N (the last N messages of each "
        "partition), or a TIME: ISO 8601 (2026-11-21T10:00) or how long ago "
        "(15m, 2h, 1d)",
    )
    p.add_argument("--tail", type=int, metavar="N", help="start at the last N messages of each partition (= --from -N)")
    p.add_argument("-n", "--count", type=int, help="stop after N messages")
    p.add_argument("-f", "--follow", action="store_true", help="wait for new messages")
    p.add_argument("--group", help="consume as a member of this consumer group")
    p.add_argument(
        "--format",
        default="{value}",
        help="output template: {topic} {partition} {offset} {index} {key} "
        "{value} {timestamp} {fields} (default: {value}); an agent record's "
        "{value} is its line, {fields} its fields as k=v pairs",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="text: one --format line per message (default); json: one JSON "
        'object per message, agent records decoded under "record", record headers '
        'under "headers"',
    )
    p.add_argument("--raw", action="store_true", help="do not decode agent records: print the value bytes as stored")
    p.set_defaults(func=consume_cmd)


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--zk", default=None, help=f"ZooKeeper connect string with chroot (default: $LOGFERRY_ZK or {DEFAULT_ZK})"
    )
    group.add_argument("--brokers", default=None, help="comma-separated host:port list instead of --zk")
    parser.add_argument(
        "--listener",
        metavar="NAME",
        default=None,
        help="the brokers' named listener to reach them on, from their "
        "ZooKeeper registrations (default: the default listener; "
        "docs/security.md#listeners)",
    )
    add_tls_args(parser)
    add_sasl_args(parser)
    add_zk_args(parser)


def cluster_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``zk=`` or ``brokers=`` keyword for the client classes, and ``tls=`` when the TLS
    options ask for it, from the common options."""
    tls = tls_from_args(args)
    extra: dict[str, Any] = {"tls": tls} if tls is not None else {}
    sasl = sasl_from_args(args)
    if sasl is not None:
        extra["sasl"] = sasl
    if getattr(args, "listener", None):
        extra["listener"] = args.listener
    if args.brokers:
        return {"brokers": [b.strip() for b in args.brokers.split(",") if b.strip()], **extra}
    zk = args.zk or os.environ.get("LOGFERRY_ZK", DEFAULT_ZK)
    try:
        zk = validate_zk_connect(zk)
    except ConfigError as exc:
        raise ConfigError(f"{'--zk' if args.zk else '$LOGFERRY_ZK'}: {exc}") from None
    return {"zk": zk_target(args, zk), **extra}


def run_broker_cmd(args: argparse.Namespace) -> int:
    from broker.server.broker import run_broker
    from broker.server.config import load_broker_config

    if args.action == "decommission":
        return reassign_cmd.decommission_cmd(args)
    if not args.config:
        raise ConfigError("broker: give --config FILE (or: broker decommission ID)")
    return run_broker(load_broker_config(args.config))


def topic_cmd(args: argparse.Namespace) -> int:
    from broker.client import Admin

    if getattr(args, "name", None) is not None:
        validate_topic_name(args.name)  # a usage error (exit 2), before connecting
    # settings are checked before connecting, each error naming its key
    config = topic_config.parse_pairs(getattr(args, "config", None) or [])
    if args.action == "alter":
        for key in args.delete_config:
            topic_config.check_key(key)
        if not config and not args.delete_config and args.partitions is None:
            raise ConfigError("topic alter needs --config, --delete-config or --partitions")
    with Admin(**cluster_kwargs(args)) as admin:
        if args.action == "create":
            try:
                assignment = admin.create_topic(
                    args.name, args.partitions, args.replication_factor, args.min_insync, config
                )
            except TopicExistsError:
                if not args.if_not_exists:
                    raise
                print(f"topic {args.name} exists; nothing changed (--if-not-exists)")
                return 0
            rf = len(next(iter(assignment.values())))
            print(f"created topic {args.name} with {len(assignment)} partitions, replication factor {rf}")
        elif args.action == "alter":
            if config or args.delete_config:
                now = admin.alter_topic(args.name, config, args.delete_config)
                print(f"topic {args.name} settings: {_settings(now)}")
            if args.partitions is not None:
                grown = admin.create_partitions(args.name, args.partitions)
                print(f"topic {args.name} now has {len(grown)} partitions")
        elif args.action == "list" and args.under_replicated:
            found = admin.under_replicated()
            if found:
                _print_partitions(found, admin.brokers())
            else:
                print("no under-replicated partitions", file=sys.stderr)
        elif args.action == "list":
            for name in admin.list_topics():
                print(name)
        elif args.action == "describe":
            parts = admin.describe_partitions(args.name)
            print(f"topic {args.name}: {len(parts)} partitions; settings: {_settings(admin.topic_config(args.name))}")
            _print_partitions({args.name: parts}, admin.brokers())
        elif args.action == "elect-leaders":
            controller = admin.elect_preferred_leaders()
            print(f"asked the controller (broker {controller}) to elect preferred leaders")
        elif args.action == "delete":
            admin.delete_topic(args.name)
            print(f"deleted topic {args.name}")
    return 0


def _settings(config: dict[str, Any]) -> str:
    """Per-topic overrides as ``k=v`` pairs, or what applies without them."""
    if not config:
        return "the brokers' defaults"
    return " ".join(f"{k}={v}" for k, v in sorted(config.items()))


def _print_partitions(topics: dict[str, dict[int, PartitionInfo]], brokers: dict[int, BrokerInfo]) -> None:
    """One line per partition: leader (and its address), replicas, ISR."""
    print(f"{'TOPIC':<20} {'PARTITION':>9}  {'LEADER':>6}  {'ADDRESS':<21} {'REPLICAS':<12} ISR")
    for topic, parts in topics.items():
        for partition, info in parts.items():
            where = brokers.get(info.leader)
            address = f"{where.host}:{where.port}" if where else "(no leader)"
            replicas = ",".join(map(str, info.replicas))
            isr = ",".join(map(str, info.isr))
            flag = "  under-replicated" if info.under_replicated else ""
            print(f"{topic:<20} {partition:>9}  {info.leader:>6}  {address:<21} {replicas:<12} {isr}{flag}")


def produce_cmd(args: argparse.Namespace) -> int:
    """Publish stdin's lines; exit 1 saying how many were not delivered, and why, if any."""
    from broker.cli.delivery import DeliveryTally
    from broker.client import Producer

    validate_topic_name(args.topic)
    key = args.key.encode() if args.key is not None else None
    headers = parse_headers(getattr(args, "header", None))
    acks = "all" if args.acks == "all" else int(args.acks)
    if args.delivery_timeout <= 0:
        raise ConfigError("--delivery-timeout must be positive")
    tally = DeliveryTally()
    producer = Producer(
        **cluster_kwargs(args), acks=acks, compression=args.compression, delivery_timeout=args.delivery_timeout
    )
    try:
        for chunk in _line_chunks(sys.stdin.buffer, 1000):
            if headers:
                future = _send_with_headers(producer, args.topic, chunk, key, args.partition, headers)
            else:
                future = producer.send(args.topic, chunk, key=key, partition=args.partition)
            tally.sent(len(chunk), future)
    except KeyboardInterrupt:
        _close_quietly(producer, timeout=5.0)
        raise
    except (LogferryError, OSError) as exc:  # stop reading; what is queued still goes out
        tally.failed(exc)
    try:
        producer.close()
    except LogferryError as exc:
        tally.failed(exc)
    print(tally.outcome(producer.metrics()["messages_sent"], args.topic), file=sys.stderr)
    return 0


def parse_headers(items: Iterable[str] | None) -> list[list[bytes]]:
    """``--header KEY=VALUE`` arguments as ``[key, value]`` pairs of UTF-8 bytes, in
    order (a key may repeat, as in Kafka); the value is everything after the first
    ``=`` and may be empty. ConfigError for an item without ``=`` or with an empty key."""
    headers = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--header {item!r}: give KEY=VALUE (a non-empty key, then =, then the value)")
        headers.append([key.encode(), value.encode()])
    return headers


def _send_with_headers(
    producer: Any, topic: str, values: list[bytes], key: bytes | None, partition: int | None, headers: list[list[bytes]]
) -> Any:
    """Queue ``values`` as one batch whose every message carries ``headers``.

    The producer's ``send`` has no headers, so the batch is encoded here with the
    payload's headers column and queued with ``send_raw``, to the partition ``send``
    would have picked (a key keeps its partition)."""
    from broker.common.errors import UnknownTopicOrPartitionError
    from broker.wire import records

    if partition is None:
        partition = producer.partition_for(topic, key)
    elif partition not in producer.partitions(topic):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    keys = [key] * len(values) if key is not None else None
    batch = records.encode_batch(values, keys, int(time.time() * 1000), producer.codec, headers=[headers] * len(values))
    return producer.send_raw(topic, partition, batch)


def _line_chunks(stream: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    """Lines without their line ends, ``size`` at a time (one ``send`` per chunk)."""
    chunk: list[bytes] = []
    for line in stream:
        chunk.append(line.rstrip(b"\r\n"))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _close_quietly(producer: Any, timeout: float) -> None:
    with contextlib.suppress(LogferryError):
        producer.close(timeout)


def parse_start(text: str, now: float | None = None) -> int | str | dt.datetime | Last:
    """``earliest``/``latest``/an offset/ISO time/relative time (``-15m``) -> start.

    ``-N`` (digits only) is "the last N messages": :class:`broker.cli.tail.Last`."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    if text.startswith("-") and text[1:].isdigit():
        return Last(int(text[1:]))
    match = re.fullmatch(r"-?(\d+)([smhd])", text)  # "15m" = "-15m": 15 minutes ago
    if match:
        seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return dt.datetime.fromtimestamp((now or time.time()) - seconds, tz=dt.UTC)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--from {text!r}: use earliest, latest, an offset, an ISO time or a relative time like -15m"
        ) from None
    return when if when.tzinfo else when.astimezone()


def consume_cmd(args: argparse.Namespace) -> int:
    # render imports broker.client (~50 ms of start): here, so that `logferry broker` and the rest do not
    from broker.cli.render import check_format, render, render_json

    validate_topic_name(args.topic)
    check_format(args.format)
    start = parse_start(args.start)
    if getattr(args, "tail", None) is not None:
        if args.tail < 0:
            raise ConfigError(f"--tail {args.tail}: give how many messages, 0 or more")
        start = Last(args.tail)
    if args.group:
        try:
            from broker.client import GroupConsumer
        except ImportError:
            raise ConfigError("--group needs consumer groups, which this build lacks") from None
        messages = _group_messages(GroupConsumer, args)
    else:
        messages = _simple_messages(args, start)
    out = sys.stdout
    fmt = args.format
    raw = getattr(args, "raw", False)
    as_json = getattr(args, "output", "text") == "json"
    for count, message in enumerate(messages, 1):
        out.write((render_json(message, raw) if as_json else render(fmt, message, raw)) + "\n")
        if args.count is not None and count >= args.count:
            break
    out.flush()
    return 0


def _simple_messages(args: argparse.Namespace, start: int | str | dt.datetime | Last) -> Iterator[Message]:
    from broker.client import SimpleConsumer

    consumer = SimpleConsumer(**cluster_kwargs(args))
    try:
        partitions = [args.partition] if args.partition is not None else consumer.partitions(args.topic)
        # --from -N and a time start: each partition starts at a batch boundary, then
        # skips the messages before the last N / before that time.
        skips = dict.fromkeys(partitions, 0)
        offsets: dict[int, int] = {}
        for p in partitions:
            if isinstance(start, Last):
                offsets[p], skips[p] = tail_start(consumer, args.topic, p, start.messages)
            else:
                offsets[p], skips[p] = consumer.resolve_position(args.topic, p, start)
        if len(partitions) == 1:
            p = partitions[0]
            limit = None if args.count is None else args.count + skips[p]
            yield from islice(
                consumer.messages(args.topic, p, offsets[p], follow=args.follow, limit=limit), skips[p], None
            )
            return
        while True:
            got = 0
            for p in partitions:
                result = consumer.fetch(args.topic, p, offsets[p], max_wait_ms=0)
                for batch in result.batches:
                    from broker.client import messages_of

                    for message in messages_of(args.topic, p, batch):
                        got += 1
                        if skips[p]:
                            skips[p] -= 1
                            continue
                        yield message
                offsets[p] = result.next_offset
            if not got:
                if not args.follow:
                    return
                time.sleep(0.2)
    finally:
        consumer.close()


def _group_messages(group_cls: type[GroupConsumer], args: argparse.Namespace) -> Iterator[Message]:
    # A group resumes from its committed offsets; --from sets where a new group starts.
    if args.start not in ("earliest", "latest") or getattr(args, "tail", None) is not None:
        raise ConfigError(
            "--group takes --from earliest or latest (where a new group starts); "
            "use `logferry group seek` to move a group to an offset or time"
        )
    consumer = group_cls(group=args.group, topics=[args.topic], start=args.start, **cluster_kwargs(args))
    try:
        # not `yield from`: that would also close the consumer when this generator is
        # closed, before the finally below closes it
        for message in consumer:  # noqa: UP028
            yield message
    finally:
        consumer.close()

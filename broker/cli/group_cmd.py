"""``logferry group``: list, describe, seek and delete consumer groups.

Everything here reads or writes the group's znodes (:mod:`broker.client.group.offsets`) and
asks the brokers for log ends; no group member is involved, so the commands work on
a group whose members are all down. ``seek`` and ``delete`` refuse while members are
registered (a live member would overwrite the new offsets at its next commit, or
re-create what was deleted) unless ``--force``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from broker.coordination import zk as zkmod
from broker.cli.client_cmds import _cluster_args, cluster_kwargs, parse_start
from broker.common.errors import ConfigError, LogferryError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``group list|describe|seek|delete`` on the main parser's subparsers."""
    group = sub.add_parser("group", help="list, describe, seek or delete consumer groups",
                           description="Inspect and administer consumer groups (docs/groups.md).")
    gsub = group.add_subparsers(dest="group_command", metavar="ACTION")
    gsub.required = True

    p = gsub.add_parser("list", help="list groups with their members and topics")
    _cluster_args(p)
    p.set_defaults(func=list_cmd)

    p = gsub.add_parser("describe", help="per partition: owner, committed offset, lag")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.set_defaults(func=describe_cmd)

    p = gsub.add_parser("seek", help="set a group's committed offsets of a topic")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append",
                   help="only this partition (repeatable; default: all)")
    p.add_argument("--to", required=True,
                   help="earliest, latest, a byte OFFSET, or a TIME: ISO 8601 (2026-11-21T10:00) "
                        "or relative (--to=-15m, -2h, -1d; note the =)")
    p.add_argument("--force", action="store_true",
                   help="even while members are registered (they overwrite it at their next "
                        "commit unless they restart or rebalance first)")
    p.set_defaults(func=seek_cmd)

    p = gsub.add_parser("delete", help="delete a group's members, owners and offsets")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--force", action="store_true", help="even while members are registered")
    p.set_defaults(func=delete_cmd)


# -- plumbing -------------------------------------------------------------------------------


def _zk_connect(args: argparse.Namespace) -> str:
    where = cluster_kwargs(args)
    if "zk" not in where:
        raise ConfigError("consumer groups live in ZooKeeper: use --zk (not --brokers)")
    return where["zk"]


class _Session:
    """A ZooKeeper client and a broker client for one command."""

    def __init__(self, args: argparse.Namespace, brokers: bool = True):
        from broker.client import SimpleConsumer

        self.connect = _zk_connect(args)
        self.zk = zkmod.connect(self.connect)
        self.simple = None
        if brokers:
            try:
                self.simple = SimpleConsumer(zk=self.connect, request_timeout=5.0, metadata_retries=1)
            except LogferryError:
                self.simple = None

    def close(self) -> None:
        if self.simple is not None:
            self.simple.close()
        zkmod.close(self.zk)

    def __enter__(self) -> "_Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _require_group(session: _Session, group: str) -> None:
    from broker.client.group.offsets import group_path, validate_group_name

    validate_group_name(group)
    if session.zk.exists(group_path(group)) is None:
        raise ConfigError(f"no consumer group {group!r} at {session.connect} "
                          "(`logferry group list` shows the groups)")


def _refuse_while_active(session: _Session, group: str, force: bool, action: str) -> None:
    from broker.client.group.offsets import read_members

    members = read_members(session.zk, group)
    if members and not force:
        raise ConfigError(f"group {group!r} has {len(members)} active member(s) "
                          f"({', '.join(sorted(members))}); stop them before you {action}, or "
                          "pass --force")


def _topic_partitions(session: _Session, topic: str) -> list[int]:
    try:
        raw, _ = session.zk.get(zkmod.topic_path(topic))
    except NoNodeError:
        raise ConfigError(f"no topic {topic!r} (`logferry topic list` shows the topics)") from None
    return sorted(zkmod.read_assignment(raw))


def _fmt_time(ms: int) -> str:
    if not ms:
        return "-"
    when = dt.datetime.fromtimestamp(ms / 1000).astimezone()
    age = max(time.time() - ms / 1000, 0)
    return f"{when:%Y-%m-%d %H:%M:%S} ({_fmt_age(age)} ago)"


def _fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# -- commands --------------------------------------------------------------------------------


def list_cmd(args: argparse.Namespace) -> int:
    from broker.client.group.offsets import list_groups, read_members, read_offsets

    with _Session(args, brokers=False) as session:
        rows = []
        for group in list_groups(session.zk):
            members = read_members(session.zk, group)
            topics = sorted({t for t, _ in read_offsets(session.zk, group)})
            rows.append([group, len(members), ",".join(topics) or "-"])
        if not rows:
            print("no consumer groups")
            return 0
        print(_table(rows, ["GROUP", "MEMBERS", "TOPICS"]))
    return 0


def describe(session: _Session, group: str) -> dict[str, Any]:
    """Everything ``describe`` shows, as plain data (members, partitions, lag)."""
    from broker.client.group.assignment import Subscription, resolve_subscription
    from broker.client.group.offsets import read_members, read_offsets, read_owners

    members = read_members(session.zk, group)
    offsets = read_offsets(session.zk, group)
    owners = read_owners(session.zk, group)
    all_topics = session.zk.get_children(zkmod.BROKER_TOPICS)
    topics = {t for t, _ in offsets} | {t for t, _ in owners}
    for member in members.values():
        topics |= set(resolve_subscription(Subscription.from_json(member.data), all_topics))
    partitions = []
    for topic in sorted(topics):
        try:
            numbers = _topic_partitions(session, topic)
        except ConfigError:  # topic deleted: show what the group still records
            numbers = sorted({p for t, p in offsets if t == topic} | {p for t, p in owners if t == topic})
        for p in numbers:
            committed = offsets.get((topic, p))
            row: dict[str, Any] = {"topic": topic, "partition": p, "owner": owners.get((topic, p)),
                                   "committed": committed.offset if committed else None,
                                   "skip": committed.skip if committed else None,
                                   "committed_at_ms": committed.time if committed else None,
                                   "log_start": None, "log_end": None, "lag_bytes": None,
                                   "lag_messages": None}
            if session.simple is not None:
                try:
                    info = session.simple.offset_info(topic, p)
                    row["log_start"], row["log_end"] = info["start"], info["end"]
                    if committed is not None:
                        # From the committed batch to the end, less the messages of that
                        # batch already processed (``skip``), at the average message size.
                        span = max(info["end"] - committed.offset, 0)
                        avg = float(info.get("avg_message_bytes") or 0)
                        done = round(committed.skip * avg)
                        row["lag_bytes"] = max(span - done, 0)
                        row["lag_messages"] = max(round(span / avg) - committed.skip, 0) if avg > 0 and span else 0
                except Exception as exc:  # a broker down must not hide the rest
                    row["error"] = str(exc)
            partitions.append(row)
    return {"group": group,
            "members": {cid: {**m.data, "registered_ms": m.ctime_ms} for cid, m in sorted(members.items())},
            "partitions": partitions}


def describe_cmd(args: argparse.Namespace) -> int:
    with _Session(args) as session:
        _require_group(session, args.group)
        info = describe(session, args.group)
    if args.json:
        json.dump(info, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    members = info["members"]
    print(f"group {args.group}: {len(members)} member(s)")
    if members:
        rows = []
        for cid, data in members.items():
            subscription = sorted((data.get("subscription") or {}).items())
            sub = data.get("pattern") or ",".join(f"{t}({n})" for t, n in subscription)
            rows.append([cid, sub or "-", data.get("start", "-"), data.get("host", "-"),
                         data.get("pid", "-"), _fmt_time(data.get("registered_ms", 0))])
        print(_table(rows, ["MEMBER", "SUBSCRIPTION", "START", "HOST", "PID", "SINCE"]))
        print()
    rows = []
    total_bytes = total_msgs = 0
    for r in info["partitions"]:
        lag_b, lag_m = r["lag_bytes"], r["lag_messages"]
        total_bytes += lag_b or 0
        total_msgs += lag_m or 0
        rows.append([r["topic"], r["partition"], r["owner"] or "-",
                     "-" if r["committed"] is None else r["committed"],
                     "-" if r["skip"] is None else r["skip"],
                     "?" if r["log_end"] is None else r["log_end"],
                     "-" if lag_b is None else lag_b,
                     "-" if lag_m is None else f"~{lag_m}",
                     _fmt_time(r["committed_at_ms"] or 0)])
    if rows:
        print(_table(rows, ["TOPIC", "PARTITION", "OWNER", "COMMITTED", "SKIP", "LOG-END",
                            "LAG-BYTES", "LAG-MSGS", "LAST-COMMIT"]))
        print(f"total lag: {total_bytes} bytes, ~{total_msgs} messages")
    else:
        print("no partitions (nothing subscribed or committed yet)")
    errors = [r for r in info["partitions"] if r.get("error")]
    for r in errors[:5]:
        print(f"warning: {r['topic']}-{r['partition']}: {r['error']}", file=sys.stderr)
    return 0


def seek_cmd(args: argparse.Namespace) -> int:
    from broker.client.group.consumer import resolve_position
    from broker.client.group.offsets import Committed, read_offsets, write_offsets

    to = parse_start(args.to)
    with _Session(args) as session:
        _require_group(session, args.group)
        _refuse_while_active(session, args.group, args.force, "seek")
        if session.simple is None:
            raise ConfigError("no broker reachable to resolve offsets; start the brokers first")
        available = _topic_partitions(session, args.topic)
        partitions = sorted(set(args.partition)) if args.partition else available
        unknown = [p for p in partitions if p not in available]
        if unknown:
            raise ConfigError(f"topic {args.topic!r} has partitions {available}, not {unknown}")
        before = read_offsets(session.zk, args.group, [args.topic])
        positions = {}
        for p in partitions:
            offset, skip = resolve_position(session.simple, args.topic, p, to)
            positions[(args.topic, p)] = Committed.now(offset, skip)
        write_offsets(session.zk, args.group, positions)
    rows = []
    for (topic, p), new in sorted(positions.items()):
        old = before.get((topic, p))
        rows.append([topic, p, f"{old.offset}+{old.skip}" if old else "-", f"{new.offset}+{new.skip}"])
    print(_table(rows, ["TOPIC", "PARTITION", "FROM", "TO"]))
    print(f"group {args.group}: {len(rows)} partition(s) of {args.topic} set to {args.to}")
    return 0


def delete_cmd(args: argparse.Namespace) -> int:
    from broker.client.group.offsets import delete_group

    with _Session(args, brokers=False) as session:
        _require_group(session, args.group)
        _refuse_while_active(session, args.group, args.force, "delete it")
        delete_group(session.zk, args.group)
    print(f"deleted group {args.group}")
    return 0


__all__ = ["add_parser", "describe"]

"""``logferry group``: list, describe, seek, delete and copy-offsets of consumer groups.

Everything here prints what :class:`broker.client.GroupAdmin` reads or writes (the
group's znodes, and log ends from the brokers); no group member is involved, so the
commands work on a group whose members are all down. ``seek`` and ``delete`` refuse while members are
registered (a live member would overwrite the new offsets at its next commit, or
re-create what was deleted) unless ``--force``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from broker.cli.client_cmds import _cluster_args, cluster_kwargs, parse_start
from broker.cli.tail import Last
from broker.common.errors import AuthorizationError, ConfigError
from broker.common.names import validate_topic_name

if TYPE_CHECKING:
    from broker.client import GroupAdmin


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``group list|describe|seek|delete`` on the main parser's subparsers."""
    group = sub.add_parser(
        "group",
        help="list, describe, seek or delete consumer groups",
        description="Inspect and administer consumer groups (docs/groups.md).",
    )
    gsub = group.add_subparsers(dest="group_command", metavar="ACTION")
    gsub.required = True

    p = gsub.add_parser("list", help="list groups with their members and topics")
    _cluster_args(p)
    p.set_defaults(func=list_cmd)

    p = gsub.add_parser("describe", help="per partition: owner, committed offset, lag")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument(
        "--window",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="read the group once a second for this long and judge its status "
        "(Burrow's rules, docs/groups.md) from the commits seen; default 0: "
        "one reading, which judges nothing (OK)",
    )
    p.set_defaults(func=describe_cmd)

    p = gsub.add_parser("seek", help="set a group's committed offsets of a topic")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable; default: all)")
    p.add_argument(
        "--to",
        required=True,
        help="earliest, latest, a byte OFFSET, or a TIME: ISO 8601 (2026-11-21T10:00) "
        "or relative (--to=-15m, -2h, -1d; note the =)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="even while members are registered (they overwrite it at their next "
        "commit unless they restart or rebalance first)",
    )
    p.set_defaults(func=seek_cmd)

    p = gsub.add_parser("delete", help="delete a group's members, owners and offsets")
    _cluster_args(p)
    p.add_argument("group")
    p.add_argument("--force", action="store_true", help="even while members are registered")
    p.set_defaults(func=delete_cmd)

    p = gsub.add_parser(
        "copy-offsets",
        help='copy a group\'s committed offsets to another cluster (one mirrored with mode = "preserve": same offsets)',
    )
    p.add_argument("--from-zk", required=True, help="source cluster's ZooKeeper (with chroot)")
    p.add_argument("--to-zk", required=True, help="target cluster's ZooKeeper (with chroot)")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", action="append", help="only this topic (repeatable; default: all)")
    p.add_argument("--force", action="store_true", help="even while members of the group are registered on the target")
    p.set_defaults(func=copy_offsets_cmd)


# -- plumbing -------------------------------------------------------------------------------


def _admin(args: argparse.Namespace, brokers: bool = True) -> GroupAdmin:
    from broker.client import GroupAdmin

    where = cluster_kwargs(args)
    if "zk" not in where:
        raise ConfigError("consumer groups live in ZooKeeper: use --zk (not --brokers)")
    return GroupAdmin(
        where["zk"], brokers=brokers, tls=where.get("tls"), sasl=where.get("sasl"), listener=where.get("listener")
    )


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
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


# -- commands --------------------------------------------------------------------------------


def list_cmd(args: argparse.Namespace) -> int:
    with _admin(args, brokers=False) as admin:
        rows: list[list[Any]] = []
        for group in admin.groups():
            try:
                members = admin.members(group)
                topics = sorted({t for t, _ in admin.offsets(group)})
            except AuthorizationError:  # group ACLs: listed, not described
                rows.append([group, "?", "(no describe ACL)"])
                continue
            rows.append([group, len(members), ",".join(topics) or "-"])
        if not rows:
            print("no consumer groups")
            return 0
        print(_table(rows, ["GROUP", "MEMBERS", "TOPICS"]))
    return 0


def describe(admin: GroupAdmin, group: str, window_s: float = 0.0) -> dict[str, Any]:
    """Everything ``describe`` shows, as plain data (see :meth:`GroupAdmin.describe`),
    the status judged over readings once a second for ``window_s`` seconds."""
    from broker.client import StatusWindows

    windows = StatusWindows()
    deadline = time.monotonic() + max(window_s, 0.0)
    info = admin.describe(group, windows)
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
        info = admin.describe(group, windows)
    return info


def describe_cmd(args: argparse.Namespace) -> int:
    if args.window < 0:
        raise ConfigError(f"--window {args.window}: give seconds, 0 or more")
    with _admin(args) as admin:
        admin.require(args.group)
        info = describe(admin, args.group, args.window)
    if args.json:
        json.dump(info, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    members = info["members"]
    print(f"group {args.group}: {len(members)} member(s), status {info['status']}")
    if members:
        rows = []
        for cid, data in members.items():
            subscription = sorted((data.get("subscription") or {}).items())
            sub = data.get("pattern") or ",".join(f"{t}({n})" for t, n in subscription)
            rows.append(
                [
                    cid,
                    sub or "-",
                    data.get("start", "-"),
                    data.get("host", "-"),
                    data.get("pid", "-"),
                    _fmt_time(data.get("registered_ms", 0)),
                ]
            )
        print(_table(rows, ["MEMBER", "SUBSCRIPTION", "START", "HOST", "PID", "SINCE"]))
        print()
    rows = []
    total_bytes = total_msgs = 0
    for r in info["partitions"]:
        lag_b, lag_m = r["lag_bytes"], r["lag_messages"]
        total_bytes += lag_b or 0
        total_msgs += lag_m or 0
        rows.append(
            [
                r["topic"],
                r["partition"],
                r["owner"] or "-",
                "-" if r["committed"] is None else r["committed"],
                "-" if r["skip"] is None else r["skip"],
                "?" if r["log_end"] is None else r["log_end"],
                "-" if lag_b is None else lag_b,
                "-" if lag_m is None else f"~{lag_m}",
                r["status"],
                _fmt_time(r["committed_at_ms"] or 0),
            ]
        )
    if rows:
        print(
            _table(
                rows,
                [
                    "TOPIC",
                    "PARTITION",
                    "OWNER",
                    "COMMITTED",
                    "SKIP",
                    "LOG-END",
                    "LAG-BYTES",
                    "LAG-MSGS",
                    "STATUS",
                    "LAST-COMMIT",
                ],
            )
        )
        print(f"total lag: {total_bytes} bytes, ~{total_msgs} messages")
    else:
        print("no partitions (nothing subscribed or committed yet)")
    errors = [r for r in info["partitions"] if r.get("error")]
    for r in errors[:5]:
        print(f"warning: {r['topic']}-{r['partition']}: {r['error']}", file=sys.stderr)
    return 0


def seek_cmd(args: argparse.Namespace) -> int:
    validate_topic_name(args.topic)
    to = parse_start(args.to)
    if isinstance(to, Last):  # --to=-5: parse_start's "last N messages", a consume start
        raise ConfigError(
            f"--to {args.to}: give earliest, latest, an offset or a time "
            "(-N, the last N messages, is for consume --from)"
        )
    with _admin(args) as admin:
        moved = admin.seek(args.group, args.topic, to, args.partition, force=args.force)
    rows = []
    for (topic, p), (old, new) in moved.items():
        rows.append([topic, p, f"{old.offset}+{old.skip}" if old else "-", f"{new.offset}+{new.skip}"])
    print(_table(rows, ["TOPIC", "PARTITION", "FROM", "TO"]))
    print(f"group {args.group}: {len(rows)} partition(s) of {args.topic} set to {args.to}")
    return 0


def delete_cmd(args: argparse.Namespace) -> int:
    with _admin(args, brokers=False) as admin:
        admin.delete(args.group, force=args.force)
    print(f"deleted group {args.group}")
    return 0


def copy_offsets_cmd(args: argparse.Namespace) -> int:
    """Copy committed positions between clusters (docs/mirror.md, "Failing a group over")."""
    from broker.client import GroupAdmin
    from broker.common.zk_connect import validate_zk_connect

    source = validate_zk_connect(args.from_zk)
    target = validate_zk_connect(args.to_zk)
    with GroupAdmin(source, brokers=False) as src, GroupAdmin(target) as dst:
        copied = src.copy_offsets(args.group, dst, args.topic, force=args.force)
    rows, behind = [], 0
    for (topic, p), (committed, end) in copied.items():
        late = end is not None and committed.offset > end
        behind += late
        rows.append(
            [
                topic,
                p,
                f"{committed.offset}+{committed.skip}",
                "-" if end is None else end,
                "NOT COPIED YET" if late else "",
            ]
        )
    print(_table(rows, ["TOPIC", "PARTITION", "OFFSET", "TARGET END", ""]))
    print(
        f"group {args.group}: {len(rows)} position(s) copied to {target}"
        + (f"; {behind} lie past the target's end (the mirror has not copied them yet)" if behind else "")
    )
    return 0


__all__ = ["add_parser", "describe"]
